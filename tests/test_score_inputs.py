"""`score` inputs and outputs beyond the basics: zstd-compressed traces, the progress bar, JUnit per run.

Traces are the real SDK spans of `test_score`'s app, written by the SDK's own OTLP encoder
as the Collector writes them, then compressed with zstd as `zstd FILE` does (one stream) or
as the Collector's `compression: zstd` does (each request compressed, after its length).
"""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import zstandard
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from otel_agent_eval.offline.recorded import RecordedSpans
from otel_agent_eval.offline.score import score_traces
import agent_traces
from test_score import CLEAN_ENV, app, batches, collector_json, collector_lines, main_in_process, replay, write  # noqa: F401


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def collector_zstd(spans, *, proto: bool) -> bytes:
    """The Collector's file exporter with `compression: zstd`: each request compressed on its own, after its length."""
    out = b""
    for batch in batches(spans):
        data = encode_spans(batch).SerializeToString() if proto else json.dumps(collector_json(batch)).encode()
        frame = zstd(data)
        out += len(frame).to_bytes(4, "big") + frame
    return out


# -- lines and batches ---------------------------------------------------------------------------------------------

def test_a_file_is_read_a_record_at_a_time_and_a_bom_or_a_bad_line_reads_as_before(app, tmp_path):
    """`batches()` gives a line's spans together (what `score` reads); a byte-order mark (orjson's fast path takes
    no BOM) and a line that is not UTF-8 go the slow way, with the same spans and the same problem line."""
    spans = app.spans()
    text = collector_lines(spans, size=16)
    plain = RecordedSpans(write(tmp_path / "plain.json", text))
    batches_read = list(plain.batches())
    assert [len(b) for b in batches_read] == [sum(len(scope["spans"]) for entry in json.loads(line)["resourceSpans"]
                                                  for scope in entry["scopeSpans"]) for line in text.splitlines()]
    ids = [s.context.span_id for batch in batches_read for s in batch]
    assert ids == [s.context.span_id for s in RecordedSpans(tmp_path / "plain.json")] and len(ids) == len(spans)
    with_bom = RecordedSpans(write(tmp_path / "bom.json", "\ufeff" + text))
    assert [s.context.span_id for s in with_bom] == ids and with_bom.stats.problems == []
    lines = text.splitlines(keepends=True)
    damaged = RecordedSpans(write(tmp_path / "damaged.json", lines[0].encode() + b"\xff" + "".join(lines[1:]).encode()))
    first, second = len(batches_read[0]), len(batches_read[1])
    assert [s.context.span_id for s in damaged] == ids[:first] + ids[first + second:]
    assert [str(p) for p in damaged.stats.problems] == [f"{tmp_path / 'damaged.json'}:2: not UTF-8 text (byte 1 of the line)"]


# -- zstd ---------------------------------------------------------------------------------------------------------

def test_zstd_files_score_exactly_as_the_plain_json(app, tmp_path):
    spans = app.spans()
    plain = collector_lines(spans).encode()
    _, expected, _ = replay(write(tmp_path / "plain" / "t.json", plain))
    assert expected.calls and expected.runs
    multi_frame = b"".join(zstd(line) for line in plain.splitlines(keepends=True))  # `zstd` of appended chunks
    for name, data in (("t.json.zst", zstd(plain)), ("frames.json.zst", multi_frame),
                       ("collector-json.zst", collector_zstd(spans, proto=False)),
                       ("collector-proto.zst", collector_zstd(spans, proto=True))):
        report, seen, _ = replay(write(tmp_path / name, data))
        assert (seen.calls, seen.runs) == (expected.calls, expected.runs), name
        assert report.inputs.problems == [] and report.inputs.spans == len(spans), name


def test_cut_or_corrupt_zstd_is_one_problem_line(app, tmp_path):
    plain = collector_lines(app.spans()).encode()
    write(tmp_path / "in" / "cut.json.zst", zstd(plain)[:-25])
    write(tmp_path / "in" / "corrupt.json.zst", zstd(plain)[:4] + b"\xff" * 100)  # a zstd magic, then nonsense
    frames = collector_zstd(app.spans(), proto=False)
    write(tmp_path / "in" / "collector-cut.zst", frames[:-10])
    problems = []
    spans = RecordedSpans([tmp_path / "in"], on_problem=problems.append)
    list(spans)
    by_file = {p.path.rsplit("/", 1)[1]: str(p) for p in problems}
    assert "cannot read further: the compressed stream ends early (a zstd frame is cut short)" in by_file["cut.json.zst"]
    assert "not a valid zstd stream" in by_file["corrupt.json.zst"]
    assert "truncated or corrupt: the file ends inside a compressed message" in by_file["collector-cut.zst"]
    assert all("\n" not in line for line in by_file.values())
    assert spans.stats.spans > 0  # what came before each cut was read


def test_without_zstandard_a_zst_file_is_one_clear_line_and_exit_2(app, tmp_path):
    write(tmp_path / "t.json.zst", zstd(collector_lines(app.spans()).encode()))
    blocked = ("import sys; sys.modules['zstandard'] = None; sys.modules['compression'] = None; "
               "from otel_agent_eval.tools.cli import main; sys.exit(main(['score', 't.json.zst']))")
    run = subprocess.run([sys.executable, "-c", blocked], cwd=tmp_path, env=CLEAN_ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines() == [
        "otel-agent-eval: t.json.zst: zstd-compressed; reading it needs the zstandard package: "
        "pip install 'otel-agent-eval[zstd]' (or decompress it first: zstd -d)",
        "otel-agent-eval: no spans could be read from 1 file"]


# -- the progress bar -----------------------------------------------------------------------------------------------

def test_progress_goes_by_bytes_read_up_to_the_total(app, tmp_path, monkeypatch):
    monkeypatch.setattr(RecordedSpans, "PROGRESS_EVERY", 16)
    text = collector_lines(app.spans())
    files = [write(tmp_path / "a.json", text), write(tmp_path / "b.json.zst", zstd(text.encode())),
             write(tmp_path / "c.json", "")]
    total = sum(f.stat().st_size for f in files)
    seen = []
    score_traces(files, on_progress=lambda done, of: seen.append((done, of)))
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert {of for _, of in seen} == {total}
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)  # never goes back
    assert any(0 < done < total for done, _ in seen)  # it moved in between


def test_progress_on_request_goes_to_stderr_and_never_into_the_json(app, tmp_path):
    write(tmp_path / "t.json", collector_lines(app.spans()))
    code, out, err = main_in_process(["t.json", "--json", "--progress", "--fail-under", "efficiency=0"], tmp_path)
    assert code == 0 and json.loads(out)["totals"]["runs"] > 0
    size = (tmp_path / "t.json").stat().st_size / 2**20
    assert f"otel-agent-eval: scoring [{'#' * 30}] 100%  {size:.1f} MiB of {size:.1f} MiB" in err
    assert err.endswith("\r\x1b[K")  # the bar is taken off its line at the end
    code, out, err = main_in_process(["t.json", "--fail-under", "efficiency=0"], tmp_path)  # stderr is no terminal
    assert (code, err) == (0, "")


def pty_stderr(args: list[str], cwd) -> tuple[int, str]:
    """Run `otel-agent-eval score ARGS` with stderr on a pseudo-terminal; its stderr as text."""
    main, secondary = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "otel_agent_eval.tools.cli", "score", *args], cwd=cwd, env=CLEAN_ENV,
                                   stdout=subprocess.DEVNULL, stderr=secondary)
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        return process.wait(timeout=120), b"".join(chunks).decode()
    finally:
        os.close(main)


def test_progress_shows_by_itself_on_a_terminal_but_not_with_json(app, tmp_path):
    write(tmp_path / "t.json", collector_lines(app.spans()))
    code, err = pty_stderr(["t.json", "--fail-under", "efficiency=0"], tmp_path)
    assert code == 0 and "otel-agent-eval: scoring [" in err and "100%" in err
    code, err = pty_stderr(["t.json", "--fail-under", "efficiency=0", "--json"], tmp_path)
    assert code == 0 and "scoring [" not in err
    code, err = pty_stderr(["t.json", "--fail-under", "efficiency=0", "--no-progress"], tmp_path)
    assert code == 0 and "scoring [" not in err


# -- JUnit, one test case per run -----------------------------------------------------------------------------------

def test_junit_per_run_has_one_case_per_run_failing_with_the_reason(app, tmp_path):
    write(tmp_path / "t.json", collector_lines(app.spans()))
    runs = []
    report = score_traces(tmp_path / "t.json", on_run=runs.append)
    failing = {f"{r.root_name} trace {r.trace_id:032x} span {r.root_span_id:016x}": r.evaluation.completion_reason for r in runs
               if not r.evaluation.completed}
    assert failing and len(failing) < len(runs)

    code, _, err = main_in_process(["t.json", "--junit", "runs.xml", "--junit-cases", "run", "--fail-under", "efficiency=0"],
                                   tmp_path)
    assert (code, err) == (0, "")  # the gate is per group; the run cases are for the CI's test view
    root = ET.parse(tmp_path / "runs.xml").getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == report.runs == len(runs) == int(suite.get("tests")) == int(root.get("tests"))
    assert int(suite.get("failures")) == len(failing)
    failures = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failures) == set(failing)
    for name, failure in failures.items():
        assert failure.get("message").startswith(f"not completed: {failing[name]}")
        assert failure.text.splitlines()[0] == f"not completed: {failing[name]}"
    agents = {f"otel-agent-eval.{r.agent or '(no agent)'}.{r.task or '(unrouted)'}" for r in runs}
    assert {c.get("classname") for c in cases} == agents
    assert all(c.find("system-out").text.startswith("health=") for c in cases)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.xml", "t.json"]  # no temporary file left

    code, _, _ = main_in_process(["t.json", "--junit", "groups.xml", "--fail-under", "efficiency=0"], tmp_path)
    groups = ET.parse(tmp_path / "groups.xml").getroot().find("testsuite").findall("testcase")
    assert code == 0 and len(groups) == len(report.groups)  # the default stays one case per agent and task


def test_junit_run_cases_are_unique_when_a_trace_holds_several_runs_of_one_agent(tmp_path):
    """CrewAI's shape: one trace, several runs of the same agent (4 of Crew Manager, each an `invoke_agent` span under
    the trace's one `crewai.session` root, each with its tool calls): CI test views key on classname and name, and
    would merge or overwrite cases that share both."""
    traces = agent_traces.crew(tmp_path / "crew.otlp.jsonl")
    code, _, err = main_in_process([str(traces), "--junit", "runs.xml", "--junit-cases", "run"], tmp_path)
    assert code in (0, 1), err
    cases = ET.parse(tmp_path / "runs.xml").getroot().find("testsuite").findall("testcase")
    keys = [(c.get("classname"), c.get("name")) for c in cases]
    assert len(keys) == len(set(keys)) == score_traces([traces]).runs == 14  # 4 + 1 + 1 + 2 + 3 + 3 runs
    manager = sorted(name for classname, name in keys if classname == "otel-agent-eval.Crew Manager.(unrouted)")
    assert len(manager) == 4 and len({name.split(" span ")[0] for name in manager}) == 1  # one trace, four root spans
    assert all(re.fullmatch(r"Crew Manager trace [0-9a-f]{32} span [0-9a-f]{16}", name) for name in manager)


def test_junit_cases_run_without_junit_is_bad_input(app, tmp_path):
    write(tmp_path / "t.json", collector_lines(app.spans()[:30]))
    code, out, err = main_in_process(["t.json", "--junit-cases", "run"], tmp_path)
    assert (code, out, err) == (2, "", "otel-agent-eval: --junit-cases run: give --junit FILE too\n")
