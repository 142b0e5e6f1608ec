"""Tool-correctness scoring: worked examples, and parity with deepeval's own metric."""
from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import deepeval
import pytest
from deepeval.errors import MissingTestCaseParamsError
from deepeval.evaluate.configs import DisplayConfig
from deepeval.metrics import ToolCorrectnessMetric
from deepeval.models import DeepEvalBaseLLM
from deepeval.test_case import LLMTestCase, ToolCall, ToolCallParams, ToolCallType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agent_eval.offline import correctness_metric
from otel_agent_eval.core.correctness import partial_dict_match, tool_correctness, tool_correctness_score
from otel_agent_eval.offline.correctness_metric import DeterministicToolCorrectnessMetric

INPUTS = [ToolCallParams.INPUT_PARAMETERS]
OUTPUTS = [ToolCallParams.OUTPUT]


def call(name: str, params: dict[str, Any] | None = None, output: Any = None, **kw: Any) -> ToolCall:
    return ToolCall(name=name, input_parameters=params, output=output, **kw)


def calls(*names: str) -> list[ToolCall]:
    return [call(n) for n in names]


def case(called: list[ToolCall] | None, expected: list[ToolCall] | None) -> LLMTestCase:
    return LLMTestCase(input="question", actual_output="answer", tools_called=called, expected_tools=expected)


def measure(called: list[ToolCall], expected: list[ToolCall], **options: Any) -> DeterministicToolCorrectnessMetric:
    metric = DeterministicToolCorrectnessMetric(**options)
    metric.measure(case(called, expected), _show_indicator=False)
    return metric


class _StubModel(DeepEvalBaseLLM):
    """Lets deepeval's metric be built without a key; it must never be asked anything."""

    def __init__(self) -> None:
        super().__init__("stub")

    def load_model(self) -> _StubModel:
        return self

    def generate(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("deepeval called the LLM")

    async def a_generate(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("deepeval called the LLM")

    def get_model_name(self) -> str:
        return "stub"


def deepeval_metric(**options: Any) -> ToolCorrectnessMetric:
    return ToolCorrectnessMetric(model=_StubModel(), async_mode=False, eval_mode="llm", **options)


# --- default mode: every expected tool called, order ignored -------------------------


@pytest.mark.parametrize(
    ("called", "expected", "score"),
    [
        (("A", "B"), ("B", "A"), 1.0),
        (("A", "B", "C"), ("A", "B"), 1.0),  # extra calls are free
        (("A",), ("A", "B"), 0.5),
        ((), (), 1.0),
        (("A",), (), 0.0),
        ((), ("A",), 0.0),
    ],
)
def test_default_mode(called: tuple[str, ...], expected: tuple[str, ...], score: float) -> None:
    assert tool_correctness_score(calls(*called), calls(*expected)) == score


def test_identical_calls_count_once_like_deepeval() -> None:
    # deepeval's matched set uses ToolCall.__eq__/__hash__, so equal calls are one element.
    assert tool_correctness_score(calls("A", "A"), calls("A", "A")) == 0.5
    assert tool_correctness_score([call("A", {"q": 1}), call("A", {"q": 2})], calls("A", "A")) == 1.0
    # __eq__ ignores type: an MCP call "uses up" an equal FUNCTION call.
    mixed = [call("A", type=ToolCallType.MCP), call("A")]
    assert tool_correctness_score(mixed, calls("A", "A")) == 0.5
    assert deepeval_metric().measure(case(mixed, calls("A", "A")), _show_indicator=False) == 0.5


def test_type_is_compared_and_defaults_to_function() -> None:
    assert tool_correctness_score([call("A", type=ToolCallType.MCP)], calls("A")) == 0.0
    plain = SimpleNamespace(name="A", input_parameters=None, output=None)  # no .type at all
    assert tool_correctness_score([plain], calls("A")) == 1.0
    otel = SimpleNamespace(name="A", input_parameters=None, output=None, type="function")
    assert tool_correctness_score([otel], calls("A"), exact_match=True) == 1.0
    result = tool_correctness([call("A", type=ToolCallType.MCP)], calls("A"))
    assert result.type_mismatches == ("A (expected FUNCTION, called MCP)",)


# --- ordering: weighted longest common subsequence ------------------------------------


def test_ordering_docs_example() -> None:
    called, expected = calls("WebSearch", "WebSearch", "ToolQuery"), calls("WebSearch", "ToolQuery", "WebSearch")
    result = tool_correctness(called, expected, consider_ordering=True)
    assert result.score == 2 / 3
    assert result.out_of_order == ("WebSearch",) and result.missing == ()
    assert "out-of-order tools ['WebSearch']" in result.reason
    # Order ignored, still 2/3: the two equal WebSearch calls are one element to deepeval.
    assert tool_correctness_score(called, expected) == 2 / 3
    assert deepeval_metric().measure(case(called, expected), _show_indicator=False) == 2 / 3


@pytest.mark.parametrize(
    ("called", "expected", "score"),
    [(("A", "B", "C"), ("A", "B", "C"), 1.0), (("C", "B", "A"), ("A", "B", "C"), 1 / 3), ((), (), 1.0)],
)
def test_ordering(called: tuple[str, ...], expected: tuple[str, ...], score: float) -> None:
    assert tool_correctness_score(calls(*called), calls(*expected), consider_ordering=True) == score


def test_ordering_weights_partial_arguments() -> None:
    expected = [call("A", {"x": 1, "y": 2}), call("B")]
    called = [call("A", {"x": 1, "y": 0}), call("B")]
    assert tool_correctness_score(called, expected, consider_ordering=True, input_parameters=True) == 0.75


# --- exact match -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("called", "expected", "score"),
    [(("A", "B"), ("A", "B"), 1.0), (("B", "A"), ("A", "B"), 0.0), (("A", "B", "B"), ("A", "B"), 0.0), ((), (), 1.0)],
)
def test_exact_match(called: tuple[str, ...], expected: tuple[str, ...], score: float) -> None:
    assert tool_correctness_score(calls(*called), calls(*expected), exact_match=True) == score
    # exact_match wins over consider_ordering, as in deepeval
    assert tool_correctness_score(calls(*called), calls(*expected), exact_match=True, consider_ordering=True) == score


def test_exact_match_needs_identical_arguments() -> None:
    expected = [call("A", {"x": 1, "y": 2})]
    assert tool_correctness_score([call("A", {"x": 1, "y": 2})], expected, exact_match=True, input_parameters=True) == 1
    assert tool_correctness_score([call("A", {"x": 1})], expected, exact_match=True, input_parameters=True) == 0
    assert tool_correctness_score([call("A", {"x": 1})], expected, exact_match=True) == 1  # not evaluated


# --- input parameters and output --------------------------------------------------------


def test_nested_partial_dict_match() -> None:
    expected = {"q": "otel", "opts": {"lang": "en", "limit": 5}}
    called = {"q": "otel", "opts": {"lang": "en", "limit": 9}, "extra": True}
    # keys {q, opts, extra}: q equal (1/3) + opts half equal (1/2 * 1/3); extra only counts against
    assert partial_dict_match(expected, called) == pytest.approx(0.5)
    assert partial_dict_match(expected, expected) == 1.0
    assert partial_dict_match({"a": {"b": 1}}, {"a": 1}) == 0  # dict vs scalar: no credit
    assert tool_correctness_score([call("S", called)], [call("S", expected)], input_parameters=True) == pytest.approx(0.5)


def test_none_arguments_count_as_empty() -> None:
    # deepeval raises AttributeError here; we score None as {} instead.
    assert partial_dict_match(None, {}) == 1.0
    assert partial_dict_match(None, {"a": 1}) == 0
    with pytest.raises(AttributeError):
        deepeval_metric(evaluation_params=INPUTS).measure(case([call("A")], [call("A", {})]), _show_indicator=False)


def test_output_must_be_equal() -> None:
    expected = [call("A", output="42"), call("B", output=1)]
    assert tool_correctness_score([call("A", output="42"), call("B", output=2)], expected, output=True) == 0.5
    assert tool_correctness_score([call("A", output="42"), call("B", output=2)], expected) == 1.0


# --- the deepeval metric -------------------------------------------------------------------


def test_metric_strict_mode_and_threshold() -> None:
    half = (calls("A"), calls("A", "B"))
    assert measure(*half).score == 0.5 and measure(*half).is_successful()
    assert not measure(*half, threshold=0.6).is_successful()
    strict = measure(*half, strict_mode=True, threshold=0.1)
    assert (strict.threshold, strict.score, strict.success) == (1, 0, False)
    assert measure(calls("A", "B"), calls("A", "B"), strict_mode=True).success


def test_metric_reason_and_name() -> None:
    metric = measure(calls("A"), calls("A", "B"), evaluation_params=INPUTS + OUTPUTS)
    assert metric.__name__ == "Tool Correctness (deterministic)"
    assert "missing tools ['B']" in metric.reason
    assert measure(calls("A"), calls("A"), include_reason=False).reason is None


def test_metric_rejects_missing_tools() -> None:
    with pytest.raises(MissingTestCaseParamsError):
        DeterministicToolCorrectnessMetric().measure(case(None, calls("A")), _show_indicator=False)


def test_metric_async_measure() -> None:
    import asyncio

    metric = DeterministicToolCorrectnessMetric()
    assert asyncio.run(metric.a_measure(case(calls("A"), calls("A", "B")), _show_indicator=False)) == 0.5


def test_docstring_example() -> None:
    assert doctest.testmod(correctness_metric, raise_on_error=True).failed == 0


def test_scoring_module_does_not_import_deepeval() -> None:
    code = "import sys, otel_agent_eval.core.correctness; assert 'deepeval' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- parity with deepeval's ToolCorrectnessMetric -------------------------------------------

_KEYS = st.sampled_from(["k", "m", "n"])
_LEAVES = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["", "x"]))
_VALUES = st.recursive(_LEAVES, lambda inner: st.dictionaries(_KEYS, inner, max_size=3), max_leaves=6)
_PARAMS = st.dictionaries(_KEYS, _VALUES, max_size=3)
_SIZES = st.integers(0, 6)  # uniform: st.lists alone draws mostly empty or tiny lists
_TOOL_CALLS = st.builds(
    ToolCall,
    name=st.sampled_from(["A", "B", "C"]),
    type=st.sampled_from([ToolCallType.FUNCTION] * 3 + [ToolCallType.MCP]),
    input_parameters=st.one_of(st.none(), _PARAMS, _PARAMS),  # None: 1 in 3
    output=st.one_of(st.none(), st.sampled_from(["", "ok"]), st.integers(0, 2)),
)


def _copy(tool: ToolCall) -> ToolCall:
    return tool.model_copy(deep=True)


def _retyped(tool: ToolCall) -> ToolCall:
    other = ToolCallType.MCP if tool.type is ToolCallType.FUNCTION else ToolCallType.FUNCTION
    return tool.model_copy(update={"type": other}, deep=True)


@st.composite
def _tool_lists(draw: st.DrawFn) -> tuple[list[ToolCall], list[ToolCall]]:
    """Called and expected lists drawn from one small pool, so equal and shared calls are common."""
    pool = draw(st.lists(_TOOL_CALLS, min_size=1, max_size=4))
    # the same object, an equal copy, an equal copy of the other type (ToolCall.__eq__ ignores
    # type), or a fresh call
    shared = st.sampled_from(pool)
    item = st.one_of(shared, shared.map(_copy), shared.map(_retyped), _TOOL_CALLS)

    def sized(n: int) -> st.SearchStrategy[list[ToolCall]]:
        return st.lists(item, min_size=n, max_size=n)

    return draw(_SIZES.flatmap(sized)), draw(_SIZES.flatmap(sized))


_OPTIONS = st.fixed_dictionaries(
    {
        "threshold": st.one_of(st.sampled_from([0.0, 0.5, 2 / 3, 1.0]), st.floats(0, 1)),
        "strict_mode": st.sampled_from([False, False, True]),
        "should_exact_match": st.sampled_from([False, False, False, True]),
        "should_consider_ordering": st.booleans(),
        "evaluation_params": st.lists(st.sampled_from(ToolCallParams), unique=True),
    }
)


def _none_meets_dict(test_case: LLMTestCase, options: dict[str, Any]) -> bool:
    """Where deepeval's _compare_dicts can crash: partial argument match of None vs a dict."""
    if options["should_exact_match"] or ToolCallParams.INPUT_PARAMETERS not in options["evaluation_params"]:
        return False
    return any(
        e.name == c.name and e.type == c.type and (e.input_parameters is None) != (c.input_parameters is None)
        for e in test_case.expected_tools
        for c in test_case.tools_called
    )


@settings(max_examples=750, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tools=_tool_lists(), options=_OPTIONS)
def test_parity_with_deepeval(tools: tuple[list[ToolCall], list[ToolCall]], options: dict[str, Any]) -> None:
    test_case = case(*tools)
    ours, theirs = DeterministicToolCorrectnessMetric(**options), deepeval_metric(**options)
    score = ours.measure(test_case, _show_indicator=False)
    try:
        expected = theirs.measure(test_case, _show_indicator=False)
    except AttributeError:
        assert _none_meets_dict(test_case, options)  # the one documented divergence
        assert 0 <= score <= 1
        return
    # Exact equality on purpose: the same float operations run in the same order (set
    # iteration order included), so any difference at all means the logic has drifted.
    assert score == expected
    assert ours.is_successful() == theirs.is_successful()


# --- inside deepeval's runners --------------------------------------------------------------


def test_evaluate_and_assert_test_run_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    docs_case = case(calls("WebSearch", "WebSearch", "ToolQuery"), calls("WebSearch", "ToolQuery", "WebSearch"))
    result = deepeval.evaluate(
        test_cases=[docs_case],
        metrics=[DeterministicToolCorrectnessMetric(should_consider_ordering=True)],
        display_config=DisplayConfig(show_indicator=False, print_results=False, inspect_after_run=False),
    )
    (data,) = result.test_results[0].metrics_data
    assert (data.name, data.score, data.success, data.error) == ("Tool Correctness (deterministic)", 2 / 3, True, None)
    deepeval.assert_test(docs_case, [DeterministicToolCorrectnessMetric(threshold=0.6)])
    with pytest.raises(AssertionError):
        deepeval.assert_test(docs_case, [DeterministicToolCorrectnessMetric(threshold=0.7, should_consider_ordering=True)])
    assert not (tmp_path / ".deepeval").exists()
