"""semantic-kernel, GenAI convention, read right: `plugin-function` tool names, no arguments by default.

semantic-kernel cannot be installed beside the other test dependencies (every release needs
`pydantic<2.14` and `mcp<2.0`), so its runs are recorded by semantic-kernel itself in a separate
environment (record_frameworks.py: a `ChatCompletionAgent` named support_agent with the plugin
`support`, over semantic-kernel's real `OpenAIChatCompletion`, its AsyncOpenAI client served canned
chat completions in process) and replayed here through a real SDK TracerProvider (recorded_spans.py).

What semantic-kernel writes:

- by default, only its `execute_tool` spans (`gen_ai.tool.name` is the qualified `support-local_index`,
  no `gen_ai.tool.call.arguments`) under an `AutoFunctionInvocationLoop` span: no model span and no
  agent span, so the run has no agent label and no LLM calls;
- with SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS=true, also `invoke_agent support_agent`
  and one `chat` span per model call (token counts as strings); still no arguments (those need
  ..._DIAGNOSTICS_SENSITIVE).
"""
from __future__ import annotations

import pytest

import genai_frameworks as gf
import recorded_semantic_kernel
from genai_frameworks import AGENT_NAME, INPUT_TOKENS, MODEL, OUTPUT_TOKENS
from otel_agent_eval import tool_call_from_span
from recorded_spans import replay

QUALIFIED = [f"support-{name}" for name in gf.TOOL_NAMES]
VARIANTS = {"default": recorded_semantic_kernel.SPANS, "diagnostics": recorded_semantic_kernel.SPANS_WITH_DIAGNOSTICS}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def captured(request) -> tuple[str, gf.Capture]:
    with gf.Capture() as captured:
        replay(VARIANTS[request.param], captured.provider)
    return request.param, captured


def test_the_recording_is_what_semantic_kernel_writes(captured):
    variant, captured = captured
    tools = [s for s in captured.spans if s.name.startswith("execute_tool")]
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == QUALIFIED
    assert all("gen_ai.tool.call.arguments" not in s.attributes for s in tools)
    chats = [s for s in captured.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == (0 if variant == "default" else gf.MODEL_CALLS)


def test_each_tool_span_is_read_once_its_arguments_unknown(captured):
    _, captured = captured
    records = [r for r in map(tool_call_from_span, captured.spans) if r is not None]
    assert [r.name for r in records] == QUALIFIED
    assert [r.call_id for r in records] == [s.call_id for s in gf.RUN]
    for record in records:
        assert record.convention == "gen_ai" and record.problems == [] and record.error is None
        assert record.arguments is None and not record.arguments_captured


def test_qualified_names_score_as_the_catalog_tools(captured):
    variant, captured = captured
    assert [r.name for r, _ in captured.scored] == QUALIFIED
    assert [score.tool for _, score in captured.scored] == gf.TOOL_NAMES
    assert all(score.outcome != "unknown_tool" for _, score in captured.scored)
    # no agent span by default: no label, and never a span name
    gf.assert_calls_counted_once(captured, "" if variant == "default" else AGENT_NAME)


def test_one_run_with_its_calls_in_order(captured):
    variant, captured = captured
    (run,) = captured.runs
    assert [r.name for r in run.tool_calls] == QUALIFIED and run.status == "ok"
    if variant == "default":  # rooted at AutoFunctionInvocationLoop, which names no agent
        assert (run.agent, run.kind, run.root_name, run.llm_calls) == (None, "trace", "AutoFunctionInvocationLoop", [])
    else:
        assert (run.agent, run.kind, run.task) == (AGENT_NAME, "agent", "faq")
        assert len(run.llm_calls) == gf.MODEL_CALLS
        assert {(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls} == {(MODEL, INPUT_TOKENS, OUTPUT_TOKENS)}


def test_unknown_arguments_are_neither_valid_nor_invalid_nor_repeats(captured):
    _, captured = captured
    (run,) = captured.runs
    e = run.evaluation
    assert e.completed and e.argument_validity is None and e.invalid_calls == ()
    assert len(e.arguments_not_captured) == len(gf.RUN) and e.redundant_calls == () and e.unpriced_models == ()


def test_no_self_errors(captured):
    _, captured = captured
    assert gf.self_errors(captured.registry) == {}
    tools = [s for s in captured.forwarded if "agent_eval.outcome" in (s.attributes or {})]
    assert [s.attributes["agent_eval.arguments_captured"] for s in tools] == [False] * len(gf.RUN)
