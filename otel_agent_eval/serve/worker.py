"""One worker process of `serve --workers N`: a `Service` without listeners, fed by its parent over a pipe.

The parent (`workers.py`) keeps the receivers and sends each worker the part of every request
whose traces are its own (`split.py`). The worker decodes it with the single process's readers,
admits it into its `Intake`, evaluates it with its `Pipeline` and forwards it with its
`Forwarder`: the very objects of one `serve` process. Its metrics go to prometheus-client's
multiprocess files (`PROMETHEUS_MULTIPROC_DIR`, set by the parent), which the parent's
/metrics sums.

Frames, both ways: a 4-byte big-endian length, a 1-byte type, the payload.
Parent to worker: `C` configuration (pickled, first), `B` a batch (8-byte request id, 1-byte
kind 0 protobuf / 1 JSON, the body), `R` reload the catalog (pickled path or None), `F` write the
metric files now (8-byte sequence number; the parent is about to read them), `S` stop.
Worker to parent, `M` with a pickled tuple:
  ("ready", pid) | ("error", line) | ("reply", request_id, spans_taken, problems[, not_forwarded])
  | ("done", spans_evaluated, open_runs, held_back_calls, forward_queued) | ("fwd", outcome, spans)
  | ("flushed", sequence) | ("wal", counts) | ("stopped",)

The worker sums its metric updates in memory and writes the files when the parent asks (before a
scrape or an OTLP metrics export), every FLUSH_INTERVAL_S, and when it stops: writing them once a
batch took about 14 % of a worker's evaluation thread.

The worker ignores SIGINT, SIGTERM and SIGHUP: its parent tells it what to do, so a signal to
the whole process group (Ctrl-C, systemd) still ends in one orderly drain. When the pipe closes
(the parent is gone), it drains and exits as on `S`.

    $ python -m otel_agent_eval.serve.worker   # only ever started by `serve --workers N`
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import struct
import sys
import threading
from typing import IO, Any

__all__ = ["BATCH", "CONFIG", "FLUSH", "MESSAGE", "RELOAD", "STOP", "read_frame", "write_frame"]

HEADER = struct.Struct(">IB")
BATCH_HEADER = struct.Struct(">QB")
FLUSH_SEQUENCE = struct.Struct(">Q")
CONFIG, BATCH, RELOAD, FLUSH, STOP, MESSAGE = b"C", b"B", b"R", b"F", b"S", b"M"
FLUSH_INTERVAL_S = 1.0  # the files are never older than this, whether or not the parent asks
KIND_PROTOBUF, KIND_JSON = 0, 1
MAX_FRAME = 1 << 31


def write_frame(out: IO[bytes], kind: bytes, payload: bytes = b"", prefix: bytes = b"") -> None:
    out.write(HEADER.pack(len(prefix) + len(payload), kind[0]))
    if prefix:
        out.write(prefix)
    if payload:
        out.write(payload)
    out.flush()


def read_frame(inp: IO[bytes]) -> tuple[bytes, bytes] | None:
    """(type, payload), or None when the pipe closed (mid-frame too)."""
    header = inp.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    length, kind = HEADER.unpack(header)
    payload = inp.read(length) if length else b""
    if len(payload) < length:
        return None
    return bytes((kind,)), payload


class _Parent:
    """The pipe to the parent; one writer at a time (the pipe reader, the intake and the forwarder all report)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.broken = False

    def send(self, *message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self.lock:
            if self.broken:
                return
            try:
                write_frame(self.out, MESSAGE, data)
            except (OSError, ValueError):
                self.broken = True  # the parent is gone; the read loop sees the pipe close and drains


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    inp = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    out = os.fdopen(os.dup(1), "wb", buffering=1 << 16)
    os.dup2(2, 1)  # a stray print must never land in the frames
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    parent = _Parent(out)
    frame = read_frame(inp)
    if frame is None or frame[0] != CONFIG:
        print("otel-agent-eval serve worker: started without its configuration; it is only started by serve --workers",
              file=sys.stderr)
        return 2
    options = pickle.loads(frame[1])
    index = options["index"]
    logging.basicConfig(level=options.get("log_level", "INFO"), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [worker {index}] %(message)s")
    logging.getLogger("otel_agent_eval.serve.service").setLevel(logging.WARNING)  # its "stopped" line counts nothing here
    try:
        service, sync = _build(options, parent)
    except Exception as exc:  # noqa: BLE001 - one line to the parent, which stops with it
        parent.send("error", f"worker {index} could not start: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return 2
    from .service import collect_less

    collect_less()
    parent.send("ready", os.getpid())
    stopping = threading.Event()
    threading.Thread(target=_flush_every, args=(sync, stopping), name="otel-agent-eval-metric-files", daemon=True).start()
    from .ack import AckLater

    acks = AckLater(service.receiving.ack) if service.receiving.ack is not None else None  # `--ack forwarded`
    try:
        _serve(service, inp, parent, sync, acks)
    finally:
        stopping.set()
        service.stop()  # evaluate what was admitted, close open runs, flush the next hop
        if acks is not None:
            acks.stop()  # the requests forwarded by the drain are answered
        sync()
        parent.send("stopped")
    return 0


def _build(options: dict[str, Any], parent: _Parent) -> tuple[Any, Any]:
    from prometheus_client import Counter

    from ..metrics import names as n
    from .service import Service

    config = options["config"]
    if config.wal_dir is not None:  # each worker its own log (`durable.py`), replayed when it starts again
        from dataclasses import replace

        config = replace(config, wal_dir=os.path.join(config.wal_dir, f"worker-{options['index']}"))
        _metric_files_of_worker(options["index"])
    service = Service(config, settings=options["settings"], catalog=options["catalog"], registry=None)
    pipeline, metrics, intake, forwarder = service.pipeline, service.metrics, service.intake, service.forwarder
    closed = Counter(n.RUNS_CLOSED_EARLY.name, n.RUNS_CLOSED_EARLY.help, list(n.RUNS_CLOSED_EARLY.labels), registry=None)
    reasons = ("ttl", "capacity", "shutdown")
    children = {reason: closed.labels(reason) for reason in reasons}  # present at 0, as one process shows them
    carried = dict.fromkeys(reasons, 0)
    lock = threading.Lock()

    def sync() -> None:
        """Write this worker's series to its files: what the mirror writes, and the runs closed early."""
        with lock:
            if metrics.mirror is not None:
                metrics.mirror.flush(metrics)
            for reason in reasons:
                value = pipeline.runs.closed_early[reason]
                if value > carried[reason]:
                    children[reason].inc(value - carried[reason])
                    carried[reason] = value
            if service.durable is not None:  # its write-ahead log's counts, summed by the parent (`WalTotals`)
                parent.send("wal", service.durable.snapshot())

    def done(spans: int) -> None:
        if service.durable is not None and intake.evaluated_batches <= service.durable.replayed_batches:
            return  # a replay of this worker's log: the parent never sent it
        parent.send("done", spans, len(pipeline.runs), pipeline.runs.held_back, len(forwarder) if forwarder is not None else 0)

    intake.on_done = done
    if metrics.mirror is not None:  # the files are written by `sync`: when the parent asks, on a timer, at stop
        metrics.mirror.buffer()
    service.serve_metrics.on_forwarded = lambda outcome, spans: parent.send("fwd", outcome, spans)
    service.replay()  # with --wal-dir: what this worker's last process left
    return service, sync


def _metric_files_of_worker(index: int) -> None:
    """With a log, the metric files are the worker's, not its process's: one started again after a crash restores the
    metric state of its log's last checkpoint and replays the rest (`durable.py`), so its counts are at least the killed
    one's, and it overwrites that one's files rather than adding files beside them (which the parent would sum: twice).
    Until its first write, after the replay, the parent sums the killed one's last values: no counter goes back."""
    from prometheus_client import values

    values.ValueClass = values.MultiProcessValue(lambda: f"worker{index}")


def _flush_every(sync: Any, stopping: threading.Event) -> None:
    while not stopping.wait(FLUSH_INTERVAL_S):
        try:
            sync()
        except Exception:  # noqa: BLE001 - the next tick, a scrape or the stop writes them again
            logging.getLogger(__name__).exception("otel-agent-eval serve: writing the metric files failed")


def _serve(service: Any, inp: IO[bytes], parent: _Parent, sync: Any, acks: Any = None) -> None:
    from ..otel.reload import reload_catalog
    from .payload import PayloadError, json_spans, protobuf_spans

    while True:
        frame = read_frame(inp)
        if frame is None or frame[0] == STOP:
            return
        kind, payload = frame
        if kind == RELOAD:
            path = pickle.loads(payload)
            threading.Thread(target=reload_catalog, args=(service.pipeline, path), name="otel-agent-eval-reload", daemon=True).start()
            continue
        if kind == FLUSH:  # the parent reads the files next: handled here, between batches, not behind the queue
            try:
                sync()
            finally:
                parent.send("flushed", FLUSH_SEQUENCE.unpack_from(payload)[0])
            continue
        if kind != BATCH:
            continue
        request_id, body_kind = BATCH_HEADER.unpack_from(payload)
        data = payload[BATCH_HEADER.size:]
        try:
            spans, problems = (protobuf_spans(data, keep=service.keep_messages, noise=service.receiving.noise(),
                                              accepted=True)  # the parent checked them
                               if body_kind == KIND_PROTOBUF
                               else json_spans(data))
        except PayloadError as exc:  # the parent read it already; a part that fails here is one problem
            spans, problems = [], [str(exc)]
        except Exception as exc:  # noqa: BLE001 - never lose the reply
            spans, problems = [], [f"unreadable ({type(exc).__name__})"]
        durable, seq, offered = service.durable, 0, len(spans)
        logged = durable is not None and bool(spans)
        if logged:  # logged before it is admitted and answered
            spans = durable.fresh(spans)  # a resend of what the log replayed: taken once
            seq, why = durable.log(data, "application/x-protobuf" if body_kind == KIND_PROTOBUF else "application/json",
                                   "identity", offered)
            if why is not None:
                parent.send("reply", request_id, -1, problems)  # refused: the parent answers retryable
                continue
        if logged:  # admitted and noted as one step; a resend whose spans were all taken before too, noted as well
            admitted = service.intake.reserve(len(spans))
            batch = durable.admit(seq, spans if admitted else [], len(spans) if admitted else 0)
        else:
            admitted = service.intake.offer(spans)
            batch = service.intake.admitted
        taken = offered if admitted else -1  # the parent reserved room: -1 is never expected (duplicates count as taken)
        if admitted and spans and acks is not None:  # answered once forwarded; a 5th item True: not within the wait
            acks.later(batch, lambda forwarded, r=request_id, t=taken, p=problems:
                       parent.send("reply", r, t, p, not forwarded))
        else:
            parent.send("reply", request_id, taken, problems)


if __name__ == "__main__":
    sys.exit(main())
