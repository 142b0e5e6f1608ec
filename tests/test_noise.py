"""Spans that cannot matter take a fast path (core/noise.py); its outputs equal the full path's on the same input.

The full path is the same code with the rule answering "matters" for every span: every span of a trace with
something to score goes through the evaluation core, as before the fast path existed. Both are fed the very same
generated traces (`noise_traces.py`: agents, chats, tools with HTTP/DB leaves, an ERROR child under an UNSET tool,
noise between nested model-call spans, noise roots, remote parents, late children, runs named only by their span
name), and everything they put out is compared: scored calls, evaluated runs, the Prometheus exposition, the
forwarded spans with every enrichment; for `score`, the report too.
"""
from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from prometheus_client import CollectorRegistry, generate_latest

from noise_traces import traces
from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.core import noise as noise_rule
from otel_agent_eval.core.noise import Noise, json_noise, may_matter, typed_keys
from otel_agent_eval.core.recognize import span_facts
from otel_agent_eval.offline import score as score_module
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.otel import processor as processor_module
from otel_agent_eval.otlp.json_spans import SpanProblem, otlp_span
from otel_agent_eval.tools.bench.score import collector_json

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Forwarded(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _span_view(span: ReadableSpan) -> tuple[Any, ...]:
    """Everything a forwarded span carries that the evaluation may have added or changed."""
    return (span.context.trace_id, span.context.span_id, span.name, tuple(sorted((span.attributes or {}).items())),
            tuple((e.name, tuple(sorted((e.attributes or {}).items()))) for e in span.events), span.status.status_code,
            span.status.description)


def _outputs(calls: list[tuple[bool, Any, Any]], **options: Any) -> dict[str, Any]:
    """What one processor puts out for the replayed calls: calls, runs, metrics, forwarded spans (and which spans the
    core saw)."""
    registry, forwarded, scored, runs, seen = CollectorRegistry(), Forwarded(), [], [], []
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=forwarded, background=False, **options)
    ended = processor.pipeline.ended

    def counting(span: ReadableSpan, attrs: Any = None, facts: Any = None) -> list[ReadableSpan]:
        seen.append(span.context.span_id)
        return ended(span, attrs, facts)

    processor.pipeline.ended = counting
    processor.on_call = lambda record, score: scored.append((record.span_id, record.name, record.agent, record.error,
                                                             repr(score)))
    processor.on_run = lambda run: runs.append(_run_view(run))
    for is_start, span, context in calls:
        if is_start:
            processor.on_start(span, context)
        else:
            processor.on_end(span)
    processor.force_flush()
    processor.shutdown()
    spans = [_span_view(s) for s in forwarded.spans]
    enriched_order = [view[:2] for view in spans if any(k.startswith("agent_eval.") for k, _ in view[3])]
    return {"calls": scored, "runs": runs, "metrics": generate_latest(registry).decode(), "forwarded": sorted(spans),
            "enriched_order": enriched_order, "seen": seen}


def _run_view(run: Any) -> tuple[Any, ...]:
    return (run.trace_id, run.root_span_id, run.root_name, run.agent, run.kind, run.status, run.error, run.task,
            run.closed_by, [c.span_id for c in run.tool_calls], [(c.span_id, c.error) for c in run.tool_calls],
            [(c.span_id, c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls], repr(run.evaluation))


def _full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule answering "matters" for every span: every span takes the full path."""
    monkeypatch.setattr(processor_module, "sdk_span_may_matter", lambda span, held: True)


def _ended_spans(calls: list[tuple[bool, Any, Any]]) -> list[ReadableSpan]:
    return [span for is_start, span, _ in calls if not is_start]


# -- the processor --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, {"redact_keys": "url|query"}], ids=["plain", "redacted"])
@EXAMPLES
@given(seed=st.integers(0, 2**32 - 1))
def test_processor_fast_path_equals_full_path(monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], seed: int) -> None:
    calls = traces(seed)
    fast = _outputs(calls, **options)
    with monkeypatch.context() as patched:
        _full_path(patched)
        full = _outputs(calls, **options)
    for key in ("calls", "runs", "metrics", "forwarded", "enriched_order"):
        assert fast[key] == full[key], key
    leaves = {s.context.span_id for s in _ended_spans(calls) if s.name in ("GET", "SELECT orders")
              and s.status.is_ok and s.parent is not None}
    assert leaves and not leaves & set(fast["seen"])  # the noise leaves never reached the core
    assert leaves & set(full["seen"])  # which the full path ran it on


def test_processor_keeps_the_spans_between_nested_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model call on nested spans through noise spans is counted once: the noise spans between take the full path."""
    for seed in range(200):
        calls = traces(seed)
        if any(s.name == "client.request" for s in _ended_spans(calls)):
            break
    fast = _outputs(calls)
    between = {s.context.span_id for s in _ended_spans(calls) if s.name in ("generate_content", "client.request")}
    assert between and between <= set(fast["seen"])
    with monkeypatch.context() as patched:
        patched.setattr(noise_rule, "sdk_span_may_matter", noise_rule.sdk_span_may_matter)
        patched.setattr(processor_module, "sdk_span_may_matter",
                        lambda span, held: span.name not in ("generate_content", "client.request")
                        and noise_rule.sdk_span_may_matter(span, held))
        wrong = _outputs(calls)  # rule 5 left out: the outer call_llm's tokens count again
    assert wrong["runs"] != fast["runs"]


# -- score ----------------------------------------------------------------------------------------------------------

def _recorded(tmp_path: Any, calls: list[tuple[bool, Any, Any]], seed: int) -> str:
    """The ended spans as the Collector's file exporter writes them, in requests of random sizes, some reversed
    (a Collector batch may hold a root before its children)."""
    rng, spans, lines = random.Random(seed), _ended_spans(calls), []
    while spans:
        size = rng.randint(1, 40)
        batch, spans = spans[:size], spans[size:]
        if rng.random() < 0.3:
            batch.reverse()
        lines.append(json.dumps(collector_json(batch), separators=(",", ":")))
    path = tmp_path / f"traces-{seed}.json"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _scored(path: str) -> dict[str, Any]:
    registry, scored, runs = CollectorRegistry(), [], []
    report = score_traces(path, registry=registry, on_call=lambda record, score: scored.append(
        (record.span_id, record.name, record.agent, record.error, repr(score))), on_run=lambda run: runs.append(_run_view(run)))
    return {"report": report.to_dict(), "calls": scored, "runs": runs, "metrics": generate_latest(registry).decode()}


@EXAMPLES
@given(seed=st.integers(0, 2**32 - 1))
def test_score_fast_path_equals_full_path(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: Any, seed: int) -> None:
    path = _recorded(tmp_path_factory.mktemp("noise"), traces(seed, count=6), seed)
    read = []
    real = score_module.json_noise

    def counting(keys: Any) -> Any:
        rule = real(keys)

        def noise(item: Any) -> Any:
            found = rule(item)
            read.append(found is not None)
            return found
        return noise

    with monkeypatch.context() as patched:
        patched.setattr(score_module, "json_noise", counting)
        fast = _scored(path)
    assert any(read)  # some spans took the fast path
    with monkeypatch.context() as patched:
        patched.setattr(score_module, "json_noise", lambda keys: (lambda item: None))
        full = _scored(path)
    for key in ("report", "calls", "runs", "metrics"):
        assert fast[key] == full[key], key


# -- the rule itself --------------------------------------------------------------------------------------------------

HEX = st.text("0123456789abcdef", min_size=1, max_size=34)
VALUES = st.one_of(
    st.fixed_dictionaries({"stringValue": st.text(max_size=5)}), st.fixed_dictionaries({"intValue": st.text("0123456789-x", max_size=20)}),
    st.fixed_dictionaries({"boolValue": st.booleans()}), st.fixed_dictionaries({"doubleValue": st.floats()}),
    st.just({}), st.just({"stringValue": 3}), st.just({"bogus": 1}), st.just(None), st.just("plain"))
KEYS = st.sampled_from(["http.request.method", "url.full", "gen_ai.operation.name", "openinference.span.kind",
                        "traceloop.span.kind", "ai.operationId", "tool_name", "db.system"]) | st.text(max_size=6) | st.just(3)


@st.composite
def json_spans(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"traceId": draw(st.sampled_from(["5b8efff798038103d269b633813fc60c", "0" * 32]) | HEX),
                            "spanId": draw(st.sampled_from(["eee19b7ec3c1b174", "0" * 16]) | HEX),
                            "name": draw(st.sampled_from(["GET", "invoke_agent x", "invoke_workflow y", "chat"]) | st.just(7)),
                            "startTimeUnixNano": draw(st.sampled_from(["1700000000000000000", "0", "", "12x", "99999999999999999999"])),
                            "endTimeUnixNano": draw(st.sampled_from(["1700000000100000000", "1", "-5"]))}
    if draw(st.booleans()):
        item["parentSpanId"] = draw(st.sampled_from(["eee19b7ec3c1b175", "", "0" * 16, "ZZZ19b7ec3c1b175"]) | HEX)
    for key, values in (("flags", st.sampled_from([0, 1, 0x100, 0x300, "3", True])),
                        ("kind", st.sampled_from([1, 3, "SPAN_KIND_CLIENT", [1]])),
                        ("status", st.sampled_from([{}, {"code": 1}, {"code": 2}, {"code": "STATUS_CODE_ERROR"}, {"code": 7},
                                                    {"code": [2]}, "bad", {"code": True}])),
                        ("events", st.sampled_from([[], [{"name": "exception"}]])),
                        ("traceState", st.sampled_from(["", "a=b"])),
                        ("attributes", st.lists(st.fixed_dictionaries({"key": KEYS, "value": VALUES}), max_size=4)
                         | st.just("not a list"))):
        if draw(st.booleans()):
            item[key] = draw(values)
    return item


@given(item=json_spans(), custom=st.sampled_from([None, "tool_name"]))
def test_json_noise_only_where_the_full_reader_finds_noise(item: dict[str, Any], custom: str | None) -> None:
    """What the JSON fast path takes for noise, the full reader reads without a problem into the same ids and times,
    and the rule (typed, root, ERROR, run name) calls noise too."""
    found = json_noise(typed_keys(custom))(item)
    if found is None:
        return
    assert type(found) is Noise
    try:
        span = otlp_span(item, None, None)  # type: ignore[arg-type]
    except (SpanProblem, TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        pytest.fail(f"the fast path took a span the full reader skips ({exc})")
    facts = span_facts(span)
    assert tuple(found[:6]) == tuple(facts) and found[6:] == (None, None)
    typed = any(key in span.attributes for key in typed_keys(custom))
    assert not may_matter(typed, span.name, span.status.status_code.name == "ERROR", facts.is_root)


def test_json_noise_on_a_plain_http_span() -> None:
    item = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "parentSpanId": "eee19b7ec3c1b173",
            "name": "GET", "kind": 3, "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000100000000",
            "attributes": [{"key": "http.request.method", "value": {"stringValue": "GET"}},
                           {"key": "http.response.status_code", "value": {"intValue": "200"}}], "status": {}}
    rule = json_noise(typed_keys(None))
    assert rule(item) is not None
    assert rule({**item, "status": {"code": 2}}) is None  # ERROR (rule 3)
    assert rule({k: v for k, v in item.items() if k != "parentSpanId"}) is None  # a local root (rule 2)
    assert rule({**item, "flags": 0x300}) is None  # a remote parent: a local root too
    assert rule({**item, "name": "invoke_agent helper"}) is None  # a run named (rule 4)
    typed = {**item, "attributes": item["attributes"] + [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}
    assert rule(typed) is None  # typed (rule 1)
    assert json_noise(typed_keys("tool_name"))({**item, "attributes": [{"key": "tool_name", "value": {"stringValue": "x"}}]}) is None


def test_the_switch_sends_every_span_by_the_full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """`OTEL_AGENT_EVAL_NOISE_FAST_PATH=0` (`FAST_PATH`): the processor runs the core on every span of a trace with
    something to score, serve's reader gets no keys, score reads every span whole."""
    calls = traces(3)
    leaves = {s.context.span_id for s in _ended_spans(calls) if s.name in ("GET", "SELECT orders") and s.status.is_ok}
    assert not leaves & set(_outputs(calls)["seen"])
    monkeypatch.setattr(noise_rule, "FAST_PATH", False)
    assert leaves & set(_outputs(calls)["seen"])
    processor = AgentEvalSpanProcessor(registry=None)
    assert noise_rule.pipeline_keys(processor.pipeline) is None
    monkeypatch.setattr(noise_rule, "FAST_PATH", True)
    assert noise_rule.pipeline_keys(processor.pipeline) == sorted(typed_keys(None))
