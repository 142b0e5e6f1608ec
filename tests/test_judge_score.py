"""`score --judge`: recorded runs judged by deepeval's real metric and client against the scripted local judge."""
from __future__ import annotations

import contextlib
import io
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from judge_server import JudgeServer, Reply
from test_score import collector_lines, main_in_process, write

MS = 1_000_000
SECRET = "hunter2-very-secret"
FAQ_DEFINITIONS = json.dumps([
    {"type": "function", "name": "local_index", "description": "Search the company's own FAQ pages",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"type": "function", "name": "web_search", "description": "Search the public web (paid)",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}])


def traces(path: Path, runs: int = 3, *, tools: tuple[str, ...] = ("local_index",), label: str = "") -> tuple[Path, list[int]]:
    """`runs` runs of agent `support` (the packaged catalog's faq task: expected local_index), each a trace with a model
    call that declares its tools and the given tool calls, whose arguments hold a secret; and a secret in the input."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    now = 1_770_000_000_000_000_000
    trace_ids = []
    for i in range(runs):
        messages = json.dumps([{"role": "user", "parts": [{"type": "text",
                                                          "content": f"Where is my refund #{i}{label}? password={SECRET}"}]}])
        root = tracer.start_span("invoke_agent support", start_time=now, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", "gen_ai.input.messages": messages})
        trace_ids.append(root.get_span_context().trace_id)
        context = set_span_in_context(root)
        chat = tracer.start_span("chat gpt-4o-mini", context=context, start_time=now + MS, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.input_tokens": 50,
            "gen_ai.usage.output_tokens": 5, "gen_ai.tool.definitions": FAQ_DEFINITIONS})
        chat.end(end_time=now + 300 * MS)
        for j, tool in enumerate(tools):
            start = now + (400 + 100 * j) * MS
            span = tracer.start_span(f"execute_tool {tool}", context=context, start_time=start, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": f"c{i}{j}",
                "gen_ai.tool.call.arguments": json.dumps({"q": "refund policy", "api_key": SECRET}),
                "gen_ai.tool.call.result": f"token={SECRET} 30 days"})
            span.end(end_time=start + 50 * MS)
        root.end(end_time=now + 900 * MS)
        now += 2_000 * MS
    provider.shutdown()
    return write(path, collector_lines(list(exporter.get_finished_spans()))), trace_ids


@pytest.fixture()
def server():
    with JudgeServer() as running:
        yield running


def score(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    return main_in_process([str(tmp_path / "t.json"), *args], tmp_path)


def test_score_judges_every_run_with_the_declared_tools_and_reports_score_reason_and_provenance(tmp_path, server):
    traces(tmp_path / "t.json", tools=("web_search",))
    server.selection = (0.25, "web_search was used where the FAQ index answers refund questions.")
    code, out, err = score(tmp_path, "--json", "--judge", "house-judge", "--judge-base-url", server.base_url,
                           "--judge-budget", "$5")
    assert code == 1 and err.splitlines() == ["otel-agent-eval: gate failed: support/faq: efficiency 0.03 < 0.85 "
                                              "(production fail level)"]
    data = json.loads(out)
    judge = data["judge"]
    assert (judge["runs"], judge["sampled"], judge["judged"], judge["failed"], judge["over_budget"]) == (3, 3, 3, 0, 0)
    assert (judge["judge_model"], judge["metric"], judge["sample_rate"], judge["max_usd"]) == (
        "house-judge", "ToolCorrectnessMetric", 1.0, 5.0)
    assert judge["metric_version"].startswith("deepeval ") and judge["prompt_version"].startswith("sha256:")
    assert judge["cost_usd"] is None and judge["unpriced"] == 3  # the model has no price anywhere
    assert judge["input_tokens"] > 0 and judge["output_tokens"] > 0
    (group,) = judge["groups"]
    # the deterministic part: expected local_index, called web_search -> 0; the judge 0.25; the minimum is 0
    assert (group["agent"], group["task"], group["score"], group["selection_score"]) == ("support", "faq", 0.0, 0.25)
    result = judge["results"][0]
    assert (result["part"], result["deterministic_score"], result["selection_score"]) == ("deterministic", 0.0, 0.25)
    assert result["selection_reason"] == "web_search was used where the FAQ index answers refund questions."
    assert "web_search was used" in result["reason"]
    (summary,) = [g for g in data["groups"] if g["task"] == "faq"]
    assert (summary["judge_score"], summary["judged_runs"]) == (0.0, 3)
    prompts = server.prompts()
    assert len(prompts) == 3
    for prompt in prompts:  # the model call's declared tools, with the catalog's capabilities
        assert "Search the company's own FAQ pages (capabilities: faq_lookup, search)" in prompt
        assert "Search the public web (paid)" in prompt and "Where is my refund" in prompt


def test_nothing_secret_reaches_the_judge_and_drop_tool_io_sends_no_arguments(tmp_path, server):
    traces(tmp_path / "t.json", runs=1)
    code, _, err = score(tmp_path, "--judge", "m", "--judge-base-url", server.base_url)
    assert code == 0, err
    sent = json.dumps([r.body for r in server.requests])
    assert len(server.requests) == 3 and SECRET not in sent  # selection, argument verdicts, argument reason
    assert "refund policy" in sent and "[REDACTED]" in sent
    server.requests.clear()
    code, _, err = score(tmp_path, "--judge", "m", "--judge-base-url", server.base_url, "--judge-drop-tool-io")
    assert code == 0, err
    sent = json.dumps([r.body for r in server.requests])
    assert len(server.requests) == 1 and "refund policy" not in sent and SECRET not in sent  # no arguments: no argument judge


def test_the_gate_fails_on_the_judged_score_and_the_table_junit_and_html_show_it(tmp_path, server):
    traces(tmp_path / "t.json", tools=("local_index",))
    server.selection = (0.5, "local_index fits, but the <agent> looked twice.")
    code, out, err = score(tmp_path, "--judge", "m", "--judge-base-url", server.base_url, "--fail-under", "judge_score=0.6",
                           "--junit", "out.xml", "--html", "out.html", "--no-judge-arguments")
    assert code == 1
    assert "gate failed: support/faq: judge_score 0.5 < 0.6 (--fail-under judge_score)" in err
    assert "Tool selection judged by m, ToolCorrectnessMetric (deepeval " in out
    assert "(expected tools 1.00, judge 0.50): local_index fits, but the <agent> looked twice." in out
    assert "Judged 3 of 3 sampled runs (3 runs in all)" in out and "cost unknown" in out
    assert "local_index fits, but the <agent> looked twice." in out
    suite = ET.parse(tmp_path / "out.xml").getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert (properties["judge_model"], properties["judge_judged"], properties["judge_cost_usd"]) == ("m", "3", "unknown")
    (case,) = [c for c in suite.findall("testcase") if c.get("name") == "faq"]
    assert "judge_score" in case.find("failure").get("message")
    assert "judge_score=0.5" in case.find("system-out").text and "looked twice" in case.find("system-out").text
    html = (tmp_path / "out.html").read_text()
    assert "Tool selection, judged" in html and "the &lt;agent&gt; looked twice" in html and "<agent>" not in html
    assert len(server.requests) == 3  # --no-judge-arguments: one model call per run


def test_the_budget_caps_judgements_by_number_and_by_dollars(tmp_path, server):
    traces(tmp_path / "t.json", runs=4)
    code, out, err = score(tmp_path, "--json", "--judge", "m", "--judge-base-url", server.base_url, "--judge-budget", "2",
                           "--no-judge-arguments")
    judge = json.loads(out)["judge"]
    assert code == 0, err
    assert (judge["judged"], judge["over_budget"], judge["max_judgements"]) == (2, 2, 2) and len(server.requests) == 2
    server.requests.clear()
    server.queue(*[Reply({"score": 1.0, "reason": "ok"}, usage=(1000, 100)) for _ in range(4)])
    # gpt-4o-mini at deepeval's price: 1,000 + 100 tokens cost $0.00021; the cap is passed after the second judgement
    code, out, err = score(tmp_path, "--json", "--judge", "gpt-4o-mini", "--judge-base-url", server.base_url,
                           "--judge-budget", "0.0003usd", "--no-judge-arguments")
    judge = json.loads(out)["judge"]
    assert (judge["judged"], judge["over_budget"]) == (2, 2)
    assert judge["cost_usd"] == pytest.approx(2 * (1000 * 0.15e-6 + 100 * 0.6e-6))
    assert (judge["input_tokens"], judge["output_tokens"]) == (2000, 200)


def test_a_failing_judge_is_counted_and_scoring_goes_on(tmp_path, server, monkeypatch):
    monkeypatch.setenv("DEEPEVAL_RETRY_MAX_ATTEMPTS", "1")
    traces(tmp_path / "t.json", runs=2)
    server.queue(Reply(status=500))
    code, out, err = score(tmp_path, "--json", "--judge", "m", "--judge-base-url", server.base_url, "--no-judge-arguments")
    assert code == 0, err
    judge = json.loads(out)["judge"]
    assert (judge["judged"], judge["failed"]) == (1, 1)
    assert len(judge["errors"]) == 1 and "500" in judge["errors"][0]
    assert judge["results"][-1]["error"] == judge["errors"][0]


def test_the_sample_is_the_online_judges(tmp_path, server):
    sampling = pytest.importorskip("otel_agent_eval.judge.sampling", reason="judge/sampling.py is Engineer B's (judge-online)")
    _, trace_ids = traces(tmp_path / "t.json", runs=24)
    code, out, err = score(tmp_path, "--json", "--judge", "m", "--judge-base-url", server.base_url, "--judge-rate", "0.5",
                           "--no-judge-arguments")
    assert code == 0, err
    judge = json.loads(out)["judge"]
    wanted = {format(t, "032x") for t in trace_ids if sampling.chosen(t, 0.5)}
    assert 0 < len(wanted) < 24
    assert {r["trace_id"] for r in judge["results"]} == wanted and judge["sampled"] == len(wanted)
    assert judge["runs"] == 24 and judge["sample_rate"] == 0.5


def test_judge_options_without_judge_or_without_a_key_are_refused_in_one_line(tmp_path, monkeypatch):
    traces(tmp_path / "t.json", runs=1)
    code, _, err = score(tmp_path, "--judge-rate", "0.5")
    assert code == 2 and "need --judge MODEL" in err
    code, _, err = score(tmp_path, "--judge", "m", "--judge-budget", "lots")
    assert code == 2 and "--judge-budget 'lots'" in err
    for name in ("OPENAI_API_KEY", "OTEL_AGENT_EVAL_JUDGE_API_KEY", "OTEL_AGENT_EVAL_JUDGE_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = score(tmp_path, "--judge", "gpt-4o-mini")
    assert code == 2 and "no API key; set OTEL_AGENT_EVAL_JUDGE_API_KEY" in err and len(err.splitlines()) == 1


def test_compare_gates_on_the_judged_score_with_one_budget_for_both_sides(tmp_path, server):
    from otel_agent_eval.tools.cli import main

    traces(tmp_path / "base" / "t.json", runs=20, label=" base")
    traces(tmp_path / "head" / "t.json", runs=20, label=" head")
    server.respond = lambda prompt: Reply({"score": 1.0 if " base?" in prompt else 0.25, "reason": "scripted"})
    code, out, err = _compare(main, tmp_path, "--json", "--fail-on-regression", "--judge", "m", "--judge-base-url",
                              server.base_url, "--no-judge-arguments")
    assert code == 1, err
    data = json.loads(out)
    (regression,) = data["regressions"]
    assert (regression["group"], regression["metric"], regression["base"], regression["head"]) == (
        "support/faq", "judge_score", 1.0, 0.25)
    assert data["judge"]["base"]["judged"] == data["judge"]["head"]["judged"] == 20
    assert "regression: support/faq: judge_score 1 -> 0.25" in err
    server.requests.clear()
    code, out, err = _compare(main, tmp_path, "--json", "--judge", "m", "--judge-base-url", server.base_url,
                              "--no-judge-arguments", "--judge-budget", "30")
    data = json.loads(out)
    assert (data["judge"]["base"]["judged"], data["judge"]["head"]["judged"], data["judge"]["head"]["over_budget"]) == (20, 10, 10)
    assert len(server.requests) == 30
    change = data["groups"][0]["changes"]["judge_score"]
    assert change["tested"] is False and change["untested"] == "10 judged runs, 20 needed"
    code, out, err = _compare(main, tmp_path, "--json")
    assert "judge_score" not in json.loads(out)["groups"][0]["changes"]  # not judged: not compared


def _compare(main, cwd: Path, *args: str) -> tuple[int, str, str]:
    """`otel-agent-eval compare base head ARGS` in this process, from `cwd`."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["compare", "base", "head", *args])
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()
