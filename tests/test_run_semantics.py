"""Run evaluation semantics on real SDK spans and the packaged catalog: aliases are their tool in every
comparison of a run (redundancy, recovery, spurious calls, loops, correctness); when spurious calls are
counted; and a run whose root span never ended is not completed."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import use_span
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.catalog import load_catalog, parse_catalog

PACKAGED = Path(__file__).parents[1] / "otel_agent_eval" / "config" / "default_catalog.yaml"

ONE_PLUS_ONE = {"expression": "1+1"}


class App:
    def __init__(self, catalog=None, **options):
        self.registry, self.runs = CollectorRegistry(), []
        self.processor = AgentEvalSpanProcessor(catalog, registry=self.registry, on_run=self.runs.append,
                                                background=False, **options)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("semantics")

    def tool(self, name, arguments=ONE_PLUS_ONE, *, error=None):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.tool.call.arguments": json.dumps(arguments)}
        if error:
            attrs["error.type"] = error
        with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs):
            pass

    def agent(self, name, *calls):
        """An agent run calling `calls`: tool names (arguments ONE_PLUS_ONE), or (name, arguments, error type)."""
        with self.tracer.start_as_current_span(f"invoke_agent {name}", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}):
            for call in calls:
                name, arguments, error = call if isinstance(call, tuple) else (call, ONE_PLUS_ONE, None)
                self.tool(name, arguments, error=error)
        (run,) = self.runs
        return run.evaluation

    def sample(self, name, **labels):
        return self.registry.get_sample_value(name, labels)


# -- 1. an alias is its tool in every comparison of a run -------------------------------------------

def test_an_alias_then_its_tool_with_the_same_arguments_is_a_redundant_call():
    e = App().agent("math_agent", "calculator", "basic_calculator")
    assert e.redundant_calls == ("basic_calculator",)  # the evaluation lists keep the name as called


def test_redundant_calls_and_loops_agree_across_an_alias():
    app = App()
    e = app.agent("math_agent", "calculator", "basic_calculator", "calculator")
    assert e.loops == ("calculator",) and e.redundant_calls == ("basic_calculator", "calculator")
    labels = {"gen_ai_agent_name": "math_agent", "task": "arithmetic", "gen_ai_tool_name": "basic_calculator"}
    assert app.sample("agent_eval_redundant_tool_calls_total", **labels) == 2
    assert app.sample("agent_eval_tool_call_loops_total", **labels) == 1


def test_an_error_on_an_alias_is_recovered_by_a_success_of_its_tool():
    e = App().agent("math_agent", ("calculator", ONE_PLUS_ONE, "timeout"), "basic_calculator")
    assert e.completed and e.completion_reason == "root span OK and every tool error recovered"
    assert e.redundant_calls == ()  # a retry after an error repeats nothing


def test_an_error_on_a_tool_is_not_recovered_by_a_success_of_another_tool():
    e = App().agent("math_agent", ("basic_calculator", ONE_PLUS_ONE, "timeout"), "code_interpreter")
    assert not e.completed and e.completion_reason.endswith(": basic_calculator")


def test_an_alias_is_neither_spurious_nor_wrong_for_tool_correctness():
    e = App().agent("math_agent", "calculator")
    assert e.spurious_calls == () and e.tool_correctness == 1.0 and e.order_accuracy == 1.0


# -- 2. spurious calls: counted when the route lists expected_tools or acceptable_tools -----------

def _arithmetic_route(lists: str):
    """The packaged catalog with the arithmetic route's expected/acceptable lists replaced by `lists`."""
    text = PACKAGED.read_text()
    old = "    acceptable_tools: [code_interpreter]\n    expected_tools: [basic_calculator]\n"
    assert old in text
    return parse_catalog(text.replace(old, lists))


def test_a_route_naming_only_its_optimal_tool_counts_no_spurious_calls():
    """optimal_tool alone picks what calls are scored against (as a derived optimal tool would): it
    declares no closed set of tools, so other calls cost efficiency, not call precision too."""
    e = App(_arithmetic_route("")).agent("math_agent", "basic_calculator", "code_interpreter", "local_index")
    assert e.spurious_calls == () and e.call_precision == 1.0


def test_a_route_listing_acceptable_tools_counts_calls_outside_them_and_its_optimal_tool():
    app = App(_arithmetic_route("    acceptable_tools: [code_interpreter]\n"))
    e = app.agent("math_agent", "basic_calculator", "calculator", ("code_interpreter", {"code": "1+1"}, None),
                  ("wolfram_alpha", {"query": "1+1"}, None), "local_index")
    assert e.spurious_calls == ("wolfram_alpha", "local_index")


def test_the_optimal_tool_the_scorer_works_out_for_a_route_is_never_spurious():
    """A route listing expected_tools but naming no optimal_tool: the catalog's best tool for it scores `optimal`
    and must not be a spurious call of the same run (was: spurious, since it is not in the list)."""
    text = PACKAGED.read_text()
    old = ("    optimal_tool: basic_calculator\n    acceptable_tools: [code_interpreter]\n"
           "    expected_tools: [basic_calculator]\n")
    assert old in text
    app = App(parse_catalog(text.replace(old, "    expected_tools: [code_interpreter]\n")))
    e = app.agent("math_agent", "basic_calculator", ("wolfram_alpha", {"query": "1+1"}, None))
    labels = {"gen_ai_agent_name": "math_agent", "gen_ai_tool_name": "basic_calculator", "task": "arithmetic"}
    assert app.sample("agent_eval_tool_calls_total", outcome="optimal", verdict="pass", optimal_tool="basic_calculator",
                      **labels) == 1
    assert e.spurious_calls == ("wolfram_alpha",)


# -- 3. a run whose root span never ended is not completed --------------------------------------

def _open_run(app):
    root = app.tracer.start_span("invoke_agent support_agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
    with use_span(root, end_on_exit=False):
        app.tool("local_index", {"query": "returns"})
    return root


def test_a_run_closed_at_shutdown_before_its_root_ended_is_not_completed():
    app = App()
    _open_run(app)
    app.provider.shutdown()
    (run,) = app.runs
    assert run.closed_by == "shutdown"
    e = run.evaluation
    assert not e.completed and e.outcome == "failed"
    assert e.completion_reason == "closed by shutdown before its root span ended"
    labels = {"gen_ai_agent_name": "support_agent", "task": "faq"}
    assert app.sample("agent_eval_runs_total", **labels, outcome="failed") == 1
    assert app.sample("agent_eval_runs_total", **labels, outcome="completed") is None


@pytest.mark.parametrize("reason, options", [("ttl", {"run_ttl_s": 60}), ("capacity", {"max_open_traces": 1})])
def test_a_run_closed_early_by_the_bounds_is_not_completed(reason, options):
    app = App(**options)
    now = [0.0]
    app.processor.runs._clock = lambda: now[0]
    _open_run(app)
    now[0] = 120.0
    with app.tracer.start_as_current_span("POST /next"):  # a new trace: expires or evicts the open one
        app.tool("local_index", {"query": "refunds"})
    stuck = next(r for r in app.runs if r.closed_by != "end")
    assert stuck.closed_by == reason
    assert not stuck.evaluation.completed
    assert stuck.evaluation.completion_reason == f"closed by {reason} before its root span ended"
    assert app.sample("agent_eval_processor_runs_closed_early_total", reason=reason) == 1


# -- 4. the scoring module's example ----------------------------------------------------------------

def test_the_scoring_docstring_example_holds():
    from otel_agent_eval.core import scoring

    shown = re.search(r">>> score.outcome.*\n\s*(\(.*\))", scoring.__doc__).group(1)
    scorer = scoring.Scorer(load_catalog(), environment="staging")
    score = scorer.static_score("web_search", scorer.route(agent="support_agent"))  # what score() gives for a web_search span
    assert repr((score.outcome, score.optimal_tool, round(score.efficiency, 2))) == shown
