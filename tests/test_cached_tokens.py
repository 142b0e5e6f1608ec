"""Cached input tokens are priced apart from fresh ones, read from all three conventions, through real SDK spans."""
from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.catalog import CatalogError, load_catalog, parse_catalog
from otel_agent_eval.core.recognize import llm_call_of

TOOLS = {"local_index": {"cost_usd": 0.0, "latency_ms": 30, "capabilities": ["faq_lookup"], "complexity": "simple"}}


def _catalog(**price):
    return parse_catalog(json.dumps({"tools": TOOLS, "models": {"m": {"input_per_1k": 1.0, "output_per_1k": 2.0, **price}}}))


def _llm_cost(catalog, llm_attrs):
    runs = []
    processor = AgentEvalSpanProcessor(catalog, registry=CollectorRegistry(), background=False, on_run=runs.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("cached")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}):
        with tracer.start_as_current_span("chat m", attributes=llm_attrs):
            pass
    provider.shutdown()
    (run,) = runs
    return run.evaluation.llm_cost_usd, run.llm_calls[0]


GENAI = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 1000,
         "gen_ai.usage.output_tokens": 500, "gen_ai.usage.cache_read.input_tokens": 800}
OPENLLMETRY = {"traceloop.span.kind": "llm", "gen_ai.request.model": "m", "gen_ai.usage.prompt_tokens": 1000,
               "gen_ai.usage.completion_tokens": 500, "gen_ai.usage.cache_read_input_tokens": 800}
OPENINFERENCE = {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.token_count.prompt": 1000,
                 "llm.token_count.completion": 500, "llm.token_count.prompt_details.cache_read": 800}


@pytest.mark.parametrize("attrs", [GENAI, OPENLLMETRY, OPENINFERENCE], ids=["genai", "openllmetry", "openinference"])
def test_cached_input_tokens_are_priced_at_the_cached_price(attrs):
    cost, call = _llm_cost(_catalog(cached_input_per_1k=0.25), attrs)
    assert (call.input_tokens, call.cached_input_tokens, call.output_tokens) == (1000, 800, 500)
    assert cost == pytest.approx(0.2 * 1.0 + 0.8 * 0.25 + 0.5 * 2.0)  # fresh 200, cached 800, output 500


def test_without_a_cached_price_cached_tokens_cost_the_input_price():
    cost, _ = _llm_cost(_catalog(), GENAI)
    assert cost == pytest.approx(1.0 * 1.0 + 0.5 * 2.0)


def test_odd_cache_figures_never_price_negative_or_guess():
    assert llm_call_of({**GENAI, "gen_ai.usage.cache_read.input_tokens": "many"}).cached_input_tokens == 0
    # more cached than input: an input count without its cached part (Anthropic's), so the prompt is their sum
    more = llm_call_of({**GENAI, "gen_ai.usage.cache_read.input_tokens": 5000})
    assert (more.input_tokens, more.cached_input_tokens) == (6000, 5000)
    assert llm_call_of({k: v for k, v in GENAI.items() if "cache" not in k}).cached_input_tokens == 0
    cost, _ = _llm_cost(_catalog(cached_input_per_1k=0.25), {**GENAI, "gen_ai.usage.cache_read.input_tokens": 5000})
    assert cost == pytest.approx(1.0 * 1.0 + 5.0 * 0.25 + 0.5 * 2.0)


def test_the_catalog_checks_the_cached_price():
    assert load_catalog().models  # the packaged catalog still loads
    with pytest.raises(CatalogError):
        _catalog(cached_input_per_1k=-1)
