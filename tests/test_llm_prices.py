"""LLM prices: the catalog's `models`, then a cost the span reports, then genai-prices' table, then unpriced.

Spans are real OpenTelemetry SDK spans through `AgentEvalSpanProcessor`, and the same spans exported by the
real OTLP/HTTP exporter to a receiver on 127.0.0.1, written as the Collector's file exporter writes them
(OTLP/JSON lines) and read by `otel-agent-eval score`. genai-prices' figures are its own `calc_price` for the
same model, usage and time: the run's cost must be exactly that.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from genai_prices import Usage, calc_price
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.catalog import parse_catalog
from otel_agent_eval.core.prices import MAX_MODELS, PriceTable, reported_cost
from otel_agent_eval.tools.cli import main
from otlp_receiver import running_receiver

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z: the calls' start, the time genai-prices prices them at
WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)
TOOLS = {"local_index": {"cost_usd": 0.0, "latency_ms": 30, "capabilities": ["faq_lookup"], "complexity": "simple"}}
CATALOG = parse_catalog(json.dumps({"tools": TOOLS, "models": {"gpt-4.1-mini": {"input_per_1k": 1.0, "output_per_1k": 2.0}}}))
NO_MODELS = parse_catalog(json.dumps({"tools": TOOLS}))
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_AGENT_EVAL_")}


def chat(model, tokens_in=1200, tokens_out=300, cached=0, **extra):
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.usage.input_tokens": tokens_in,
             "gen_ai.usage.output_tokens": tokens_out, **extra}
    if cached:
        attrs["gen_ai.usage.cache_read.input_tokens"] = cached
    return attrs


def record(*llm_spans, exporter=None, catalog=NO_MODELS):
    """One agent run per group of LLM spans, through a real processor; its runs, and the registry."""
    runs, registry = [], CollectorRegistry()
    forward = SimpleSpanProcessor(exporter) if exporter is not None else None
    processor = AgentEvalSpanProcessor(catalog, registry=registry, background=False, on_run=runs.append, forward_to=forward)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("prices")
    for i, group in enumerate(llm_spans):
        start = T0 + i * 10**9
        root = tracer.start_span(f"invoke_agent a{i}", start_time=start,
                                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"agent{i}"})
        with contextlib.ExitStack() as stack:
            stack.enter_context(_current(root))
            for j, attrs in enumerate(group):
                span = tracer.start_span("chat", start_time=start + j * 1000, attributes=attrs)
                span.end(end_time=start + j * 1000 + 500)
        root.end(end_time=start + 10**8)
    provider.shutdown()
    return runs, registry


def _current(span):
    from opentelemetry import trace
    return trace.use_span(span, end_on_exit=False)


def table_usd(model, tokens_in=1200, tokens_out=300, cached=0, provider=None):
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out, cache_read_tokens=cached)
    return float(calc_price(usage, model, provider_id=provider, genai_request_timestamp=WHEN).total_price)


# -- genai-prices: the run's cost is the table's own calculation -------------------------------------------------

@pytest.mark.parametrize("model, provider", [("gpt-4.1-mini", None), ("gpt-5-mini", "openai"), ("claude-haiku-4-5", "anthropic"),
                                             ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "aws")])
def test_a_model_only_the_table_knows_costs_what_genai_prices_calculates(model, provider):
    extra = {"gen_ai.provider.name": provider} if provider else {}
    (run,), _ = record([chat(model, **extra), chat(model, 800, 50, **extra)])
    expected = table_usd(model, provider=provider) + table_usd(model, 800, 50, provider=provider)
    assert expected > 0
    assert run.evaluation.llm_cost_usd == pytest.approx(expected, rel=1e-12)
    assert run.evaluation.llm_price_sources == ("genai_prices", "genai_prices") and run.evaluation.unpriced_models == ()


def test_a_bedrock_id_is_priced_by_the_aws_rates_without_a_provider_named():
    model = "us.anthropic.claude-haiku-4-5-20251001-v1:0"  # the Vercel AI SDK on Bedrock (gen_ai.system amazon-bedrock)
    (run,), _ = record([chat(model)])
    assert run.evaluation.llm_cost_usd == pytest.approx(table_usd(model, provider="aws"), rel=1e-12)
    (named,), _ = record([chat("global.anthropic.claude-haiku-4-5-20251001-v1:0", **{"gen_ai.system": "amazon-bedrock"})])
    assert named.evaluation.llm_cost_usd == pytest.approx(table_usd("global.anthropic.claude-haiku-4-5-20251001-v1:0",
                                                                    provider="aws"), rel=1e-12)


def test_cached_input_tokens_cost_what_the_table_says():
    (run,), _ = record([chat("gpt-4.1-mini", 10_000, 100, cached=8_000)])
    cached, uncached = table_usd("gpt-4.1-mini", 10_000, 100, cached=8_000), table_usd("gpt-4.1-mini", 10_000, 100)
    assert cached < uncached  # the table prices cache reads below fresh input
    assert run.evaluation.llm_cost_usd == pytest.approx(cached, rel=1e-12)


def test_a_provider_prefixed_model_is_priced_by_its_provider():
    (run,), _ = record([chat("mistral/mistral-small-latest")])  # any-agent's (litellm's) spelling
    expected = table_usd("mistral-small-latest", provider="mistral")
    assert expected > 0 and run.evaluation.llm_cost_usd == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tokens_in", [1_000, 199_000, 250_000])  # gemini-2.5-pro's rates change above 200k input tokens
def test_a_tiered_price_is_the_tables_on_each_side_of_the_tier(tokens_in):
    (run,), _ = record([chat("gemini-2.5-pro", tokens_in, 2_000, cached=500)])
    assert run.evaluation.llm_cost_usd == pytest.approx(table_usd("gemini-2.5-pro", tokens_in, 2_000, cached=500), rel=1e-12)


def test_a_call_is_priced_at_the_time_it_was_made():
    then = 1_758_000_000_000_000_000  # 2025-09-16: mistral-small-latest cost less than it does in the table today
    table = PriceTable()
    old = table.cost("mistral/mistral-small-latest", None, 1_000_000, 0, 1_000_000, then)
    later = 1_793_491_200_000_000_000  # 2026-11-01
    new = table.cost("mistral/mistral-small-latest", None, 1_000_000, 0, 1_000_000, later)
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    for usd, ns in ((old, then), (new, later)):
        at = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
        assert usd == float(calc_price(usage, "mistral-small-latest", provider_id="mistral", genai_request_timestamp=at).total_price)
    assert old < new


# -- the order: catalog, then reported, then genai-prices -------------------------------------------------------

def test_the_catalog_wins_over_a_reported_cost_and_the_table():
    (run,), _ = record([chat("gpt-4.1-mini", 1000, 500, **{"llm.cost.total": 9.0})], catalog=CATALOG)
    assert run.evaluation.llm_cost_usd == pytest.approx(1.0 + 0.5 * 2.0)
    assert run.evaluation.llm_priced_by == ("catalog",)


@pytest.mark.parametrize("cost, usd", [
    ({"gen_ai.usage.input_cost": 3.95e-05, "gen_ai.usage.output_cost": 4.8e-06}, 3.95e-05 + 4.8e-06),  # any-agent
    ({"llm.cost.total": 0.25, "llm.cost.prompt": 0.1}, 0.25),  # OpenInference: the total when there is one
    ({"llm.cost.prompt": 0.1, "llm.cost.completion": 0.05}, 0.15),
    ({"gen_ai.usage.cost.amount": 0.5, "gen_ai.usage.cost.currency": "USD"}, 0.5),  # proposed GenAI (PR #443)
    ({"gen_ai.usage.cost.amount": "0.5"}, 0.5),
])
def test_a_cost_the_span_reports_is_used_as_reported_before_the_table(cost, usd):
    (run,), registry = record([chat("gpt-4.1-mini", **cost), chat("gpt-4.1-mini")])
    assert run.evaluation.llm_cost_usd == pytest.approx(usd + table_usd("gpt-4.1-mini"), rel=1e-12)
    assert run.evaluation.llm_price_sources == ("reported", "genai_prices")
    assert run.evaluation.llm_priced_by == ("reported", "genai_prices")
    assert registry.get_sample_value("agent_eval_llm_calls_total", {"price_source": "reported"}) == 1
    assert registry.get_sample_value("agent_eval_llm_calls_total", {"price_source": "genai_prices"}) == 1


@pytest.mark.parametrize("key", ["llm.cost.total", "llm.cost.prompt", "llm.cost.completion", "gen_ai.usage.cost.amount",
                                 "gen_ai.usage.input_cost", "gen_ai.usage.output_cost"])
def test_each_cost_attribute_is_read_alone(key):
    assert reported_cost({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", key: 0.25}) == 0.25


@pytest.mark.parametrize("cost", [{"llm.cost.total": 0}, {"llm.cost.total": -1.0}, {"llm.cost.total": "n/a"},
                                  {"llm.cost.total": float("nan")}, {"gen_ai.usage.cost.amount": 0.5, "gen_ai.usage.cost.currency": "EUR"},
                                  {"gen_ai.usage.input_cost": True}])
def test_a_zero_odd_or_foreign_currency_cost_is_not_taken(cost):
    assert reported_cost(cost) is None
    (run,), _ = record([chat("gpt-4.1-mini", **cost)])
    assert run.evaluation.llm_price_sources == ("genai_prices",)


# -- what each run says, and the models nothing prices -----------------------------------------------------------

def test_unpriced_models_are_listed_counted_and_labelled():
    (run,), registry = record([chat("in-house-llm-7"), chat("gpt-4.1-mini")])
    e = run.evaluation
    assert e.unpriced_models == ("in-house-llm-7",) and e.llm_priced_by == ("genai_prices", "unpriced")
    assert e.llm_cost_usd == pytest.approx(table_usd("gpt-4.1-mini"), rel=1e-12)
    assert registry.get_sample_value("agent_eval_llm_calls_total", {"price_source": "unpriced"}) == 1
    assert registry.get_sample_value("agent_eval_processor_unpriced_llm_calls_total") == 1


def test_the_run_span_says_which_source_priced_it():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exported = InMemorySpanExporter()
    record([chat("gpt-5-mini", **{"llm.cost.total": 0.01}), chat("gpt-5-mini"), chat("in-house-llm-7")], exporter=exported)
    (root,) = [s for s in exported.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert list(root.attributes["agent_eval.run.llm_priced_by"]) == ["reported", "genai_prices", "unpriced"]
    assert list(root.attributes["agent_eval.run.unpriced_models"]) == ["in-house-llm-7"]
    assert root.attributes["agent_eval.run.llm_cost_usd"] == pytest.approx(0.01 + table_usd("gpt-5-mini"), rel=1e-12)


# -- score on an OTLP file a real exporter wrote -------------------------------------------------------------------

def test_score_on_a_file_a_real_exporter_wrote_prices_as_live(tmp_path):
    groups = [[chat("gpt-4.1-mini"), chat("gpt-4.1-mini", 5000, 20, cached=4096)],
              [chat("claude-haiku-4-5", **{"gen_ai.provider.name": "anthropic"})],
              [chat("gpt-5-mini", **{"gen_ai.usage.input_cost": 0.002, "gen_ai.usage.output_cost": 0.001})],
              [chat("in-house-llm-7")]]
    with running_receiver("http") as receiver:
        live, _ = record(*groups, exporter=OTLPSpanExporter(endpoint=receiver.endpoint))
        receiver.wait_for_spans(sum(len(g) + 1 for g in groups))
        path = tmp_path / "traces.jsonl"  # the Collector file exporter's shape: one OTLP/JSON request per line
        path.write_text("".join(MessageToJson(r, indent=None) + "\n" for r in receiver.requests))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), _env(CLEAN_ENV):
        assert main(["score", str(path), "--json", "--catalog", _catalog_file(tmp_path)]) in (0, 1)
    report = json.loads(out.getvalue())
    by_agent = {g["agent"]: g for g in report["groups"]}
    expected = {
        "agent0": table_usd("gpt-4.1-mini") + table_usd("gpt-4.1-mini", 5000, 20, cached=4096),
        "agent1": table_usd("claude-haiku-4-5", provider="anthropic"),
        "agent2": 0.003,
        "agent3": 0.0,
    }
    for agent, usd in expected.items():
        assert by_agent[agent]["llm_cost_per_run_usd"] == pytest.approx(usd, rel=1e-12)
        assert by_agent[agent]["llm_cost_per_run_usd"] == pytest.approx(
            next(r for r in live if r.agent == agent).evaluation.llm_cost_usd, rel=1e-12)  # the same as live
    assert [by_agent[a]["llm_priced_by"] for a in expected] == [["genai_prices"], ["genai_prices"], ["reported"], ["unpriced"]]
    assert report["llm_prices"] == {"calls_by_source": {"reported": 1, "genai_prices": 3, "unpriced": 1}}
    assert report["coverage"]["unpriced_models"] == [{"model": "in-house-llm-7", "calls": 1}]  # priced by none: to add
    table = io.StringIO()
    with contextlib.redirect_stdout(table), _env(CLEAN_ENV):
        main(["score", str(path), "--catalog", _catalog_file(tmp_path), "--html", str(tmp_path / "r.html")])
    text = table.getvalue()
    assert "LLM priced by" in text and "genai_prices" in text
    assert "LLM calls priced: 1 by the cost the spans report, 3 by genai-prices; 1 unpriced by every source" in text
    assert "in-house-llm-7: 1 call" in text
    html = (tmp_path / "r.html").read_text()
    assert "in-house-llm-7" in html and "LLM priced by" in html and "3 by genai-prices" in html


def _catalog_file(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text(json.dumps({"tools": TOOLS}))
    return str(path)


@contextlib.contextmanager
def _env(environ):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- the table: looked up once per model, bounded, never fetched ---------------------------------------------------

def test_the_table_is_looked_up_once_per_model_and_the_cache_is_bounded(monkeypatch):
    import genai_prices

    lookups = []
    real = genai_prices.calc_price

    def counting(*args, **kwargs):
        lookups.append(args[1])
        return real(*args, **kwargs)

    table = PriceTable()
    monkeypatch.setattr(genai_prices, "calc_price", counting)
    for _ in range(50):
        assert table.cost("gpt-4.1-mini", None, 1000, 0, 10, T0) == pytest.approx(table_usd("gpt-4.1-mini", 1000, 10))
        assert table.cost("no-such-model-x", None, 1000, 0, 10, T0) is None
    assert lookups.count("gpt-4.1-mini") == 1 and lookups.count("no-such-model-x") == 1  # misses are remembered too
    for i in range(MAX_MODELS + 10):
        table.cost(f"no-such-model-{i}", None, 1, 0, 1, T0)
    assert len(table._found) <= MAX_MODELS


def test_prices_come_from_the_bundled_snapshot_never_the_network():
    from genai_prices import data_snapshot

    table = PriceTable()
    assert table.cost("gpt-4.1-mini", None, 1000, 0, 10, T0) is not None
    assert data_snapshot.get_snapshot().from_auto_update is False  # nothing started UpdatePrices
    assert Decimal(str(table_usd("gpt-4.1-mini", 1_000_000, 0))) > 0
