"""What `score` and `compare` write, whatever the spans' names hold and wherever the output goes.

Report files: a FIFO or a device is written to, not replaced by a rename; a symlink stays a
link and its target gets the report; a regular file is replaced whole. Names from spans (an
agent named to forge a "Gate: passed" line, a tool named with ESC and a bidi override) reach
the terminal, stderr, JUnit XML and HTML as visible escapes, never as raw control characters.
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from otel_agent_eval.offline.compare import compare_traces
from otel_agent_eval.tools.output_file import write_atomically
from test_compare import compare_cli
from test_score import CLEAN_ENV, T0, collector_lines, main_in_process, write

FORGER = "evil\nGate: passed (9 agent/task groups).\rX"  # an agent whose name would print a forged verdict line
HOSTILE_TOOL = "\"><img src=x onerror=alert(2)>\x1b[31mRED\u202e"
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what no output may carry


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [k for k in os.environ if k.startswith("OTEL_AGENT_EVAL_")]:
        monkeypatch.delenv(name)


def hostile(runs: int = 3, *, failed: bool = False) -> str:
    """`runs` runs of FORGER calling HOSTILE_TOOL and web_search, through the real SDK, as Collector JSON lines."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("hostile")
    t = T0
    for _ in range(runs):
        root = tracer.start_span(f"invoke_agent {FORGER}", start_time=t, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": FORGER})
        for j, tool in enumerate((HOSTILE_TOOL, "web_search")):
            span = tracer.start_span(f"execute_tool {tool}", context=set_span_in_context(root), start_time=t + j * 10**6,
                                     attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
            span.end(end_time=t + (j + 1) * 10**6)
        if failed:
            root.set_status(Status(StatusCode.ERROR, "gave up"))
        root.end(end_time=t + 10**8)
        t += 10**9
    provider.shutdown()
    return collector_lines(list(memory.get_finished_spans()))


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    return write(tmp_path / "t.json", hostile())


# -- where the reports go ------------------------------------------------------------------------------------

def test_a_fifo_is_written_to_not_replaced(traces, tmp_path):
    fifo = tmp_path / "report.html"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = main_in_process(["t.json", "--html", "report.html", "--fail-under", "efficiency=0"], tmp_path)
    reader.join(timeout=30)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO
    assert not reader.is_alive() and got[0].decode().startswith("<!DOCTYPE html>") and got[0].endswith(b"</html>\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "t.json"]  # no temporary file left


def test_stdout_as_the_report_is_appended_to_not_replaced(traces, tmp_path):
    """/proc/self/fd/1 (what /dev/stdout links to) on a file opened to append: the report goes after the table."""
    out = write(tmp_path / "out.txt", "before\n")
    inode = out.stat().st_ino
    with out.open("ab") as stdout:
        run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "score", "t.json", "--html", "/proc/self/fd/1",
                              "--fail-under", "efficiency=0"], cwd=tmp_path, stdout=stdout, stderr=subprocess.PIPE, text=True,
                             env=CLEAN_ENV, timeout=120)
    assert run.returncode == 0, run.stderr
    text = out.read_text(encoding="utf-8")
    assert out.stat().st_ino == inode and text.startswith("before\nScored ") and text.endswith("</html>\n")
    assert text.index("Gate: passed") < text.index("<!DOCTYPE html>")


def test_a_symlink_stays_a_link_and_its_target_gets_the_report(traces, tmp_path):
    (tmp_path / "real").mkdir()
    target = write(tmp_path / "real" / "report.html", "old")
    (tmp_path / "report.html").symlink_to("real/report.html")
    (tmp_path / "report.xml").symlink_to("real/new.xml")  # dangling: the target is created
    code, _, err = main_in_process(["t.json", "--html", "report.html", "--junit", "report.xml",
                                    "--fail-under", "efficiency=0"], tmp_path)
    assert code == 0, err
    assert os.readlink(tmp_path / "report.html") == "real/report.html"
    assert os.readlink(tmp_path / "report.xml") == "real/new.xml"
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert ET.parse(tmp_path / "real" / "new.xml").getroot().tag == "testsuites"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.xml", "report.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "report.html", "report.xml", "t.json"]


def test_a_regular_file_is_replaced_whole_or_not_at_all(traces, tmp_path):
    """A guard on what the change keeps: a rename (a new inode), and the old file intact when writing fails."""
    report = write(tmp_path / "report.html", "old")
    before = report.stat().st_ino
    code, _, err = main_in_process(["t.json", "--html", "report.html", "--fail-under", "efficiency=0"], tmp_path)
    assert code == 0, err
    assert report.stat().st_ino != before and report.read_text(encoding="utf-8").endswith("</html>\n")

    def pieces() -> Any:
        yield "<p>half"
        raise OSError(28, "No space left on device")

    write(report, "old")
    with pytest.raises(OSError):
        write_atomically(report, pieces())
    assert report.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "t.json"]


def test_a_directory_as_the_report_is_one_line_and_exit_2(traces, tmp_path):
    (tmp_path / "out").mkdir()
    for option in ("--html", "--junit"):
        code, _, err = main_in_process(["t.json", option, "out", "--fail-under", "efficiency=0"], tmp_path)
        assert (code, err) == (2, f"otel-agent-eval: {option} out: cannot write: Is a directory\n")
    assert list((tmp_path / "out").iterdir()) == []


# -- names from spans ----------------------------------------------------------------------------------------

class Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_control_characters_in_names_never_reach_junit_or_html(traces, tmp_path):
    for cases in ("run", "group"):
        code, _, err = main_in_process(["t.json", "--junit", f"{cases}.xml", "--junit-cases", cases, "--html", "r.html",
                                        "--fail-under", "efficiency=0"], tmp_path)
        assert code == 0, err
        xml = (tmp_path / f"{cases}.xml").read_text(encoding="utf-8")
        assert not RAW.search(xml.replace("\u202e", ""))  # what XML 1.0 forbids is gone (U+202E is allowed in XML)
        root = ET.parse(tmp_path / f"{cases}.xml").getroot()
        shown = " ".join([*(c.get("classname", "") for c in root.iter("testcase")), *(e.text or "" for e in root.iter())])
        assert "evil\nGate: passed" in shown  # newline and CR are legal in XML: kept, escaped by the writer as needed
        if cases == "run":
            assert "\\x1b[31mRED" in shown  # the tool's ESC, as a visible escape
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert not RAW.search(html)
    page = Text()
    page.feed(html)
    text = "".join(page.text)
    assert "\\x1b[31mRED\\u202e" in text and "evil\\nGate: passed (9 agent/task groups).\\rX" in text


def test_names_printed_by_score_cannot_forge_lines_or_escape(tmp_path):
    write(tmp_path / "t.json", hostile(failed=True))
    code, out, err = main_in_process(["t.json", "--fail-under", "completion=0.5"], tmp_path)
    assert code == 1
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("Gate:")] == [lines[-1]] == ["Gate: FAILED for 1 of 1 agent/task group."]
    assert "evil\\nGate: passed (9 agent/task groups).\\rX" in out and "\\x1b[31mRED\\u202e" in out
    assert not RAW.search(out) and not RAW.search(err.replace("\n", ""))
    assert err.count("\n") == len(err.splitlines()) >= 2
    *failed, coverage = err.splitlines()  # the gate's failures, then what the catalog lacks and how to draft it
    assert failed and all(line.startswith("otel-agent-eval: gate failed: evil\\nGate: passed") for line in failed)
    assert coverage.startswith("otel-agent-eval: the catalog lacks") and "\\x1b[31mRED\\u202e" in coverage
    code, out, _ = main_in_process(["t.json", "--json", "--fail-under", "completion=0.5"], tmp_path)
    group = json.loads(out)["groups"][0]  # JSON keeps the names exact: it escapes them itself
    assert group["agent"] == FORGER and {t["tool"] for t in group["tools"]} == {HOSTILE_TOOL, "web_search"}


def test_names_printed_by_compare_cannot_forge_lines_or_escape(tmp_path):
    write(tmp_path / "base.json", hostile(25))
    write(tmp_path / "head.json", hostile(25, failed=True))
    code, out, err = compare_cli("base.json", "head.json", "--fail-on-regression", cwd=tmp_path)
    assert code == 1, err
    assert not any(line.startswith("Gate: passed") for line in out.splitlines())
    assert "evil\\nGate: passed (9 agent/task groups).\\rX" in out and "\\x1b[31mRED\\u202e" in out
    assert not RAW.search(out.replace("\n", "")) and not RAW.search(err.replace("\n", ""))
    assert err.startswith("otel-agent-eval: regression: evil\\nGate: passed") and all(
        line.startswith("otel-agent-eval: regression: ") for line in err.splitlines())


# -- compare's flags and lines -------------------------------------------------------------------------------

def test_resamples_have_an_upper_bound(traces, tmp_path):
    with pytest.raises(ValueError, match=r"resamples must be at most 100,000 \(got 1,000,000,000\)"):
        compare_traces("a", "b", resamples=10**9)
    code, out, err = compare_cli("t.json", "t.json", "--resamples", "100001", cwd=tmp_path)
    assert (code, out, err) == (2, "", "otel-agent-eval: resamples must be at most 100,000 (got 100,001)\n")
    code, out, _ = compare_cli("--help", cwd=tmp_path)
    assert code == 0 and "at most 100,000" in " ".join(out.split())
