"""What the command line takes and where it writes: a failing stdout, outputs that would destroy what the user has
(an edited catalog, an input trace file), empty arguments from unset variables, values from OTEL_AGENT_EVAL_*
variables, and the files users actually have (what the SDK's ConsoleSpanExporter writes, Zipkin JSON, `null`).

Spans come from the real SDK, written as the Collector's file exporter or the ConsoleSpanExporter writes them.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_eval.offline import recorded
from otel_agent_eval.offline.recorded import RecordedSpans, TraceInputError, trace_files
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.tools.cli import main
from test_score import CLEAN_ENV, collector_lines, write

FULL = "/dev/full"


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [k for k in os.environ if k.startswith("OTEL_AGENT_EVAL_")]:
        monkeypatch.delenv(name)


def record(provider: TracerProvider, runs: int, tool: str = "web_search") -> None:
    """`runs` runs of support_agent, each calling `tool` once."""
    tracer = provider.get_tracer("app")
    for run in range(runs):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": f"call_{run}",
                    "gen_ai.tool.call.arguments": json.dumps({"query": f"question {run}"})}):
                pass


def traces(path: Path, runs: int = 3, tool: str = "web_search") -> Path:
    """A trace file as the Collector's file exporter writes it."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    record(provider, runs, tool)
    return write(path, collector_lines(list(memory.get_finished_spans())))


def console(path: Path, runs: int) -> list:
    """What a real ConsoleSpanExporter writes into a file: each span's indented `to_json()`, one after another;
    the spans it wrote."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    with open(path, "w") as out:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        record(provider, runs)
        provider.shutdown()
    return list(memory.get_finished_spans())


def cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    """`otel-agent-eval ARGS` in this process, from `cwd`; argparse's exit is an exit code too."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = int(exc.code)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


# -- 1: stdout that cannot be written ------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full")
@pytest.mark.parametrize("command", [["catalog", "schema"], ["score", "t.json", "--json", "--fail-under", "efficiency=0"],
                                     ["score", "t.json", "--fail-under", "efficiency=0"], ["catalog", "draft", "t.json"]])
def test_a_full_disk_on_stdout_is_one_line_and_exit_2_not_a_failed_gate(tmp_path, command):
    traces(tmp_path / "t.json")
    with open(FULL, "w") as full:
        run = subprocess.run([sys.executable, "-m", "otel_agent_eval", *command], cwd=tmp_path, env=CLEAN_ENV,
                             stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (run.returncode, run.stderr) == (2, "otel-agent-eval: cannot write the output: No space left on device\n")


def test_an_input_that_cannot_be_read_is_still_not_called_an_output_error(tmp_path):
    assert cli("score", "nope.json", cwd=tmp_path)[::2] == (2, "otel-agent-eval: nope.json: no such file or directory\n")


# -- 2: outputs that would destroy what the user has -----------------------------------------------------------

def test_draft_refuses_to_replace_a_catalog_unless_forced(tmp_path):
    traces(tmp_path / "t.json")
    edited = write(tmp_path / "catalog.yaml", "# my prices\ntools: {}\n").read_text()
    assert cli("catalog", "draft", "t.json", "-o", "catalog.yaml", cwd=tmp_path)[::2] == (
        2, "otel-agent-eval: --output catalog.yaml: the file exists; add to it with --merge catalog.yaml, "
           "or replace it with --force\n")
    assert (tmp_path / "catalog.yaml").read_text() == edited
    code, _, err = cli("catalog", "draft", "t.json", "-o", "catalog.yaml", "--force", cwd=tmp_path)
    assert code == 0 and err.startswith("otel-agent-eval: wrote catalog.yaml: 1 tool")
    assert "web_search:" in (tmp_path / "catalog.yaml").read_text()


def test_score_suggests_merging_into_the_catalog_yaml_already_here(tmp_path):
    traces(tmp_path / "t.json", tool="mystery_tool")

    def suggested() -> str:
        code, out, _ = cli("score", "t.json", "--json", cwd=tmp_path)
        return json.loads(out)["coverage"]["draft_command"]

    assert suggested() == "otel-agent-eval catalog draft t.json -o catalog.yaml"
    write(tmp_path / "catalog.yaml", "tools:\n  web_search: {cost_usd: 0.003, latency_ms: 5, capabilities: [s], complexity: simple}\n")
    assert suggested() == "otel-agent-eval catalog draft t.json --merge catalog.yaml"


@pytest.mark.parametrize("args", [["score", "in/t.json", "--junit", "in/t.json"], ["score", "in", "--html", "in/t.json"],
                                  ["catalog", "draft", "in/t.json", "-o", "in/t.json", "--force"]])
def test_an_output_that_is_an_input_trace_file_is_refused_before_reading(tmp_path, args):
    before = traces(tmp_path / "in" / "t.json").read_bytes()
    code, out, err = cli(*args, cwd=tmp_path)
    flag = args[-2] if args[-1] != "--force" else "--output"
    assert (code, out, err) == (2, "", f"otel-agent-eval: {flag} in/t.json: is the trace file in/t.json, an input; "
                                       "writing it would destroy it\n")
    assert (tmp_path / "in" / "t.json").read_bytes() == before


def test_output_naming_the_merged_catalog_merges_in_place(tmp_path):
    traces(tmp_path / "t.json")
    write(tmp_path / "c.yaml", "tools:\n  local_index: {cost_usd: 0, latency_ms: 5, capabilities: [s], complexity: simple}\n")
    code, _, err = cli("catalog", "draft", "t.json", "--merge", "c.yaml", "-o", "c.yaml", cwd=tmp_path)
    assert code == 0, err
    assert "web_search:" in (tmp_path / "c.yaml").read_text()


# -- 3: empty arguments (an unset variable in a CI job) ---------------------------------------------------------

@pytest.mark.parametrize("args, argument", [
    (["score", ""], "score: argument FILE"),
    (["compare", "", "t.json"], "compare: argument BASE"),
    (["score", "t.json", "--junit", ""], "score: argument --junit"),
    (["score", "t.json", "--html", ""], "score: argument --html"),
    (["score", "t.json", "--catalog", ""], "score: argument --catalog"),
    (["score", "t.json", "--env", ""], "score: argument --environment/--env"),
    (["catalog", "draft", "t.json", "-o", ""], "catalog draft: argument -o/--output"),
    (["catalog", "show", ""], "catalog show: argument file"),
])
def test_an_empty_argument_is_bad_input_naming_it(tmp_path, monkeypatch, args, argument):
    traces(tmp_path / "t.json")
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", "nosuch.yaml")  # --catalog "" must not fall back to it
    code, out, err = cli(*args, cwd=tmp_path)
    command = argument.split(":")[0]
    assert (code, out, err) == (2, "", f"otel-agent-eval {argument}: an empty value (an unset variable?) "
                                       f"(see otel-agent-eval {command} --help)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_an_empty_path_is_not_the_current_directory(tmp_path):
    with pytest.raises(TraceInputError, match="an empty path"):
        trace_files([""])


# -- 17: values from OTEL_AGENT_EVAL_* variables -------------------------------------------------------------------

@pytest.mark.parametrize("command", ["score", "compare"])
@pytest.mark.parametrize("variable, value, message", [
    ("OTEL_AGENT_EVAL_ENVIRONMENT", "stagin", "$OTEL_AGENT_EVAL_ENVIRONMENT: unknown environment 'stagin'; "
                                              "<packaged default_catalog.yaml> has: development, staging, production"),
    ("OTEL_AGENT_EVAL_CATALOG", "nosuch.yaml", "$OTEL_AGENT_EVAL_CATALOG: nosuch.yaml: cannot read the file: "
                                               "No such file or directory"),
])
def test_a_bad_value_from_a_variable_names_the_variable(tmp_path, monkeypatch, command, variable, value, message):
    traces(tmp_path / "t.json")
    monkeypatch.setenv(variable, value)
    args = ["t.json"] if command == "score" else ["t.json", "t.json"]
    assert cli(command, *args, cwd=tmp_path) == (2, "", f"otel-agent-eval: {message}\n")


def test_a_flag_wins_over_a_bad_variable(tmp_path, monkeypatch):
    traces(tmp_path / "t.json")
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENVIRONMENT", "stagin")
    assert cli("score", "t.json", "--env", "staging", "--fail-under", "efficiency=0", cwd=tmp_path)[0] == 0


# -- 11 and 19: the files users have ----------------------------------------------------------------------------

def test_what_a_console_span_exporter_writes_scores_like_its_json_lines(tmp_path):
    path = tmp_path / "console.json"
    spans = console(path, runs=3)
    assert path.read_text().startswith("{\n    \"name\": ")  # indented documents, one after another
    lines = write(tmp_path / "lines.jsonl", "".join(s.to_json(indent=None) + "\n" for s in spans))
    problems: list[object] = []
    report, same = score_traces(path, on_problem=problems.append), score_traces(lines)
    assert problems == [] and (report.inputs.spans, report.calls, report.runs) == (6, 3, 3)
    assert report.to_dict()["groups"] == same.to_dict()["groups"]
    code, out, err = cli("score", "console.json", "--fail-under", "efficiency=0", cwd=tmp_path)
    assert (code, err) == (0, "") and out.startswith("Scored 3 tool calls and 3 agent runs from 6 spans in 1 file.")


def test_a_long_console_file_is_read_a_document_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "console.json"
    console(path, runs=300)
    monkeypatch.setattr(recorded, "MAX_DOCUMENT_BYTES", 16 * 1024)  # each document is small; the file is not
    monkeypatch.setattr(recorded, "READ_BUFFER", 4096)  # documents cut across the pieces read
    assert path.stat().st_size > 10 * recorded.MAX_DOCUMENT_BYTES
    spans = RecordedSpans(path)
    assert len(list(spans)) == 600 and spans.stats.problems == []


def test_a_console_file_cut_short_keeps_what_came_before_and_names_the_line(tmp_path):
    path = tmp_path / "console.json"
    console(path, runs=2)
    text = path.read_text()
    last = text.rindex("\n{") + 1  # the fourth span's document
    cut = text.index("\n", last + 40) + 1  # a writer killed after a few of its lines
    write(path, text[:cut])
    problems: list[object] = []
    spans = RecordedSpans(path, on_problem=problems.append)
    assert len(list(spans)) == 3 and spans.stats.records_skipped == 1
    assert [str(p) for p in problems] == [f"{path}:{text[:last].count(chr(10)) + 1}: truncated JSON: the record ends early "
                                          "(Expecting property name enclosed in double quotes)"]


@pytest.mark.parametrize("content, message", [
    ('[{"traceId":"5af7183fb1d4cf5f","id":"6b221d5bc9e6496c","name":"execute_tool search","timestamp":1700000000000000,'
     '"duration":1000,"localEndpoint":{"serviceName":"svc"},"tags":{"gen_ai.tool.name":"search"}}]\n',
     "looks like Zipkin JSON, not OTLP trace data: export OTLP (an OTLP exporter, or the Collector with a zipkin "
     "receiver and a file exporter)"),
    ("null\n", "not OTLP trace data (a JSON null, not an object)"),
])
def test_foreign_json_says_what_it_looks_like(tmp_path, content, message):
    write(tmp_path / "f.json", content)
    assert cli("score", "f.json", cwd=tmp_path) == (2, "", f"otel-agent-eval: f.json:1: {message}\n"
                                                         "otel-agent-eval: no spans could be read from 1 file\n")


# -- 23: output paths ------------------------------------------------------------------------------------------

def test_a_directory_as_the_html_report_is_refused_before_the_table(tmp_path):
    traces(tmp_path / "t.json")
    (tmp_path / "out").mkdir()
    assert cli("score", "t.json", "--html", "out", cwd=tmp_path) == (2, "", "otel-agent-eval: --html out: cannot write: Is a directory\n")


@pytest.mark.parametrize("output, message", [("out", "cannot write: Is a directory"),
                                             pytest.param(FULL, "cannot write: No space left on device",
                                                          marks=pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full"))])
def test_draft_output_errors_name_the_flag(tmp_path, output, message):
    traces(tmp_path / "t.json")
    (tmp_path / "out").mkdir()
    code, _, err = cli("catalog", "draft", "t.json", "-o", output, cwd=tmp_path)
    assert (code, err) == (2, f"otel-agent-eval: --output {output}: {message}\n")
