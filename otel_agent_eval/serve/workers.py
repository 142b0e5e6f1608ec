"""`serve --workers N`: the receivers in this process, the evaluation in N worker processes, traces routed by id.

This process keeps what answers senders: both receivers, the bearer token, TLS, the size
limits, admission and the answers, and `/metrics`. For each request it splits the spans by
trace id (`split.py`, worker = trace_id % N), so every span of a trace reaches the same worker
and runs are assembled whole, and sends each worker its part over a pipe (`worker.py`). A
worker decodes its part, reports spans it could not read (the sender gets them as an OTLP
partial success, as from one process), evaluates and forwards, and acknowledges evaluated
spans, so this process knows how many each worker holds.

Back-pressure is per worker and all-or-none, as the OTLP specification asks: a request is
admitted only if every worker it touches has room (`queue_spans / N` each), else the whole
request is refused with a retryable answer (429 / RESOURCE_EXHAUSTED) and counted refused.

`/metrics` here is the workers' series summed from prometheus-client's multiprocess files
(`metrics/multiprocess.py`'s `FileSums`, in a directory this process makes and removes), plus this process's
own `agent_eval_serve_*` series, the catalog gauges and the processor's gauges summed over
workers. Not served with workers: the sliding-window quantiles of
`agent_eval_tool_latency_seconds` (they cannot be added; `histogram_quantile` over
`gen_ai_execute_tool_duration_seconds` can).

A worker that dies is started again; what it had accepted and not yet forwarded is counted
`agent_eval_serve_forwarded_spans_total{outcome="abandoned"}` (one log line); the parts of
requests it had not answered are refused (the senders retry them).

    >>> service = WorkerService(config, settings=settings, catalog=catalog, workers=2).start()
    >>> service.stop()   # readyz 503, receivers stop, workers drain, close runs, flush, exit
"""
from __future__ import annotations

import itertools
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from ..config.catalog import Catalog, PathLike, load_catalog
from ..config.settings import Settings
from ..metrics import names as n
from ..metrics.families import catalog_families, family
from ..metrics.multiprocess import FileSums
from ..otel.wiring import resolve
from .durable import WalTotals
from .payload import PROTOBUF, PayloadError, checked_body
from .receive import FULL, STOPPING, Answer, Receiving
from .self_metrics import ServeMetrics
from .service import COLLECT_WAIT_S, Listening, ServeConfig, log_stopped
from .split import NoRoom, Part, split_body
from .worker import (BATCH, BATCH_HEADER, CONFIG, FLUSH, FLUSH_SEQUENCE, KIND_JSON, KIND_PROTOBUF, MESSAGE, RELOAD, STOP,
                     read_frame, write_frame)

__all__ = ["MAX_WORKERS", "WorkerPool", "WorkerService"]

logger = logging.getLogger(__name__)
FLUSH_WAIT_S = 5.0  # a worker writes its files within milliseconds when asked, a first write on a busy host in more than
# COLLECT_WAIT_S; a scrape past this shows the files as the worker's timer last wrote them (FLUSH_INTERVAL_S)

MAX_WORKERS = 64
START_TIMEOUT_S = 60.0
RESTART_PAUSE_S = 1.0  # a worker that dies at once is started again at most this often
# `python -m otel_agent_eval.serve.worker`, finding this very package also when it is not installed (last on the path,
# so that it never shadows anything)
_WORKER_MAIN = ("import sys; sys.path.append({!r}); from otel_agent_eval.serve.worker import main; sys.exit(main())"
                .format(str(Path(__file__).resolve().parents[2])))


class _Gather:
    """The replies to one request's parts: (spans taken, problems), or None for a part whose worker died."""

    def __init__(self, parts: int) -> None:
        self.results: list[tuple[int, list[str]] | None] = [None] * parts
        self.left = parts
        self.done = threading.Event()
        if not parts:
            self.done.set()

    def fill(self, slot: int, result: tuple[int, list[str]] | None) -> None:
        self.results[slot] = result
        self.left -= 1
        if self.left <= 0:
            self.done.set()


class _Worker:
    """This process's handle on one worker: its pipe, and what it holds."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.write_lock = threading.Lock()
        self.alive = False
        self.stopping = False  # told to stop: its exit is no death
        self.stopped = threading.Event()
        self.ready = threading.Event()
        self.error: str | None = None
        self.inflight = 0  # spans sent and not yet evaluated (or found unreadable)
        self.taken = 0  # spans it admitted
        self.settled = 0  # spans it reported forwarded, failed or abandoned
        self.pending: dict[int, tuple[_Gather, int, int]] = {}  # request id -> (gather, slot, spans sent)
        self.open_runs = self.held_back = self.forward_queued = 0
        self.flushed = 0  # the last flush request it answered
        self.reader: threading.Thread | None = None

    def send(self, kind: bytes, payload: bytes = b"", prefix: bytes = b"") -> bool:
        process = self.process
        if process is None or process.stdin is None:
            return False
        with self.write_lock:
            try:
                write_frame(process.stdin, kind, payload, prefix)
                return True
            except (OSError, ValueError):
                return False


class WorkerPool:
    """N worker processes fed by trace id; `submit` admits a request's parts all or none."""

    def __init__(self, workers: int, *, share: int, options: dict[str, Any], metrics: ServeMetrics, log_level: str = "INFO") -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"serve: --workers must be 1-{MAX_WORKERS} (got {workers})")
        if share < 1:
            raise ValueError(f"serve: --queue-spans must be at least --workers ({workers}): each worker needs room for a span")
        self.size = workers
        self.share = share
        self.limit = share * workers
        self.metrics = metrics
        self._options = options
        self._log_level = log_level
        self._lock = threading.Condition()
        self._ids = itertools.count(1)
        self.stopping = False
        self.directory = tempfile.mkdtemp(prefix="otel-agent-eval-serve-")
        self.workers = [_Worker(i) for i in range(workers)]
        self._flush_sequence = 0
        self.wal_totals = WalTotals()  # with --wal-dir: the workers' logs (`durable.py`)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> WorkerPool:
        """Start every worker and wait until each has built its pipeline; ValueError (one line) if one cannot."""
        try:
            for worker in self.workers:
                try:
                    self._spawn(worker)
                except OSError as exc:
                    raise ValueError(f"serve: cannot start worker processes ({exc.strerror or exc})") from None
            deadline = time.monotonic() + START_TIMEOUT_S
            for worker in self.workers:
                worker.ready.wait(max(0.0, deadline - time.monotonic()))
                if worker.error is not None or not worker.alive:
                    raise ValueError(f"serve: {worker.error or f'worker {worker.index} did not start'}")
        except BaseException:
            self.stop(0.0)
            self.close()
            raise
        return self

    def _spawn(self, worker: _Worker) -> None:
        env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
        env["PROMETHEUS_MULTIPROC_DIR"] = self.directory
        process = subprocess.Popen([sys.executable, "-c", _WORKER_MAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                   close_fds=True)
        worker.ready.clear()
        worker.stopped.clear()
        worker.error = None
        worker.process, worker.pid = process, process.pid
        options = {**self._options, "index": worker.index, "log_level": self._log_level}
        worker.send(CONFIG, pickle.dumps(options, protocol=pickle.HIGHEST_PROTOCOL))
        worker.reader = threading.Thread(target=self._read, args=(worker, process), daemon=True,
                                         name=f"otel-agent-eval-serve-worker-{worker.index}")
        worker.reader.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Refuse new parts, let every worker drain and exit; one still running well past its own drain is killed."""
        with self._lock:
            self.stopping = True
            self._lock.notify_all()
        for worker in self.workers:
            worker.stopping = True
            worker.send(STOP)
        deadline = time.monotonic() + 2 * timeout_s + 5.0  # a worker's drain: its intake, then its forwarder, each timeout_s
        for worker in self.workers:
            process = worker.process
            if process is None:
                continue
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.error("otel-agent-eval serve: worker %d did not stop in time; killed", worker.index)
                process.kill()
                process.wait()
            if worker.reader is not None:
                worker.reader.join(5)
            if not worker.stopped.is_set():  # killed, or died while stopping: what it held is lost
                self._abandon(worker, process)
            for pipe in (process.stdin, process.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass

    def close(self) -> None:
        """Remove the metrics files (after the last scrape: /metrics reads them)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- admission -------------------------------------------------------------------------------

    def has_room(self, n: int = 1) -> bool:
        """Whether some worker could take `n` spans now (a cheap check before reading a request)."""
        return not self.stopping and any(w.alive and w.inflight + n <= self.share for w in self.workers)

    def has_room_for(self, spans: list[int]) -> bool:
        """Whether each worker could take its share (`spans[w]`) now: a check before the parts are built; `submit`
        checks again, atomically."""
        return not self.stopping and all(not n or (w.alive and w.inflight + n <= self.share)
                                         for w, n in zip(self.workers, spans))

    def submit(self, parts: list[Part], kind: str) -> list[tuple[int, list[str]] | None] | None:
        """Send the parts if every worker they go to has room (None, nothing sent, if one has not); then each
        part's reply: (spans taken, problems), or None when its worker died before answering."""
        if not parts:
            return []
        gather = _Gather(len(parts))
        request_id = next(self._ids)
        with self._lock:
            if self.stopping:
                return None
            for w, _, count in parts:
                worker = self.workers[w]
                if not worker.alive or worker.inflight + count > self.share:
                    return None
            for slot, (w, _, count) in enumerate(parts):
                worker = self.workers[w]
                worker.inflight += count
                worker.pending[request_id] = (gather, slot, count)
        prefix_kind = KIND_PROTOBUF if kind == PROTOBUF else KIND_JSON
        for slot, (w, body, count) in enumerate(parts):
            worker = self.workers[w]
            if not worker.send(BATCH, body, BATCH_HEADER.pack(request_id, prefix_kind)):
                self._settle_part(worker, request_id, None)
        while not gather.done.wait(1.0):
            if all(not self.workers[w].alive for w, _, _ in parts):
                break
        return gather.results

    def _settle_part(self, worker: _Worker, request_id: int, result: tuple[int, list[str]] | None) -> None:
        with self._lock:
            entry = worker.pending.pop(request_id, None)
            if entry is None:
                return
            gather, slot, count = entry
            if result is None:
                worker.inflight -= count
            else:
                taken = max(result[0], 0)
                worker.inflight -= count - taken
                worker.taken += taken
            gather.fill(slot, result if result is None or result[0] >= 0 else None)  # under the lock: parts fill concurrently
            self._lock.notify_all()

    def wait_evaluated(self, timeout_s: float) -> bool:
        """Wait until every admitted span has been evaluated (a scrape waits this long at most)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while any(w.inflight for w in self.workers):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    def flush_metrics(self, timeout_s: float) -> bool:
        """Ask every worker to write its metric files and wait for their answers (a scrape waits this long at most)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._flush_sequence += 1
            sequence = self._flush_sequence
            asked = [w for w in self.workers if w.alive]
        asked = [w for w in asked if w.send(FLUSH, FLUSH_SEQUENCE.pack(sequence))]
        with self._lock:
            while any(w.alive and w.flushed < sequence for w in asked):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    def reload(self, path: PathLike | None) -> None:
        payload = pickle.dumps(os.fspath(path) if path is not None else None)
        for worker in self.workers:
            if worker.alive:
                worker.send(RELOAD, payload)

    # -- what the workers say --------------------------------------------------------------------

    def _read(self, worker: _Worker, process: subprocess.Popen[bytes]) -> None:
        stdout = process.stdout
        while stdout is not None:
            try:
                frame = read_frame(stdout)
            except (OSError, ValueError):
                frame = None
            if frame is None:
                break
            if frame[0] != MESSAGE:
                continue
            try:
                self._message(worker, pickle.loads(frame[1]))
            except Exception:  # noqa: BLE001 - one odd message must not end the reading
                logger.exception("otel-agent-eval serve: a message from worker %d could not be read", worker.index)
        process.wait()
        if worker.process is process:
            self._ended(worker, process)

    def _message(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        what = message[0]
        if what == "reply":  # with `--ack forwarded`, once forwarded; a 5th item True: not within the wait (`ack.py`)
            self._settle_part(worker, message[1], tuple(message[2:]))  # type: ignore[arg-type]
        elif what == "done":
            _, spans, open_runs, held_back, forward_queued = message
            with self._lock:
                worker.inflight -= spans
                worker.open_runs, worker.held_back, worker.forward_queued = open_runs, held_back, forward_queued
                self._lock.notify_all()
        elif what == "fwd":
            _, outcome, spans = message
            with self._lock:
                worker.settled += spans
            self.metrics.forwarded(outcome, spans)
        elif what == "wal":
            self.wal_totals.update(worker.index, message[1])
        elif what == "flushed":
            with self._lock:
                worker.flushed = max(worker.flushed, message[1])
                self._lock.notify_all()
        elif what == "ready":
            with self._lock:
                worker.alive = True
            worker.ready.set()
        elif what == "error":
            worker.error = message[1]
            worker.ready.set()
        elif what == "stopped":
            worker.stopped.set()

    def _ended(self, worker: _Worker, process: subprocess.Popen[bytes]) -> None:
        """The worker's pipe closed: a stop it was told to do, or a death (counted, and it is started again)."""
        with self._lock:
            worker.alive = False
            worker.open_runs = worker.held_back = worker.forward_queued = 0
            self._lock.notify_all()
        self.wal_totals.ended(worker.index)
        for request_id in list(worker.pending):
            self._settle_part(worker, request_id, None)
        worker.ready.set()
        if worker.stopping or worker.stopped.is_set():
            return
        if worker.error is None:  # one that could not start held nothing; `_restart` logs why
            self._abandon(worker, process)
        if not self.stopping:
            threading.Thread(target=self._restart, args=(worker,), daemon=True,
                             name=f"otel-agent-eval-serve-restart-{worker.index}").start()

    def _abandon(self, worker: _Worker, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            held = max(0, worker.taken - worker.settled)
            worker.taken = worker.settled = worker.inflight = 0
        if held or not worker.stopping:
            logger.error("otel-agent-eval serve: worker %d (pid %d) ended with exit code %s; the %d spans it had accepted and "
                         "not forwarded are abandoned (agent_eval_serve_forwarded_spans_total{outcome=\"abandoned\"}), and so "
                         "are its open runs%s", worker.index, process.pid, process.returncode, held,
                         "" if self.stopping else "; starting it again")
        self.metrics.forwarded("abandoned", held)

    def _restart(self, worker: _Worker) -> None:
        time.sleep(RESTART_PAUSE_S)  # a worker that cannot start must not spin
        if self.stopping:
            return
        try:
            self._spawn(worker)
        except OSError as exc:
            logger.error("otel-agent-eval serve: worker %d could not be started again (%s); retrying", worker.index, exc)
            threading.Thread(target=self._restart, args=(worker,), daemon=True).start()
            return
        worker.ready.wait(START_TIMEOUT_S)
        if worker.error is not None:  # it exits; `_ended` starts it again, at most every RESTART_PAUSE_S
            logger.error("otel-agent-eval serve: %s; trying again", worker.error)

    # -- gauges ----------------------------------------------------------------------------------

    def queued(self) -> int:
        return sum(w.inflight for w in self.workers)

    def total(self, name: str) -> int:
        return sum(getattr(w, name) for w in self.workers)


class ShardedReceiving(Receiving):
    """`Receiving` whose admission is the pool's: split by trace id, all parts or none, the workers' problems reported."""

    intake: WorkerPool  # type: ignore[assignment]

    def take(self, transport: str, body: bytes, content_type: str, encoding: str = "identity") -> Answer:
        pool = self.intake
        if self.stopping or not pool.has_room():
            return self._refused(transport, body, content_type, encoding)
        try:
            kind, data = checked_body(body, content_type, encoding, limit=self.max_bytes)
            parts = split_body(data, kind, pool.size, room=pool.has_room_for)
        except NoRoom as full:  # counted before any part was built
            self.metrics.spans(transport, "refused", full.spans)
            return self._answer(transport, self._full())
        except PayloadError as exc:
            return self._unreadable_body(transport, exc)
        results = pool.submit(parts, kind)
        if results is None:
            self.metrics.spans(transport, "refused", sum(count for _, _, count in parts))
            return self._answer(transport, self._full())
        taken, problems, lost = 0, [], 0
        for (_, _, count), result in zip(parts, results):
            if result is None:
                lost += count
            else:
                taken += result[0]
                problems += result[1]
        self._count_taken(transport, taken, problems)
        if any(result is not None and len(result) > 2 and result[2] for result in results):  # type: ignore[misc]
            return self._not_forwarded(transport)
        if lost:  # a worker ended with this request's part: the sender sends it again
            self.metrics.spans(transport, "refused", lost)
            if self.stopping or pool.stopping:
                return self._answer(transport, Answer(STOPPING, "shutting down; send to another replica or retry later"))
            return self._answer(transport, Answer(FULL, f"an evaluation worker restarted; retry after {self.retry_after_s}s"))
        return self._accepted(transport, problems)


class _MainFamilies:
    """What this process serves beside the workers' files: catalog gauges, fallback flag, processor gauges."""

    def __init__(self, service: WorkerService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        service = self.service
        service.pool.wait_evaluated(COLLECT_WAIT_S)  # as one process: a scrape waits a little for queued spans
        service.pool.flush_metrics(FLUSH_WAIT_S)  # then for the workers to write what they evaluated to the files
        yield from catalog_families(service.catalog)
        fallback = family(n.CATALOG_FALLBACK)
        fallback.add_metric([], 1.0 if service.catalog_fallback else 0.0)
        yield fallback
        pool = service.pool
        yield GaugeMetricFamily(n.SELF_PREFIX + "open_runs", "Traces with agent runs open.", value=pool.total("open_runs"))
        yield GaugeMetricFamily(n.SELF_PREFIX + "held_back_calls", "Tool spans held until their agent is known.",
                                value=pool.total("held_back"))


class WorkerService(Listening):
    """`otel-agent-eval serve --workers N` (N > 1): the same interface as `Service`, the evaluation in N processes."""

    def __init__(self, config: ServeConfig = ServeConfig(), *, workers: int, settings: Settings | None = None,
                 catalog: Catalog | PathLike | None = None, log_level: str = "INFO") -> None:
        self.config = config
        settings = settings or Settings.from_env()
        loaded: Catalog = resolve(settings, catalog=catalog)["catalog"]
        wanted = catalog if catalog is not None else settings.catalog
        self.catalog = loaded
        self.catalog_fallback = wanted is not None and not isinstance(wanted, Catalog) and loaded.source.startswith("<packaged")
        self._catalog_path = catalog if catalog is not None and not isinstance(catalog, Catalog) else settings.catalog
        if self._catalog_path is None and not loaded.source.startswith("<"):
            self._catalog_path = loaded.source
        self.next_hop = config.hop
        self.registry = CollectorRegistry()
        self.serve_metrics = ServeMetrics(registry=None)
        worker_config = replace(config, grpc_port=None, http_port=None, metrics_port=None, tls=None, bearer_token=None,
                                next_hop=self.next_hop, queue_spans=max(1, config.queue_spans // workers))
        worker_settings = settings.override(metrics_enabled=False, reload_on_sighup=False, catalog_poll_seconds=0)
        self.pool = WorkerPool(workers, share=config.queue_spans // workers, metrics=self.serve_metrics, log_level=log_level,
                               options={"config": worker_config, "settings": worker_settings, "catalog": loaded})
        self.receiving = ShardedReceiving(self.pool, self.serve_metrics, max_bytes=config.max_request_bytes,  # type: ignore[arg-type]
                                          retry_after_s=config.retry_after_s)
        self.serve_metrics.gauges = {
            "queued_spans": ("Spans accepted and not evaluated yet.", self.pool.queued),
            "queue_capacity_spans": ("Spans the intake queue holds before senders are told to retry.", lambda: self.pool.limit),
            "forward_queued_spans": ("Evaluated spans waiting for the next hop.", lambda: self.pool.total("forward_queued")),
        }
        self.registry.register(_MainFamilies(self))
        self.registry.register(self.serve_metrics)
        if config.wal_dir is not None:
            self.registry.register(self.pool.wal_totals)
        FileSums(self.registry, path=self.pool.directory)
        super().__init__()
        self._settings = settings

    def start(self) -> WorkerService:
        """Start the workers, then listen; ValueError (a worker cannot start) or OSError (a port is taken)."""
        from ..otel.reload import reload_on_sighup, watch_catalog

        self.pool.start()
        self._listen()
        self._start_otlp_metrics()
        if self._settings.catalog_poll_seconds > 0 and self._catalog_path is not None:
            watch_catalog(self, self._catalog_path, self._settings.catalog_poll_seconds)
        if self._settings.reload_on_sighup:
            reload_on_sighup(self, self._catalog_path)
        self._ready = True
        return self

    def reload_catalog(self, catalog: PathLike | None = None) -> bool:
        """Reload in every worker (each counts it, as a process of its own) and here, for the catalog gauges."""
        path = catalog if catalog is not None else self._catalog_path
        self.pool.reload(path)
        try:
            self.catalog = load_catalog(path)
            self.catalog_fallback = False
            return True
        except Exception:  # noqa: BLE001 - the workers log the reason and keep their last good catalog
            return False

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until every accepted span has been evaluated by its worker."""
        return self.pool.wait_evaluated(timeout_s)

    def stop(self) -> None:
        """Graceful shutdown: not ready, stop the receivers, let every worker drain, close runs and flush, then exit."""
        if not self._stop_receiving():
            return
        self.pool.stop(self.config.drain_timeout_s)
        self._close_endpoints()
        self.pool.close()
        if self._ready:  # a port was taken at start: nothing ran, nothing to sum up
            log_stopped(self.serve_metrics)
