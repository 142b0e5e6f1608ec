"""Every metric this project exposes, in one table: name, type, HELP text, labels and buckets.

The in-process collector, the multiprocess mirror, the demo's read-back and the docs all
spell a metric from here, so a name or a HELP text changes in one place. Counter names are
given without `_total`, as prometheus-client's families expect.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from .histogram import COST_BUCKETS_USD, DURATION_BUCKETS_S

TOOL, AGENT = "gen_ai_tool_name", "gen_ai_agent_name"
TOOL_TYPE = "gen_ai_tool_type"  # GenAI gen_ai.tool.type: function, extension, datastore ("" when the span has none)
OTHER = "_other_"  # label value that absorbs names past the cardinality caps
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, math.inf)
CALL_COUNT_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100, math.inf)
HEALTH_BUCKETS = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, math.inf)
QUANTILES = (0.5, 0.95, 0.99)
DIMENSIONS = ("efficiency", "cost", "latency", "complexity")


class Spec(NamedTuple):
    name: str
    kind: str  # counter, histogram, summary, gauge
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    otel: tuple[str, str] = ("", "")  # the OpenTelemetry metric name and unit (UCUM), for OTLP (metrics/otlp.py)

    @property
    def sample(self) -> str:
        """The name of the sample a reader looks for (`_total` on counters)."""
        return self.name + "_total" if self.kind == "counter" else self.name


_RUN = (AGENT, "task")

# Per tool call, labelled by tool and agent.
TOOL_CALLS = Spec("agent_eval_tool_calls", "counter", "Tool calls by outcome and verdict against the environment's thresholds.",
                  (TOOL, AGENT, "task", "outcome", "verdict", "optimal_tool"),
                  otel=("agent_eval.tool.calls", "{call}"))
TOOL_COST = Spec("agent_eval_tool_cost_usd", "counter", "Catalog cost of the tool calls made, in USD.", (TOOL, AGENT),
                 otel=("agent_eval.tool.cost", "USD"))
TOOL_EXCESS_COST = Spec("agent_eval_tool_excess_cost_usd", "counter",
                        "Money wasted: cost of the calls minus the cost of the optimal tool, in USD.", (TOOL, AGENT, "optimal_tool"),
                        otel=("agent_eval.tool.excess_cost", "USD"))
# What tool results cost the later model calls of their runs (core/context_cost.py, docs/true-cost.md): counted when
# the run is evaluated, on the (tool, agent) series its calls were counted on.
TOOL_CONTEXT_TOKENS = Spec("agent_eval_tool_context_tokens", "counter",
                           "Input tokens tool results added to the later model calls of their runs (each result's share, times "
                           "the calls that held it), counted when the run ends; calls in runs without token counts are left out.",
                           (TOOL, AGENT), otel=("agent_eval.tool.context_tokens", "{token}"))
TOOL_CONTEXT_COST = Spec("agent_eval_tool_context_cost_usd", "counter",
                         "Cost of the input tokens tool results added to the later model calls of their runs, priced per model, "
                         "in USD (a tool call's true cost is its catalog cost plus this).", (TOOL, AGENT),
                         otel=("agent_eval.tool.context_cost", "USD"))
TOOL_CONTEXT_CALLS = Spec("agent_eval_tool_context_calls", "counter",
                          "Tool calls whose context cost was measured (in runs with token counts): the denominator of the "
                          "context cost per call.", (TOOL, AGENT), otel=("agent_eval.tool.context_calls", "{call}"))
TOOL_EXCESS_LATENCY = Spec("agent_eval_tool_excess_latency_seconds", "counter",
                           "Observed duration beyond the catalog's expected latency of the task's optimal tool (every call, the optimal tool's too).", (TOOL, AGENT),
                           otel=("agent_eval.tool.excess_latency", "s"))
TOOL_SLO_VIOLATIONS = Spec("agent_eval_tool_slo_violations", "counter", "Tool calls slower than the tool's catalog latency SLO.", (TOOL, AGENT),
                           otel=("agent_eval.tool.slo_violations", "{call}"))
TOOL_EFFICIENCY = Spec("agent_eval_tool_efficiency_score", "histogram",
                       "Per-call efficiency score and its cost, latency and complexity components (0-1).",
                       (TOOL, AGENT, "profile", "dimension"), SCORE_BUCKETS,
                       otel=("agent_eval.tool.efficiency_score", "1"))
# The full-resolution latency histogram is per tool, not per agent: it answers the fleet's p99 per
# tool (154 buckets per series); per-agent latency is in the summary and the excess-latency counter.
TOOL_DURATION = Spec("gen_ai_execute_tool_duration_seconds", "histogram", "Duration of tool executions (GenAI semantic conventions).",
                     (TOOL, TOOL_TYPE, "error_type"), DURATION_BUCKETS_S,
                     otel=("gen_ai.execute_tool.duration", "s"))
TOOL_LATENCY = Spec("agent_eval_tool_latency_seconds", "summary", "Tool call duration; quantiles over the last {window:g} s.", (TOOL, AGENT),
                    otel=("agent_eval.tool.latency", "s"))

# Per agent run, labelled by agent and task.
RUNS = Spec("agent_eval_runs", "counter", "Agent runs by outcome (completed: root OK, tool errors recovered, validator passed).",
            (*_RUN, "outcome"),
            otel=("agent_eval.runs", "{run}"))
RUN_DURATION = Spec("agent_eval_run_duration_seconds", "histogram", "Duration of agent runs.", _RUN, DURATION_BUCKETS_S,
                    otel=("agent_eval.run.duration", "s"))
RUN_COST = Spec("agent_eval_run_cost_usd", "histogram", "Cost of agent runs: catalog tool costs plus priced LLM tokens, in USD.",
                _RUN, COST_BUCKETS_USD,
                otel=("agent_eval.run.cost", "USD"))
RUN_TOOL_CALLS = Spec("agent_eval_run_tool_calls", "histogram", "Tool calls per agent run.", _RUN, CALL_COUNT_BUCKETS,
                      otel=("agent_eval.run.tool_calls", "{call}"))
RUN_CORRECTNESS = Spec("agent_eval_tool_correctness_score", "histogram",
                       "Tool correctness of runs against the task's expected tools (deepeval semantics, 0-1).", _RUN, SCORE_BUCKETS,
                       otel=("agent_eval.tool_correctness.score", "1"))
RUN_HEALTH = Spec("agent_eval_run_health_score", "histogram", "Run health score, 0-100 (completion, tool accuracy, latency, cost).",
                  _RUN, HEALTH_BUCKETS,
                  otel=("agent_eval.run.health_score", ""))
RUN_REDUNDANT = Spec("agent_eval_redundant_tool_calls", "counter", "Repeated calls of a tool with the same arguments within a run.",
                     (*_RUN, TOOL),
                     otel=("agent_eval.redundant_tool_calls", "{call}"))
RUN_SPURIOUS = Spec("agent_eval_spurious_tool_calls", "counter", "Calls of tools outside the task's expected and acceptable tools.",
                    (*_RUN, TOOL),
                    otel=("agent_eval.spurious_tool_calls", "{call}"))
RUN_LOOPS = Spec("agent_eval_tool_call_loops", "counter",
                 "Loops in agent runs: 3 or more consecutive calls of a tool with the same captured arguments.", (*_RUN, TOOL),
                 otel=("agent_eval.tool_call_loops", "{loop}"))
RUN_OVER_BUDGET = Spec("agent_eval_runs_over_budget", "counter", "Runs with more tool calls than the task's max_calls.", _RUN,
                       otel=("agent_eval.runs_over_budget", "{run}"))
# Bounded by construction: price_source is one of catalog, reported, genai_prices, unpriced (core.prices.PRICE_SOURCES).
LLM_CALLS = Spec("agent_eval_llm_calls", "counter",
                 "LLM calls in evaluated runs, by where their price came from: the catalog's models, a cost the span "
                 "reported, genai-prices' table, or none (unpriced: not in the run's cost).", ("price_source",),
                 otel=("agent_eval.llm_calls", "{call}"))
# The GenAI semantic conventions' agent metrics (gen_ai.invoke_agent.*, with their bucket advice), for runs
# rooted at an agent span; labelled by agent and task like the run metrics above.
GENAI_AGENT_DURATION_BUCKETS = (*(0.1 * 2**i for i in range(13)), math.inf)  # 0.1 ... 409.6 s
GENAI_AGENT_CALL_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, math.inf)
AGENT_DURATION = Spec("gen_ai_invoke_agent_duration_seconds", "histogram",
                      "Duration of agent invocations (GenAI semantic conventions).", _RUN, GENAI_AGENT_DURATION_BUCKETS,
                      otel=("gen_ai.invoke_agent.duration", "s"))
AGENT_TOOL_CALLS = Spec("gen_ai_invoke_agent_tool_calls", "histogram",
                        "Tool calls per agent invocation (GenAI semantic conventions).", _RUN, GENAI_AGENT_CALL_BUCKETS,
                        otel=("gen_ai.invoke_agent.tool_calls", "{call}"))
AGENT_INFERENCE_CALLS = Spec("gen_ai_invoke_agent_inference_calls", "histogram",
                             "Model calls per agent invocation (GenAI semantic conventions).", _RUN, GENAI_AGENT_CALL_BUCKETS,
                             otel=("gen_ai.invoke_agent.inference_calls", "{call}"))
# The run histograms, by the field of the accumulator that feeds each.
RUN_HISTOGRAMS = {"duration": RUN_DURATION, "cost": RUN_COST, "calls": RUN_TOOL_CALLS, "correctness": RUN_CORRECTNESS,
                  "health": RUN_HEALTH, "agent_duration": AGENT_DURATION, "agent_tool_calls": AGENT_TOOL_CALLS,
                  "agent_inference_calls": AGENT_INFERENCE_CALLS}

# Figures from the catalog, so alerts and dashboards can compare against them.
TOOL_EXPECTED_LATENCY = Spec("agent_eval_tool_expected_latency_seconds", "gauge", "Expected latency of each tool, from the catalog.", (TOOL,),
                             otel=("agent_eval.tool.expected_latency", "s"))
TOOL_LATENCY_SLO = Spec("agent_eval_tool_latency_slo_seconds", "gauge", "Latency SLO of each tool, from the catalog.", (TOOL,),
                        otel=("agent_eval.tool.latency_slo", "s"))
TOOL_COST_PER_CALL = Spec("agent_eval_tool_cost_per_call_usd", "gauge", "Cost of one call of each tool, from the catalog.", (TOOL,),
                          otel=("agent_eval.tool.cost_per_call", "USD"))
EFFICIENCY_THRESHOLD = Spec("agent_eval_efficiency_threshold", "gauge", "Efficiency score thresholds per environment, from the catalog.",
                            ("environment", "level"),
                            otel=("agent_eval.efficiency_threshold", ""))

# Coverage: what the catalog lacks, so a dashboard shows what to draft (`otel-agent-eval catalog draft`).
CATALOG_UNKNOWN_TOOL_CALLS = Spec("agent_eval_catalog_unknown_tool_calls", "counter",
                                  "Calls of tools the catalog lacks (scored 0); draft them with `otel-agent-eval catalog draft`.", (TOOL,),
                                  otel=("agent_eval.catalog.unknown_tool_calls", "{call}"))
CATALOG_UNPRICED_MODEL_CALLS = Spec("agent_eval_catalog_unpriced_model_calls", "counter",
                                    "LLM calls of models no source prices: not in the catalog's `models`, no cost on the span, unknown to "
                                    "genai-prices (not counted in run cost).",
                                    ("gen_ai_request_model",), otel=("agent_eval.catalog.unpriced_model_calls", "{call}"))

CATALOG_FALLBACK = Spec("agent_eval_catalog_fallback", "gauge",
                        "1 when the configured catalog could not be loaded and the packaged default scores instead.",
                        otel=("agent_eval.catalog_fallback", ""))

# The tool-selection judge (judge/online.py): its scores per agent and task, judgements by outcome, its latency, tokens
# and cost. Bounded: agents are capped as everywhere; outcome is one of JUDGE_OUTCOMES; token type input or output.
JUDGE_OUTCOMES = ("judged", "sampled_out", "over_budget", "dropped", "failed", "timed_out")
JUDGE_SCORE = Spec("agent_eval_judge_score", "histogram",
                   "Judged tool selection of sampled runs (deepeval ToolCorrectnessMetric with available tools: the minimum of "
                   "the expected-tools comparison and the LLM judge's score, 0-1), by judge model and prompt version.",
                   (*_RUN, "judge_model", "prompt_version"), SCORE_BUCKETS,
                   otel=("agent_eval.judge.score", "1"))
JUDGEMENTS = Spec("agent_eval_judgements", "counter",
                  "Completed runs by what the judge did with them: judged, sampled_out, over_budget, dropped (queue full or "
                  "shutdown), failed, timed_out.", ("outcome",),
                  otel=("agent_eval.judgements", "{run}"))
JUDGE_DURATION = Spec("agent_eval_judge_duration_seconds", "histogram", "Time one judgement took, answered or not.",
                      (), DURATION_BUCKETS_S, otel=("agent_eval.judge.duration", "s"))
JUDGE_TOKENS = Spec("agent_eval_judge_tokens", "counter", "Tokens the judge's model used, by type (input, output).",
                    ("gen_ai_token_type",), otel=("agent_eval.judge.tokens", "{token}"))
JUDGE_COST = Spec("agent_eval_judge_cost_usd", "counter", "What the judge's tokens cost, in USD (priced as every LLM call).",
                  otel=("agent_eval.judge.cost", "USD"))

# Self-metrics: how the processor itself is doing (agent_eval_processor_<name>_total).
SELF_PREFIX = "agent_eval_processor_"
SELF_COUNTERS = {
    "spans_seen": "Spans the processor received.",
    "spans_scored": "Tool-call spans scored.",
    "spans_ignored": "Spans that are no tool call.",
    "spans_unscored": "Spans passed on unprocessed because the hand-off queue was full (the load outran the scoring thread).",
    "tool_calls_unscored": "Tool-call spans among spans_unscored: calls not scored, not in any run.",
    "malformed_tool_spans": "Tool-call spans with values that could not be read (see the log).",
    "enrichments_dropped": "Tool spans forwarded without scores because enriching them failed.",
    "forward_errors": "Exceptions raised by the forwarded span processor.",
    "spans_dropped_downstream": "Spans the forwarded BatchSpanProcessor dropped because its queue was full (seen from its queue).",
    "internal_errors": "Exceptions caught inside the processor (see the log).",
    "labels_folded": f"Values counted under {OTHER!r}: names past the cardinality caps, label sets past the sample budget.",
    "runs_calls_dropped": "Calls not kept in a run because it exceeded max_calls_per_run (still scored).",
    "unpriced_llm_calls": "LLM calls no source prices: not in the catalog's `models`, no cost on the span, unknown to genai-prices (not counted in run cost).",
    "deferred_calls_released": "Tool spans held until their agent was known, then scored.",
    "nested_tool_spans": "Tool spans around a call already scored on a child span of the same tool (an MCP tools/call span): counted once.",
    "late_tool_spans": "Tool spans that ended after their trace's root: scored and forwarded at once with its agent, in no run.",
    "late_llm_spans": "Model-call spans that ended after their trace's root: in no run, their tokens in no run's cost.",
    "catalog_reloads": "Catalogs swapped in by a reload.",
    "catalog_reloads_rejected": "Catalog reloads rejected because the new file was broken (the last good one stays).",
}
RUNS_CLOSED_EARLY = Spec(SELF_PREFIX + "runs_closed_early", "counter",
                         "Runs closed before their root span ended, by reason (ttl, capacity, shutdown).", ("reason",),
                         otel=("agent_eval.processor.runs_closed_early", "{run}"))

# Every family above by its Prometheus name; OTLP names and units come from here (metrics/otlp.py).
SPECS = {spec.name: spec for spec in globals().values() if isinstance(spec, Spec)}
# Label names as OpenTelemetry attribute keys: the GenAI and general conventions' keys where they define
# the label (the Prometheus exporters turn the dots back into these underscores); the others as they are.
OTEL_ATTRIBUTES = {TOOL: "gen_ai.tool.name", AGENT: "gen_ai.agent.name", TOOL_TYPE: "gen_ai.tool.type", "error_type": "error.type",
                   "gen_ai_request_model": "gen_ai.request.model", "gen_ai_token_type": "gen_ai.token.type"}
