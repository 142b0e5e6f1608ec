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

import json
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..config.catalog import Catalog
from ..config.settings import Settings
from ..core import conventions as c
from ..otel.install import global_sdk_provider
from ..otel.processor import AgentEvalSpanProcessor
from ..otel.wiring import resolve
from ..core.runs import AgentRun

if TYPE_CHECKING:
    from deepeval.test_case import LLMTestCase
    from opentelemetry.sdk.trace import TracerProvider

_INPUT_KEYS = (c.OI_INPUT_VALUE, c.TRACELOOP_ENTITY_INPUT, c.GEN_AI_INPUT_MESSAGES, "pydantic_ai.all_messages")
_OUTPUT_KEYS = (c.OI_OUTPUT_VALUE, c.TRACELOOP_ENTITY_OUTPUT, c.GEN_AI_OUTPUT_MESSAGES, "final_result", "pydantic_ai.all_messages")


def run_to_test_case(run: AgentRun) -> LLMTestCase:
    """A deepeval `LLMTestCase` for a run: input and output from its root (or first and last LLM call),
    `tools_called` from its tool calls, `expected_tools` from its task route."""
    from deepeval.test_case import LLMTestCase, ToolCall

    from .deepeval_metrics import metadata_field

    metadata = {"tools_used": [r.name for r in run.tool_calls], "agent": run.agent, "task": run.task,
                "trace_id": format(run.trace_id, "032x"), "outcome": run.evaluation.outcome if run.evaluation else None}
    return LLMTestCase(
        input=run_input(run),
        actual_output=run_output(run),
        tools_called=[record.tool_call for record in run.tool_calls],
        expected_tools=[ToolCall(name=name) for name in run.expected_tools] or None,
        **{metadata_field(LLMTestCase): metadata},
    )


def run_input(run: AgentRun) -> str:
    """The user's input to the run, as text."""
    for key in _INPUT_KEYS:
        text = _message_text(run.root_attributes.get(key), role="user", first=True)
        if text:
            return text
    first = run.llm_calls[0].input_messages if run.llm_calls else None
    return _message_text(first, role="user", first=True) or ""


def run_output(run: AgentRun) -> str:
    """The run's final answer, as text."""
    for key in _OUTPUT_KEYS:
        text = _message_text(run.root_attributes.get(key), role="assistant", first=False)
        if text:
            return text
    last = run.llm_calls[-1].output_messages if run.llm_calls else None
    return _message_text(last, role="assistant", first=False) or ""


def _message_text(value: Any, *, role: str, first: bool) -> str | None:
    """Plain text from an attribute that is text, or JSON messages in the GenAI or chat shapes."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, str):
            return parsed
        value = parsed
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        return str(value)
    texts = [t for t in (_text_of(m) for m in value if isinstance(m, Mapping) and m.get("role", role) == role) if t]
    if not texts:
        return None
    return texts[0] if first else texts[-1]


def _text_of(message: Mapping[str, Any]) -> str | None:
    """A message's text; its images (GenAI `uri`/`blob` parts, OpenAI `image_url`, Anthropic `image`) as deepeval
    `MLLMImage` placeholders in it, so the test case is multimodal as the run was."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts") or (content if isinstance(content, list) else [])
    text = ""
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") in ("text", None):
            piece = part.get("content") or part.get("text")
            if isinstance(piece, str):
                text += piece
            continue
        image = _image_of(part)
        if image is not None:
            text += (" " if text and not text.endswith((" ", "\n")) else "") + image
    return text or None


def _image_of(part: Mapping[str, Any]) -> str | None:
    """The `MLLMImage` placeholder for an image part, or None (not an image, or not one deepeval can hold).

    Only remote (http/https) URLs, data URIs and inline base64 become images: a span is data from
    elsewhere, and deepeval's `MLLMImage` would read a local path it names into the test case.
    """
    kind, modality = part.get("type"), part.get("modality")
    mime = part.get("mime_type") or part.get("mimeType")
    url: Any = None
    data: Any = None
    if kind == "image_url":  # OpenAI chat content: {"type": "image_url", "image_url": {"url": ...}}
        inner = part.get("image_url")
        url = inner.get("url") if isinstance(inner, Mapping) else inner
    elif kind == "image" and isinstance(part.get("source"), Mapping):  # Anthropic: base64 or url source
        source = part["source"]
        url, data, mime = source.get("url"), source.get("data"), source.get("media_type") or mime
    elif modality == "image" or (isinstance(mime, str) and mime.startswith("image/")):
        if kind == "uri":  # GenAI semantic conventions' UriPart / BlobPart
            url = part.get("uri")
        elif kind == "blob":
            data = part.get("content")
    if isinstance(url, str) and url.startswith("data:"):
        header, _, payload = url.partition(",")
        if not header.endswith(";base64"):
            return None
        mime, data, url = header[5:-7] or None, payload, None
    try:
        from deepeval.test_case import MLLMImage

        if isinstance(data, str) and data and isinstance(mime, str) and mime:
            return str(MLLMImage(dataBase64=data, mimeType=mime))
        if isinstance(url, str) and url.startswith(("http://", "https://")) and not MLLMImage.is_local_path(url):
            return str(MLLMImage(url=url, local=False))
    except (ImportError, ValueError, TypeError, OSError, AssertionError):
        return None
    return None


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
