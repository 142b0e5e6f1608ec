"""Agent runs in pytest: capture the runs your real agent code produces, and turn them into
deepeval test cases, so any deepeval metric (including LLM-judged ones, when you have a model)
can check them.

    >>> from deepeval import assert_test
    >>> from otel_agent_eval import DeterministicToolCorrectnessMetric, ToolEfficiencyMetric
    >>> from otel_agent_eval.testing import capture_runs, run_to_test_case
    >>> def test_support_agent_is_efficient():
    ...     with capture_runs() as runs:
    ...         support_agent.run_sync("What is your return policy?")
    ...     (run,) = runs
    ...     assert_test(run_to_test_case(run), [ToolEfficiencyMetric.from_catalog(task=run.task),
    ...                                         DeterministicToolCorrectnessMetric()])
"""
from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..config.catalog import Catalog
from ..config.settings import Settings
from ..core.run_text import run_input, run_output
from ..core.tool_definitions import ToolDefinition
from ..otel.install import global_sdk_provider
from ..otel.processor import AgentEvalSpanProcessor
from ..otel.wiring import resolve
from ..core.runs import AgentRun

if TYPE_CHECKING:
    from deepeval.test_case import LLMTestCase
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["capture_runs", "run_input", "run_output", "run_to_test_case"]


def run_to_test_case(run: AgentRun, catalog: Catalog | str | os.PathLike[str] | None = None, *,
                     declared: Mapping[str, ToolDefinition] | None = None) -> LLMTestCase:
    """A deepeval `LLMTestCase` for a run: input and output from its root (or first and last LLM call),
    `tools_called` from its tool calls, `expected_tools` from its task route.

    Its metadata carries `available_tools` (deepeval's name: what the agent could choose from, as
    `ToolCall` fields): the tools the run's spans declared (and `declared`, read from other spans), else
    `catalog`'s (None: the one `capture_runs` scores with by default, `OTEL_AGENT_EVAL_CATALOG` or the
    packaged one), with their descriptions, capabilities and argument schemas. deepeval's
    `ToolCorrectnessMetric(available_tools=...)` or `JudgedToolCorrectnessMetric` judge with them."""
    from deepeval.test_case import LLMTestCase, ToolCall

    from ..judge.request import available_tools_of
    from .deepeval_metrics import metadata_field
    from .judged_metric import AVAILABLE_TOOLS_KEY

    if not isinstance(catalog, Catalog):
        catalog = resolve(Settings.from_env(), catalog=catalog)["catalog"]
    available = available_tools_of(run, catalog, declared=declared)
    metadata = {"tools_used": [r.name for r in run.tool_calls], "agent": run.agent, "task": run.task,
                "trace_id": format(run.trace_id, "032x"), "outcome": run.evaluation.outcome if run.evaluation else None,
                AVAILABLE_TOOLS_KEY: [tool.model_dump(mode="json", exclude_none=True) for tool in available]}
    return LLMTestCase(
        input=run_input(run),
        actual_output=run_output(run),
        tools_called=[record.tool_call for record in run.tool_calls],
        expected_tools=[ToolCall(name=name) for name in run.expected_tools] or None,
        **{metadata_field(LLMTestCase): metadata},
    )


class _Captures:
    """One capturing processor per provider; runs go to every capture open at the time.

    `catalog` is the `capture_runs(catalog=...)` it scores with now (None: the configured or packaged one). A capture
    asking for another swaps that in when no other capture is open, so each test gets the catalog it names; while
    another is open the one processor cannot score with both, and that capture raises saying so."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: list[list[AgentRun]] = []
        self.processor: AgentEvalSpanProcessor | None = None
        self.catalog: Any = None

    def on_run(self, run: AgentRun) -> None:
        with self.lock:
            for runs in self.active:
                runs.append(run)


_by_provider: weakref.WeakKeyDictionary[Any, _Captures] = weakref.WeakKeyDictionary()
_by_provider_lock = threading.Lock()


@contextmanager
def capture_runs(processor: AgentEvalSpanProcessor | None = None, *, tracer_provider: TracerProvider | None = None,
                 catalog: Any = None) -> Iterator[list[AgentRun]]:
    """Collect the agent runs that finish inside the block.

    With `processor`, its runs are collected (its own `on_run` still runs). Otherwise a scoring
    processor (no metrics registry, no forwarding) is added once to `tracer_provider` or the
    global provider and shared by later captures; it scores with `catalog` (a path or a `Catalog`), else
    `OTEL_AGENT_EVAL_CATALOG`, else the packaged catalog. A later capture asking for another catalog gets
    that one (ValueError if a capture with another catalog is still open on the provider).
    """
    runs: list[AgentRun] = []
    if processor is not None:
        previous = processor.on_run

        def both(run: AgentRun) -> None:
            runs.append(run)
            if previous is not None:
                previous(run)

        processor.on_run = both
        try:
            yield runs
            processor.drain()  # runs still queued belong to the block
        finally:
            processor.on_run = previous
        return
    provider = tracer_provider or global_sdk_provider()
    wanted = _catalog_key(catalog)
    with _by_provider_lock:
        captures = _by_provider.get(provider)
        if captures is None:
            captures = _by_provider[provider] = _Captures()
            captures.processor = AgentEvalSpanProcessor(catalog, registry=None, on_run=captures.on_run)
            captures.catalog = wanted
            provider.add_span_processor(captures.processor)
        with captures.lock:
            if captures.catalog != wanted:
                if captures.active:
                    raise ValueError(f"capture_runs(catalog={catalog!r}): another capture_runs() on this TracerProvider "
                                     f"is open and scoring with catalog={captures.catalog!r}; one provider's captures "
                                     "score with one catalog at a time (close that one first, or pass processor=)")
                captures.processor.drain()  # runs of the last capture score with its catalog
                captures.processor.reload_catalog(resolve(Settings.from_env(), catalog=catalog)["catalog"])
                captures.catalog = wanted
            captures.active.append(runs)
    try:
        yield runs
        captures.processor.drain()
    finally:
        with captures.lock:
            captures.active = [r for r in captures.active if r is not runs]


def _catalog_key(catalog: Any) -> Any:
    """What makes two `capture_runs(catalog=...)` the same catalog: the path, the very `Catalog`, or None."""
    if catalog is None or isinstance(catalog, Catalog):
        return catalog
    try:
        return os.path.abspath(os.fspath(catalog))
    except TypeError:
        return catalog
