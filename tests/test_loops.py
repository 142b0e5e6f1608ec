"""Loop detection: 3+ consecutive calls of one tool with the same captured arguments, through real SDK spans.

Unknown (not captured) arguments are never the same arguments: such a call breaks a loop.
"""
from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor

UNKNOWN = object()  # a call whose span carries no arguments


def _run(*arguments, tool="local_index", errors=()):
    registry, exported, runs = CollectorRegistry(), InMemorySpanExporter(), []
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=SimpleSpanProcessor(exported), background=False,
                                       on_run=runs.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("loops")
    with tracer.start_as_current_span("invoke_agent support_agent",
                                      attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        for i, args in enumerate(arguments):
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
            if args is not UNKNOWN:
                attrs["gen_ai.tool.call.arguments"] = json.dumps(args)
            if i in errors:
                attrs["error.type"] = "timeout"
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attrs):
                pass
    provider.shutdown()
    (run,) = runs
    root = next(s for s in exported.get_finished_spans() if s.name.startswith("invoke_agent"))
    return run, registry, root


Q, R = {"query": "returns"}, {"query": "refunds"}


@pytest.mark.parametrize("arguments, loops", [
    ((Q, Q, Q), 1),
    ((Q, Q, Q, Q, Q), 1),  # one loop, however long
    ((Q, Q, Q, R, R, R), 2),
    ((Q, Q, R, Q), 0),
    ((Q, Q), 0),
    ((UNKNOWN, UNKNOWN, UNKNOWN), 0),  # unknown arguments are never identical
    ((Q, Q, UNKNOWN, Q, Q), 0),  # an unknown call breaks the streak
    (({"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1, "b": 2}), 1),  # the same arguments in another key order
])
def test_loops_are_runs_of_identical_consecutive_calls(arguments, loops):
    run, registry, root = _run(*arguments)
    assert run.evaluation.loops == ("local_index",) * loops
    sample = registry.get_sample_value("agent_eval_tool_call_loops_total", {
        "gen_ai_agent_name": "support_agent", "task": "faq", "gen_ai_tool_name": "local_index"})
    assert (sample or 0) == loops
    assert root.attributes.get("agent_eval.run.loops", 0) == loops


def test_a_retry_loop_of_failing_calls_is_a_loop_too():
    run, _, _ = _run(Q, Q, Q, errors={0, 1, 2})
    assert run.evaluation.loops == ("local_index",)
