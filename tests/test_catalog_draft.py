"""`otel-agent-eval catalog draft`: from recorded traces to a catalog that `catalog check` takes and `score` uses.

The traces are a small agent app's, recorded as a user records theirs: real SDK spans (GenAI
`invoke_agent` roots, `execute_tool` children with their descriptions, a model call declaring
the tools in `gen_ai.tool.definitions`) exported by the SDK's OTLP/HTTP exporter to a real
receiver on localhost, whose requests are written to a file as the Collector's `format: proto`
writes them. docs/first-catalog.md walks the same path.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from otel_agent_eval.config.catalog import check_catalog, parse_catalog
from otel_agent_eval.offline.draft import FILL_IN, merge_draft, observe_traces, render_draft
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.tools.cli import main
from otlp_receiver import running_receiver

T0 = 1_750_000_000_000_000_000
MS = 1_000_000
DEFINITIONS = [
    {"type": "function", "name": "local_search", "description": "Search the team's own notes.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                    "required": ["query"]}},
    {"type": "function", "name": "web_search", "description": "Search the web (a paid API).",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
]
MODEL = "acme-chat-1"  # a model no price list knows: its price is the user's to fill in


def record_app(path: Path) -> Path:
    """Ten runs of `research_agent`: nine answered from `local_search` (one called by its qualified name, one that
    fails), one from `web_search`; and a `clock` tool called outside any agent. Written as the Collector would."""
    with running_receiver("http") as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "research-app"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
        tracer = provider.get_tracer("research-app")
        now = T0
        for run in range(10):
            root = tracer.start_span("invoke_agent research_agent", start_time=now, attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "research_agent"})
            context = set_span_in_context(root)
            chat = tracer.start_span(f"chat {MODEL}", context=context, start_time=now + MS, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL, "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 200, "gen_ai.tool.definitions": json.dumps(DEFINITIONS)})
            chat.end(end_time=now + 400 * MS)
            tool = "web_search" if run == 9 else "kb-local_search" if run == 8 else "local_search"
            duration = (300 + 10 * run) * MS if tool == "web_search" else (20 + run) * MS
            call = tracer.start_span(f"execute_tool {tool}", context=context, start_time=now + 401 * MS, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": f"call_{run}",
                "gen_ai.tool.call.arguments": json.dumps({"query": f"question {run}"})})
            if run == 3:
                call.set_status(Status(StatusCode.ERROR, "index busy"))
                call.set_attribute("error.type", "TimeoutError")
            call.end(end_time=now + 401 * MS + duration)
            root.end(end_time=now + 1000 * MS)
            now += 2000 * MS
        clock = tracer.start_span("execute_tool clock", start_time=now, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "clock",
            "gen_ai.tool.description": "The time now."})
        clock.end(end_time=now + 2 * MS)
        provider.shutdown()  # flushes the batch through the exporter
        requests = receiver.requests
    assert sum(len(ss.spans) for r in requests for rs in r.resource_spans for ss in rs.scope_spans) == 31
    data = b"".join(len(m).to_bytes(4, "big") + m for m in (r.SerializeToString() for r in requests))
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    return record_app(tmp_path_factory.mktemp("recorded") / "traces.binpb")


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def score_json(traces: Path, catalog: Path) -> tuple[int, dict]:
    code, out, err = cli("score", str(traces), "--catalog", str(catalog), "--json")
    return code, json.loads(out)


def tool_block(text: str, name: str) -> str:
    return re.search(rf"^  {name}:\n((?:    .*\n)+)", text, re.M).group(1)


# -- a fresh draft ----------------------------------------------------------------------------------------------

def test_draft_tells_what_the_traces_tell_and_marks_the_rest(traces, tmp_path):
    code, text, err = cli("catalog", "draft", str(traces))
    assert code == 0, err
    assert text.startswith("# Tool catalog DRAFTED by `otel-agent-eval catalog draft` from 31 spans in 1 file")
    catalog = parse_catalog(text)
    assert sorted(catalog.tools) == ["clock", "local_search", "web_search"]
    local = catalog.tools["local_search"]
    assert local.aliases == ("kb-local_search",)  # the qualified name seen, under the canonical one
    assert local.description == "Search the team's own notes." and local.parameters == DEFINITIONS[0]["parameters"]
    assert catalog.tools["clock"].description == "The time now."  # from the tool span's own gen_ai.tool.description
    # its busiest name's latency: 8 calls of 20..27 ms, p50 23 ms (nearest rank), p99 the slowest
    assert local.latency_ms == pytest.approx(23, abs=0.2) and local.latency_slo_ms == pytest.approx(27, abs=0.2)
    assert "# seen: 9 calls by research_agent, 1 error (11% error rate)" in tool_block(text, "local_search")
    for name in catalog.tools:  # what the traces cannot tell, marked on every tool
        block = tool_block(text, name)
        assert f"cost_usd: 0.0  # {FILL_IN}" in block and f"complexity: simple  # {FILL_IN}" in block
        assert re.search(rf"capabilities: .*# {FILL_IN}", block)
    route = catalog.task("research_agent")
    assert dict(route.match) == {"gen_ai.agent.name": ("research_agent",)}
    assert route.profile == "cost_only" and route.capability == "used_by_research_agent"
    assert route.acceptable_tools == ()  # listed, commented: an acceptable tool would pass whatever it costs
    assert f'# acceptable_tools: ["local_search", "web_search"]  # the tools it used; {FILL_IN}' in text
    assert f'#   {MODEL}: {{input_per_1k: 0.0, output_per_1k: 0.0}}  # {FILL_IN}: price unknown; 10 calls, 10,000 input and ' \
           f'2,000 output tokens' in text
    assert cli("catalog", "draft", str(traces))[1] == text  # the same traces, the same bytes: drafts diff well


def test_a_drafted_catalog_scores_no_call_as_wasteful(traces, tmp_path):
    draft = tmp_path / "catalog.yaml"
    assert cli("catalog", "draft", str(traces), "-o", str(draft))[0] == 0
    code, out, err = cli("catalog", "check", str(draft))
    assert code == 0 and "ok (3 tools, 1 task)" in out, err
    code, report = score_json(traces, draft)
    assert code == 0 and report["gate"]["passed"]
    tools = [t for g in report["groups"] for t in g["tools"]]
    assert sum(t["calls"] for t in tools) == 11 and all(t["known"] for t in tools)  # no unknown tool
    assert all(t["efficiency"] == 1.0 and t["wasted_usd"] == 0 for t in tools)
    assert all(set(t["outcomes"]) <= {"optimal", "acceptable", "error"} for t in tools)
    assert report["poor_choices"] == [] and report["coverage"]["unknown_tools"] == []


def test_edit_two_prices_and_the_gate_passes_with_the_money_wasted(traces, tmp_path):
    """docs/first-catalog.md: web_search gets its price, the model its price; the one web search is money wasted."""
    draft = tmp_path / "catalog.yaml"
    cli("catalog", "draft", str(traces), "-o", str(draft))
    text = draft.read_text()
    block = tool_block(text, "web_search")
    text = text.replace(block, block.replace("cost_usd: 0.0", "cost_usd: 0.003"))
    text = text.replace(f"# models:\n#   {MODEL}: {{input_per_1k: 0.0, output_per_1k: 0.0}}",
                        f"models:\n  {MODEL}: {{input_per_1k: 0.0005, output_per_1k: 0.0015}}")
    draft.write_text(text)
    code, report = score_json(traces, draft)
    assert code == 0 and report["gate"]["passed"], report["gate"]
    group = next(g for g in report["groups"] if g["agent"] == "research_agent")
    assert (group["task"], group["calls"], group["runs"]) == ("research_agent", 10, 10)
    assert group["efficiency"] == pytest.approx(0.9)  # nine free searches, one paid one where the free one would do
    assert group["wasted_usd"] == pytest.approx(0.003)
    assert report["poor_choices"] == [{"task": "research_agent", "tool": "web_search", "optimal_tool": "local_search",
                                       "calls": 1, "wasted_usd": pytest.approx(0.003)}]
    llm = (1000 * 0.0005 + 200 * 0.0015) / 1000  # per run
    assert group["cost_per_run_usd"] == pytest.approx(llm + 0.003 / 10)
    assert report["coverage"]["unpriced_models"] == []


# -- --merge ------------------------------------------------------------------------------------------------------

USER = """\
# Our catalog -- hand-written, keep these comments!
version: 1

tools:
    # the free one
    local_search:   {cost_usd: 0, latency_ms: 25, capabilities: [search], complexity: simple}   # trailing note

# Task routes
tasks:
    other:
        match: {gen_ai.agent.name: someone_else}
        capability: search
# end of file, no newline"""


def without(merged: str, original: str) -> str:
    """`merged` with the lines that are not in `original` (in order) taken out: what is left must be `original`."""
    kept, lines = [], original.splitlines(keepends=True)
    for line in merged.splitlines(keepends=True):
        if lines and (line == lines[0] or line == lines[0] + "\n" and len(lines) == 1):
            kept.append(lines.pop(0))
    assert not lines
    return "".join(kept)


def test_merge_adds_only_what_is_missing_and_keeps_every_byte_of_the_user(traces, tmp_path):
    user = tmp_path / "catalog.yaml"
    user.write_text(USER)
    code, out, err = cli("catalog", "draft", str(traces), "--merge", str(user))
    assert code == 0 and out == "", err
    assert "added 2 tools: clock, web_search; 1 task: research_agent; 1 unpriced model" in err
    merged = user.read_text()
    assert merged.startswith(USER) or without(merged, USER) == USER
    assert without(merged, USER) == USER  # the user's lines, in order, byte for byte
    assert merged.count("local_search:") == 1  # known (and its qualified name with it): not drafted again
    catalog = parse_catalog(merged)
    assert sorted(catalog.tools) == ["clock", "local_search", "web_search"]
    assert [t.name for t in catalog.tasks] == ["other", "research_agent"]  # drafted routes come after the user's
    assert catalog.tools["web_search"].capabilities == ("used_by_research_agent",)
    assert "    web_search:\n" in merged  # the user's indentation
    assert check_catalog(merged) == []
    code, out, err = cli("catalog", "draft", str(traces), "--merge", str(user))  # again: nothing left to add
    assert code == 0 and "nothing to add" in err and user.read_text() == merged
    code, report = score_json(traces, user)
    assert report["coverage"]["unknown_tools"] == []


def test_merge_appends_the_sections_a_catalog_lacks(traces):
    user = "tools:\n  web_search: {cost_usd: 0.003, latency_ms: 300, capabilities: [web], complexity: moderate}\n"
    draft = observe_traces([traces], parse_catalog(user))
    merged, added = merge_draft(user, draft)
    assert merged.startswith(user) and check_catalog(merged) == []
    catalog = parse_catalog(merged)
    assert "cost_only" in catalog.profiles and catalog.task("research_agent").profile == "cost_only"
    assert sorted(catalog.tools) == ["clock", "local_search", "web_search"]


def test_merge_refuses_what_it_cannot_add_to_without_rewriting(traces, tmp_path):
    user = tmp_path / "flow.yaml"
    user.write_text("tools: {other: {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple}}\n")
    code, out, err = cli("catalog", "draft", str(traces), "--merge", str(user))
    assert code == 2 and err.count("\n") == 1 and "tools: written on one line" in err and f"{user}:1" in err
    assert user.read_text().startswith("tools: {other")
    broken = tmp_path / "broken.yaml"
    broken.write_text("tools:\n  a: {cost_usd: -1}\n")
    code, out, err = cli("catalog", "draft", str(traces), "--merge", str(broken))
    assert code == 2 and err.count("\n") == 1 and "fix it first: otel-agent-eval catalog check" in err


def test_bad_input_is_one_line(tmp_path):
    code, out, err = cli("catalog", "draft", str(tmp_path / "nowhere.json"))
    assert code == 2 and err.count("\n") == 1 and "nowhere.json" in err
    (tmp_path / "empty.json").write_text("not traces\n")
    code, out, err = cli("catalog", "draft", str(tmp_path / "empty.json"))
    assert code == 2 and err.splitlines()[-1].startswith("otel-agent-eval: catalog draft: no spans could be read")


def test_draft_reads_vercel_and_openinference_tool_definitions():
    from otel_agent_eval.offline.draft import _read_definitions

    found: dict = {}
    _read_definitions({"ai.prompt.tools": [json.dumps({"type": "function", "name": "calculator", "description": "Add up.",
                                                       "inputSchema": {"type": "object", "properties": {"x": {"type": "number"}}}})],
                       "llm.tools.0.tool.json_schema": json.dumps({"type": "function", "function": {
                           "name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}})}, found)
    assert found == {"calculator": ("Add up.", {"type": "object", "properties": {"x": {"type": "number"}}}),
                     "lookup": ("Look up.", {"type": "object"})}


def test_the_draft_of_a_run_with_no_agent_scores_its_tools_as_their_own_best(traces):
    draft = observe_traces([traces])
    assert draft.tools["clock"].unrouted and "clock" not in draft.routes
    catalog = parse_catalog(render_draft(draft))
    assert catalog.tools["clock"].capabilities == ("clock",)
    report = score_traces([traces], catalog)
    unrouted = report.group("", "")
    assert unrouted is not None and unrouted.efficiency == 1.0


# -- coverage: what the catalog lacks, and the command that drafts it ------------------------------------------------

def test_score_names_what_the_catalog_lacks_and_the_command_that_drafts_it(traces, tmp_path):
    command = f"otel-agent-eval catalog draft {traces} -o catalog.yaml"
    code, out, err = cli("score", str(traces), "--json")
    coverage = json.loads(out)["coverage"]
    assert code == 1 and coverage == {
        "unknown_tools": [{"tool": "local_search", "calls": 8}, {"tool": "clock", "calls": 1},
                          {"tool": "kb-local_search", "calls": 1}],  # web_search: the packaged catalog's
        "unpriced_models": [{"model": MODEL, "calls": 10}], "commented_models": [], "prices_to_set": False,
        "draft_command": command}
    code, out, err = cli("score", str(traces))
    assert code == 1
    lacks = ("the catalog lacks 3 tools (local_search: 8 calls, clock: 1 call, kb-local_search: 1 call) "
             f"and 1 model price ({MODEL}: 10 calls)")
    assert f"Coverage: {lacks}. Unknown tools score 0.\nDraft what it lacks: {command}\n" in out
    assert err.splitlines()[-1] == f"otel-agent-eval: {lacks}. Unknown tools score 0. Draft what it lacks: {command}"
    user = tmp_path / "mine.yaml"
    user.write_text(USER)
    code, out, err = cli("score", str(traces), "--catalog", str(user), "--json")
    assert json.loads(out)["coverage"]["draft_command"] == f"otel-agent-eval catalog draft {traces} --merge {user}"


def test_processor_metrics_name_the_tools_and_models_the_catalog_lacks_within_the_label_caps():
    from prometheus_client import CollectorRegistry

    from otel_agent_eval import AgentEvalSpanProcessor

    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, max_unknown_tools=3)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("coverage")
    for i in range(5):
        root = tracer.start_span("invoke_agent helper", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                   "gen_ai.agent.name": "helper"})
        context = set_span_in_context(root)
        for name in (f"tool_{i}", "web_search"):  # five unknown tools, and one the packaged catalog knows
            tracer.start_span(f"execute_tool {name}", context=context, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}).end()
        tracer.start_span("chat", context=context, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": f"model_{i % 2}", "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 1}).end()
        root.end()
    processor.drain()
    value = registry.get_sample_value
    unknown = {f"tool_{i}": value("agent_eval_catalog_unknown_tool_calls_total", {"gen_ai_tool_name": f"tool_{i}"}) for i in range(5)}
    assert unknown == {"tool_0": 1, "tool_1": 1, "tool_2": 1, "tool_3": None, "tool_4": None}  # the cap: 3 names
    assert value("agent_eval_catalog_unknown_tool_calls_total", {"gen_ai_tool_name": "_other_"}) == 2
    assert value("agent_eval_catalog_unknown_tool_calls_total", {"gen_ai_tool_name": "web_search"}) is None
    assert value("agent_eval_catalog_unpriced_model_calls_total", {"gen_ai_request_model": "model_0"}) == 3
    assert value("agent_eval_catalog_unpriced_model_calls_total", {"gen_ai_request_model": "model_1"}) == 2
    provider.shutdown()
