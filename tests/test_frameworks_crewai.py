"""CrewAI with openinference-instrumentation-crewai, in its default settings, read right.

crewai cannot be installed beside the other test dependencies (every crewai 1.x pins `aiosqlite~=0.21`,
older ones `openai<1`, against the versions tests/constraints.txt locks; pip spent 5 minutes to say so),
so its run is recorded by crewai itself in a separate environment (record_frameworks.py `crewai_run`: a
sequential crew of a `Researcher`, which may delegate, and a `Writer`, each over a scripted subclass of
crewai's own `BaseLLM` answering its native tool calling) and replayed here through a real SDK
TracerProvider (recorded_spans.py).

The Researcher calls local_index, then web_search, whose function raises, then delegates to the Writer
(crewai's `Delegate work to coworker` tool), which calls local_index; both answer. OpenInference writes
one AGENT span `<role>._execute_core` per task (`graph.node.id` is the role) and a TOOL span
`<tool>.run` per call, the coworker's call nested inside the delegation's span; no AGENT span for the
coworker, and no LLM span (crewai's own model classes are not instrumented by it).
"""
from __future__ import annotations

import json

import pytest

import genai_frameworks as gf
import recorded_crewai
from record_frameworks import CREW_RUN, WEB_SEARCH_ERROR
from otel_agent_eval import tool_call_from_span
from otel_agent_eval.config.catalog import DEFAULT_IGNORE_TOOLS
from recorded_spans import replay

SCORED = [(role, name, arguments) for role, name, arguments in CREW_RUN if name not in DEFAULT_IGNORE_TOOLS]


@pytest.fixture(scope="module")
def captured() -> gf.Capture:
    with gf.Capture() as captured:
        replay(recorded_crewai.SPANS, captured.provider)
    return captured


def test_the_recording_is_crewais_own_output():
    tools = sorted((s for s in recorded_crewai.SPANS if s["attributes"].get("openinference.span.kind") == "TOOL"),
                   key=lambda s: s["start"])
    assert [(s["name"], json.loads(s["attributes"]["input.value"])) for s in tools] == [
        (f"{name}.run", arguments) for _, name, arguments in CREW_RUN]
    (agent,) = [s for s in recorded_crewai.SPANS if s["attributes"].get("openinference.span.kind") == "AGENT"]
    assert (agent["name"], agent["attributes"]["graph.node.id"]) == ("Researcher._execute_core", "Researcher")
    (delegation,) = [s for s in tools if s["name"].startswith("Delegate")]
    (inner,) = [s for s in tools if s["parent"] == delegation["id"]]  # the coworker's call, inside the delegation
    assert json.loads(inner["attributes"]["input.value"]) == {"query": "shipping"}


def test_each_call_is_read_with_its_name_arguments_and_error():
    spans = replay_spans()
    records = sorted((r for r in map(tool_call_from_span, spans) if r is not None), key=lambda r: r.start_ns)
    assert [(r.name, r.arguments) for r in records] == [(name, arguments) for _, name, arguments in SCORED]
    assert [r.error for r in records] == [None, "ConnectionError", None]  # web_search raised
    assert all(r.convention == "openinference" and r.arguments_captured for r in records)


def test_every_call_is_scored_once_with_the_role_of_its_agent_and_delegation_is_a_framework_tool(captured):
    assert [(r.agent, r.name, r.arguments) for r, _ in captured.scored] == [
        ("Researcher", name, arguments) for _, name, arguments in SCORED]  # the coworker's call: the delegating role
    assert "Delegate work to coworker" in DEFAULT_IGNORE_TOOLS
    samples = captured.samples("agent_eval_tool_calls_total")
    assert {(s.labels["gen_ai_tool_name"], s.labels["gen_ai_agent_name"]): s.value for s in samples if s.value} == {
        ("local_index", "Researcher"): 2, ("web_search", "Researcher"): 1}
    (failed,) = [r for r, _ in captured.scored if r.error]
    assert (failed.name, failed.error) == ("web_search", "ConnectionError")
    assert gf.self_errors(captured.registry) == {}


def test_one_run_for_the_agent_span_that_failed_on_its_unrecovered_tool_error(captured):
    (run,) = captured.runs
    assert (run.agent, run.kind, run.closed_by) == ("Researcher", "agent", "end")
    assert [(c.name, c.error) for c in run.tool_calls] == [("local_index", None), ("web_search", "ConnectionError"),
                                                           ("local_index", None)]
    assert not run.evaluation.completed
    assert run.evaluation.completion_reason == "tool errors not recovered by a later successful call: web_search"
    assert run.llm_calls == []  # no LLM span from this instrumentation
    assert WEB_SEARCH_ERROR in json.dumps(recorded_crewai.SPANS)


def replay_spans():
    with gf.Capture() as captured:
        replay(recorded_crewai.SPANS, captured.provider)
    return captured.spans


def test_score_reads_the_same_from_the_crews_otlp_export(captured, tmp_path):
    from test_score import collector_lines, write  # noqa: PLC0415 - the OTLP/JSON the Collector writes

    from otel_agent_eval.offline.score import score_traces  # noqa: PLC0415

    scored, runs = [], []
    score_traces(write(tmp_path / "crew.jsonl", collector_lines(captured.spans)), on_run=runs.append,
                 on_call=lambda record, score: scored.append((record.agent, record.name, record.arguments, record.error)))
    assert scored == [(r.agent, r.name, r.arguments, r.error) for r, _ in captured.scored]
    assert [(run.agent, len(run.tool_calls), run.evaluation.completed) for run in runs] == [("Researcher", 3, False)]
