"""`catalog draft` on agent traces in the shapes real frameworks write, and the steps of docs/first-catalog.md
followed literally on them.

The traces are made here with the real OpenTelemetry SDK (agent_traces.py) in the shapes of runs recorded from
CrewAI (several runs of one agent in one trace, agents using two tools in the work of one request, agents
using one tool per trace), any-agent (a run with model calls and the `final_answer` pseudo-tool) and the
Vercel AI SDK (tool calls with no agent, a priced model's tokens, a model whose calls failed with no tokens),
written as OTLP/JSON lines into a temporary directory as a user's `traces/`.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from otel_agent_eval.config.catalog import check_catalog, parse_catalog
from otel_agent_eval.offline.draft import _ms_up, _text, merge_draft, observe_traces, render_draft
from otel_agent_eval.offline.report import Coverage
from otel_agent_eval.tools.cli import main
import agent_traces


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def score_json(traces: Path | str, catalog: Path) -> tuple[int, dict]:
    code, out, err = cli("score", str(traces), "--catalog", str(catalog), "--json")
    assert out, err
    return code, json.loads(out)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("user") / "traces"
    agent_traces.crew(folder / "crew.otlp.jsonl")
    agent_traces.any_agent(folder / "any-agent.otlp.jsonl")
    agent_traces.no_agent(folder / "no-agent.otlp.jsonl")
    return folder


@pytest.fixture(scope="module")
def no_agent(tmp_path_factory) -> Path:
    """The Vercel AI SDK runs alone: tools called with no agent, HAIKU's tokens, UNKNOWN_MODEL's failed calls."""
    return agent_traces.no_agent(tmp_path_factory.mktemp("vercel") / "traces.otlp.jsonl")


@pytest.fixture(scope="module")
def drafted(traces, tmp_path_factory) -> Path:
    catalog = tmp_path_factory.mktemp("draft") / "catalog.yaml"
    code, _, err = cli("catalog", "draft", str(traces), "-o", str(catalog))
    assert code == 0, err
    return catalog


def block(text: str, name: str) -> str:
    return re.search(rf"^  {re.escape(name)}:\n((?:    .*\n)+)", text, re.M).group(1)


def uncomment_models(text: str) -> str:
    """What the draft says to do with its models block: uncomment these lines (strip the leading `# `)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("# models:"))
    return "".join(lines[:start]) + "".join(re.sub(r"^# ", "", line) for line in lines[start:])


# -- #4: the suggested SLO is never below the p99 it was drafted from --------------------------------------------

def test_the_drafted_slo_is_rounded_up_so_its_own_traces_do_not_breach_it(traces, drafted):
    code, report = score_json(traces, drafted)
    assert code == 0
    over = {t["tool"]: t["slo_violations"] for t in report["tool_latency"] if t["slo_violations"]}
    assert over == {}  # before: calculate, temperature_forecast 1 each
    assert all(t["slo_violations"] == 0 for g in report["groups"] for t in g["tools"])
    text = drafted.read_text()
    assert "latency_slo_ms: 817  # suggested: observed p99, rounded up" in block(text, "calculate")  # p99 816.468 ms
    assert "latency_slo_ms: 5.97" in block(text, "temperature_forecast")  # p99 5.963 ms
    assert max(agent_traces.TEMPERATURE_MS) == 5.963  # the slowest call, its p99 with this few calls


@pytest.mark.parametrize(("seconds", "text"), [(0.816468, "817"), (0.005963, "5.97"), (0.0059, "5.9"), (0.817, "817"),
                                               (0.000001, "0.01"), (0.01, "10")])
def test_ms_up(seconds, text):
    assert _ms_up(seconds) == text
    assert float(text) >= seconds * 1000 - 1e-9


# -- #5: `# seen:` counts the calls of each agent -----------------------------------------------------------------

def test_the_seen_comment_counts_each_agents_calls(drafted):
    text = drafted.read_text()
    assert '# seen: 9 calls (4 by "Crew Manager", 5 with no agent), 0 errors' in block(text, "calculator")
    assert '# seen: 6 calls (3 by "AI Artist", 3 with no agent), 0 errors' in block(text, "generate_image")
    assert '# seen: 12 calls by "Crew Manager", 0 errors' in block(text, "search_web")
    assert "# seen: 4 calls with no agent, 0 errors" in block(text, "image_reader")


# -- #6: a price set on one tool makes no other tool its optimal one ----------------------------------------------

def test_tools_used_together_get_capabilities_of_their_own(drafted):
    catalog = parse_catalog(drafted.read_text())
    assert catalog.tools["search_web"].capabilities != catalog.tools["calculator"].capabilities
    # one request's work used both: different jobs, so no drafted route puts them side by side
    for agent in ("Crew Manager", "Weather Forecaster", "File Analyzer", "any_agent"):
        assert catalog.task(agent) is None
    for tools in (("search_web", "calculator"), ("temperature_forecast", "precipitation_forecast"),
                  ("read_file_contents", "analyze_image_metadata"), ("write_file", "get_current_time")):
        a, b = (set(catalog.tools[t].capabilities) for t in tools)
        assert not a & b, tools
    assert catalog.task("Knowledge Assistant").capability in catalog.tools["search_knowledge"].capabilities


def test_the_docs_steps_on_framework_shaped_traces_end_in_a_passing_gate_with_no_made_up_waste(traces, drafted, tmp_path):
    """docs/first-catalog.md, steps 3 to 6, followed literally: draft, check, set a tool's price and the models'
    prices (uncommenting the `models:` lines), score."""
    assert cli("catalog", "check", str(drafted))[0] == 0
    text = drafted.read_text()
    for tool, price in (("search_web", "0.003"), ("generate_image", "0.04")):
        old = block(text, tool)
        text = text.replace(old, old.replace("cost_usd: 0.0", f"cost_usd: {price}"))
    text = uncomment_models(text).replace("nonexistent-model-id-12345: {input_per_1k: 0.0, output_per_1k: 0.0}",
                                          "nonexistent-model-id-12345: {input_per_1k: 0.001, output_per_1k: 0.002}")
    priced = tmp_path / "catalog.yaml"
    priced.write_text(text)
    assert cli("catalog", "check", str(priced))[0] == 0
    code, report = score_json(traces, priced)
    assert code == 0 and report["gate"]["passed"], report["gate"]
    assert report["poor_choices"] == [] and report["totals"]["wasted_usd"] == 0
    for group in report["groups"]:
        for tool in group["tools"]:
            assert tool["optimal_tool"] == tool["tool"] and tool["efficiency"] == 1.0, (group["agent"], tool)
    crew = next(g for g in report["groups"] if g["agent"] == "Crew Manager")
    assert crew["cost_per_run_usd"] == pytest.approx(12 * 0.003 / 4)  # the price is in the run cost, as no waste
    assert report["coverage"]["unpriced_models"] == [] and report["coverage"]["unknown_tools"] == []


# -- #7: the models block uncomments into a valid catalog, in a draft and in a merge ------------------------------

def test_uncommenting_the_models_block_gives_a_catalog_that_passes_check(drafted):
    text = drafted.read_text()
    assert '#   # "global.anthropic.claude-haiku-4-5-20251001-v1:0": price known (30 calls' in text
    uncommented = uncomment_models(text)
    assert check_catalog(uncommented, "<uncommented>") == []
    catalog = parse_catalog(uncommented)
    assert list(catalog.models) == ["nonexistent-model-id-12345"]  # the known prices stay notes


def test_uncommenting_merged_models_gives_a_catalog_that_passes_check(tmp_path):
    user = "tools:\n  other: {cost_usd: 0, latency_ms: 1, capabilities: [x], complexity: simple}\n"
    from test_catalog_draft import record_app  # the small app whose model no price list knows

    app = record_app(tmp_path / "app.binpb")
    merged, added = merge_draft(user, observe_traces([app], parse_catalog(user)))
    assert any("unpriced model" in a for a in added)
    assert check_catalog(uncomment_models(merged), "<uncommented>") == []


# -- #8: no loop between `score`'s coverage and `--merge` ---------------------------------------------------------

def test_a_model_whose_calls_used_no_tokens_keeps_no_coverage_gap(no_agent, tmp_path):
    catalog = tmp_path / "vcat.yaml"
    assert cli("catalog", "draft", str(no_agent), "-o", str(catalog))[0] == 0
    assert f"#   {agent_traces.UNKNOWN_MODEL}: {{input_per_1k: 0.0" in catalog.read_text()  # unpriced: a line to fill in
    code, report = score_json(no_agent, catalog)
    assert report["coverage"]["unpriced_models"] == [] and report["coverage"].get("draft_command") is None
    code, out, err = cli("score", str(no_agent), "--catalog", str(catalog))
    assert "Coverage" not in out and "Draft what it lacks" not in out
    assert "they used no tokens" in out


def test_a_model_price_already_named_in_a_comment_is_to_be_set_not_drafted(tmp_path):
    from test_catalog_draft import MODEL, record_app

    app = record_app(tmp_path / "app.binpb")
    catalog = tmp_path / "catalog.yaml"
    assert cli("catalog", "draft", str(app), "-o", str(catalog))[0] == 0
    code, report = score_json(app, catalog)
    coverage = report["coverage"]
    assert coverage["unpriced_models"] == [{"model": MODEL, "calls": 10}]
    assert coverage["commented_models"] == [MODEL] and coverage["prices_to_set"] is True
    code, out, err = cli("catalog", "draft", str(app), "--merge", str(catalog))
    assert "nothing to add" in err  # so the next step is to set the price, which the coverage data says
    coverage = Coverage((), ((MODEL, 10),), (MODEL,))
    assert coverage.prices_to_set and not Coverage((("t", 1),), ((MODEL, 10),), (MODEL,)).prices_to_set


# -- #14: the reason given when there is nothing to draft ----------------------------------------------------------

def test_no_tool_calls_says_so(tmp_path):
    notools = agent_traces.any_agent(tmp_path / "notools.jsonl", tools=())  # the agent run, its model call, no tool
    code, out, err = cli("catalog", "draft", str(notools))
    assert code == 2 and "the traces hold 1 agent run but no tool call" in err and "ignored" not in err, err


def test_only_ignored_tool_calls_says_so(tmp_path):
    only = agent_traces.any_agent(tmp_path / "final.jsonl", tools=("final_answer",))  # smolagents' answer, no other tool
    code, out, err = cli("catalog", "draft", str(only))
    assert code == 2 and "every call in the traces (1 call) is of an ignored tool" in err, err


# -- #22: no bidi or other control character written raw into the YAML --------------------------------------------

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_bidi_and_control_characters_are_escaped(tmp_path):
    evil = "write\x1b[31mRED\nforged line\u202e"
    path = agent_traces.any_agent(tmp_path / "evil.jsonl", tools=("get_current_time", evil, "final_answer"),
                                  agent="agent\u2067x\u2069")
    draft = observe_traces([path])
    text = render_draft(draft)
    assert not re.search(f"[{BIDI}\x00-\x08\x0b-\x1f\x7f]", text)
    assert "\\u202e" in text and "\\u2067" in text
    assert evil in parse_catalog(text).tools
    for char in BIDI:
        assert _text(char) == f'"\\u{ord(char):04x}"'
