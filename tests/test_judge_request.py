"""What a judge is sent: a run's redacted input and calls, and the tools it had, from its spans and the catalog."""
from __future__ import annotations

import json

import pytest
from deepeval.test_case import ToolCall
from opentelemetry.sdk.trace import TracerProvider

from judge_server import JudgeServer
from otel_agent_eval.config.catalog import load_catalog
from otel_agent_eval.core.redact import MASK, Redactor
from otel_agent_eval.core.tool_definitions import ToolDefinition, read_definitions
from otel_agent_eval.judge.models import judge_model
from otel_agent_eval.judge.request import MAX_TEXT_CHARS, judge_redactor, request_of
from otel_agent_eval.offline.judged_metric import JudgedToolCorrectnessMetric, available_tools_of_case
from otel_agent_eval.offline.testing import capture_runs, run_to_test_case

CATALOG = load_catalog(None)


def run_of(root_attributes=None, tools=(("local_index", {"query": "refund"}, "30 days", {}),)):
    """One agent run of `support` through the real SDK and the capturing processor."""
    provider = TracerProvider()
    tracer = provider.get_tracer("tests")
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                  "gen_ai.input.messages": json.dumps([{"role": "user", "content": "What if these shoes don't fit?"}]),
                  **(root_attributes or {})}
    with capture_runs(tracer_provider=provider, catalog=CATALOG) as runs:
        with tracer.start_as_current_span("invoke_agent support", attributes=attributes):
            for name, arguments, result, extra in tools:
                span_attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **extra}
                if arguments is not None:
                    span_attributes["gen_ai.tool.call.arguments"] = json.dumps(arguments)
                if result is not None:
                    span_attributes["gen_ai.tool.call.result"] = result
                with tracer.start_as_current_span(f"execute_tool {name}", attributes=span_attributes):
                    pass
    (run,) = runs
    return run


def names(tools):
    return [t.name for t in tools]


def test_each_convention_declares_tools():
    found: dict[str, ToolDefinition] = {}
    read_definitions({"gen_ai.tool.definitions": json.dumps([
        {"type": "function", "name": "a", "description": "A tool", "parameters": {"type": "object"}},
        {"type": "function", "function": {"name": "b", "description": "OpenAI's shape"}}])}, found)
    read_definitions({"ai.prompt.tools": [json.dumps({"type": "function", "name": "c", "description": "Vercel",
                                                      "inputSchema": {"jsonSchema": {"type": "object", "x": 1}}})]}, found)
    read_definitions({"llm.tools.0.tool.json_schema": json.dumps({"type": "function", "function": {"name": "d"}}),
                      "llm.tools.1.tool.name": "e"}, found)
    read_definitions({"gen_ai.agent.tools": '["f", "a"]'}, found)
    read_definitions({"gen_ai.tool.name": "g", "gen_ai.tool.description": "Described on its own span"}, found)
    read_definitions({"gen_ai.tool.definitions": "not json", "gen_ai.agent.tools": 7}, found)  # skipped, no error
    assert sorted(found) == ["a", "b", "c", "d", "e", "f", "g"]
    assert (found["a"].description, found["a"].schema) == ("A tool", {"type": "object"})
    assert found["b"].description == "OpenAI's shape" and found["c"].schema == {"type": "object", "x": 1}
    assert found["g"].description == "Described on its own span" and found["f"].description == ""


def test_the_tools_the_spans_declare_are_the_available_tools_described_from_the_catalog_where_they_say_nothing():
    run = run_of({"gen_ai.agent.tools": json.dumps(["local_index", "web_search", "house_tool"])})
    request = request_of(run, CATALOG.task("faq"), CATALOG)
    assert names(request.available_tools) == ["house_tool", "local_index", "web_search"]
    tools = {t.name: t for t in request.available_tools}
    assert tools["local_index"].description == "Local FAQ / document index. (capabilities: faq_lookup, search)"
    assert tools["local_index"].input_parameters["required"] == ["query"]  # the catalog's schema
    assert tools["house_tool"].description is None and tools["house_tool"].input_parameters is None
    assert (request.task, request.agent, names(request.expected_tools)) == ("faq", "support", ["local_index"])
    assert request.input == "What if these shoes don't fit?" and request.span_id == run.root_span_id
    assert names(request.tools_called) == ["local_index"] and request.tools_called[0].input_parameters == {"query": "refund"}


def test_without_declared_tools_the_catalogs_tools_are_available_with_the_ones_called():
    run = run_of(tools=(("mystery_tool", {"x": 1}, None, {"gen_ai.tool.description": "Does mysteries"}),))
    request = request_of(run, None, CATALOG)
    available = names(request.available_tools)
    assert "mystery_tool" in available and set(CATALOG.tools) <= set(available)
    # a tool span describes its own tool (not what else the agent had)
    assert {t.name: t.description for t in request.available_tools}["mystery_tool"] == "Does mysteries"
    assert not set(CATALOG.ignore_tools) & set(available)
    assert names(request_of(run, None, CATALOG, max_available=3).available_tools)[:1] == ["basic_calculator"]
    assert "mystery_tool" in names(request_of(run, None, CATALOG, max_available=3).available_tools)  # called: kept


def test_content_is_redacted_before_it_is_sent_and_fails_closed():
    secret = "sk-live-0000"
    run = run_of({"gen_ai.input.messages": json.dumps([{"role": "user", "content": f"refund? api_key={secret}"}])},
                 tools=(("local_index", {"query": "refund", "api_key": secret}, json.dumps({"token": secret}), {}),))
    request = request_of(run, None, CATALOG, redactor=judge_redactor())
    text = repr(request)
    assert secret not in text and request.input == f"refund? api_key={MASK}"
    assert request.tools_called[0].input_parameters == {"query": "refund", "api_key": MASK}
    dropped = request_of(run, None, CATALOG, redactor=judge_redactor(drop_tool_io=True))
    assert dropped.tools_called[0].input_parameters is None and dropped.tools_called[0].output is None
    assert not dropped.arguments_recorded

    class Broken(Redactor):
        def text(self, value):
            return MASK  # what Redactor.text gives when masking fails

    broken = request_of(run, None, CATALOG, redactor=Broken("x"))
    assert broken.tools_called[0].input_parameters is None  # not a mapping any more: not sent at all
    assert secret not in repr(broken)
    assert judge_redactor("((").drop_io  # a pattern that cannot be used fails closed


def test_long_inputs_and_results_are_clipped():
    run = run_of({"gen_ai.input.messages": json.dumps([{"role": "user", "content": "x" * (MAX_TEXT_CHARS * 2)}])},
                 tools=(("local_index", {"query": "q"}, "y" * (MAX_TEXT_CHARS * 2), {}),))
    request = request_of(run, None, CATALOG)
    assert len(request.input) < MAX_TEXT_CHARS + 20 and request.input.endswith("[truncated]")
    assert len(request.tools_called[0].output) < MAX_TEXT_CHARS + 20


def test_test_cases_carry_available_tools_and_the_judged_metric_reads_them():
    run = run_of({"gen_ai.agent.tools": json.dumps(["local_index", "web_search"])})
    case = run_to_test_case(run, CATALOG)
    assert [t["name"] for t in case.metadata["available_tools"]] == ["local_index", "web_search"]
    assert names(available_tools_of_case(case)) == ["local_index", "web_search"]
    with JudgeServer(selection=(0.5, "web_search was not needed.")) as server:
        metric = JudgedToolCorrectnessMetric(judge_model("m", base_url=server.base_url))
        assert metric.measure(case, _show_indicator=False) == 0.5
        (prompt,) = server.prompts()
    assert "Paid web search API." in prompt and "Local FAQ / document index." in prompt
    assert metric.judge_result.part == "judge" and "web_search was not needed." in metric.reason


def test_deepeval_test_runs_the_judged_metric_on_a_recorded_run():
    from deepeval import assert_test

    run = run_of()
    with JudgeServer(selection=(0.2, "Wrong tool.")) as server:
        metric = JudgedToolCorrectnessMetric(judge_model("m", base_url=server.base_url))
        with pytest.raises(AssertionError, match="Tool Correctness"):
            assert_test(run_to_test_case(run, CATALOG), [metric], run_async=False)
        assert server.prompts()


def test_a_case_without_available_tools_in_its_metadata_is_judged_against_the_tools_it_called():
    from deepeval.test_case import LLMTestCase

    case = LLMTestCase(input="q", tools_called=[ToolCall(name="a"), ToolCall(name="b"), ToolCall(name="a")])
    assert names(available_tools_of_case(case)) == ["a", "b"]


def test_the_judge_modules_import_deepeval_only_when_a_judgement_is_made():
    import subprocess
    import sys

    code = ("import sys\n"
            "import otel_agent_eval.judge, otel_agent_eval.judge.deepeval_judge, otel_agent_eval.judge.models\n"
            "import otel_agent_eval.offline.judging, otel_agent_eval.offline.compare, otel_agent_eval.tools.score\n"
            "assert 'deepeval' not in sys.modules, sorted(m for m in sys.modules if m.startswith('deepeval'))[:3]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
