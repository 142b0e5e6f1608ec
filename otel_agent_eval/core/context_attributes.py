"""The context cost on what leaves the process: the run's root span, its evaluation events, held tool-span copies.

A tool span ends before the model calls that pay for its result, and the processor forwards it as it ends: its
context cost is known only when its run is evaluated (the root span ends). So it goes where the run is:

* the root's copy carries the run's split (`agent_eval.run.input_tokens`, `agent_eval.run.context_tokens`,
  `agent_eval.run.unattributed_input_tokens` and their USD), or `agent_eval.run.context_measured` false when its
  model calls have no token counts (nothing when it made no model call);
* one `gen_ai.evaluation.result` event `agent_eval.true_cost` per tool call whose result the later model calls paid
  for (the `MAX_CALL_EVALUATIONS` costliest), on the root, naming the call (`gen_ai.tool.name`,
  `agent_eval.tool_call.span_id`): its score is the call's true cost in USD;
* the metrics, when the run ends (`agent_eval_tool_context_*`).

Not on tool-span copies: the processor forwards a tool span as it ends, before its run is evaluated, while the
zero-code exporter and `serve` may hold it until its agent is known; putting it on the held copies only would make
the same spans leave different paths differently. So every path forwards the same spans, and no span is held longer
for it. Figures only: no text of a result is ever copied.
"""
from __future__ import annotations

from typing import Any

from . import conventions as c
from .context_cost import ContextCost, ToolContext

A = c.AGENT_EVAL_PREFIX
RUN = A + "run."
CONTEXT_TOKENS, CONTEXT_COST_USD, TRUE_COST_USD = A + "context_tokens", A + "context_cost_usd", A + "true_cost_usd"
TOOL_CALL_SPAN_ID = A + "tool_call.span_id"
RUN_CONTEXT = {name: RUN + name for name in (
    "context_measured", "input_tokens", "context_tokens", "unattributed_input_tokens", "input_cost_usd", "context_cost_usd",
    "unattributed_input_cost_usd")}
RUN_CONTEXT_ATTRIBUTES = frozenset(RUN_CONTEXT.values())
TRUE_COST_EVALUATION = A + "true_cost"
MAX_CALL_EVALUATIONS = 32  # true-cost events per run, the costliest calls first: a run of 1,000 calls adds 32 events


def run_context_attributes(context: ContextCost | None) -> dict[str, Any]:
    """The root's `agent_eval.run.*` context attributes: the run's input tokens and cost, split."""
    k = RUN_CONTEXT
    if context is None:
        return {}
    if not context.measured:
        return {k["context_measured"]: False}
    attrs: dict[str, Any] = {k["context_measured"]: True, k["input_tokens"]: context.input_tokens,
                             k["context_tokens"]: context.attributed_tokens,
                             k["unattributed_input_tokens"]: context.unattributed_tokens}
    if context.input_usd or not context.unpriced_llm_calls:  # some call priced (or every one, at 0)
        attrs |= {k["input_cost_usd"]: context.input_usd, k["context_cost_usd"]: context.attributed_usd,
                  k["unattributed_input_cost_usd"]: context.unattributed_usd}
    return attrs


def call_context_attributes(cost_usd: float, context: ToolContext) -> dict[str, Any]:
    """A tool call's context figures (on its true-cost evaluation): induced tokens, their cost and its true cost."""
    if context.tokens is None:
        return {}
    attrs: dict[str, Any] = {CONTEXT_TOKENS: context.tokens}
    if context.usd is not None:
        attrs[CONTEXT_COST_USD] = context.usd
        attrs[TRUE_COST_USD] = cost_usd + context.usd
    return attrs


def context_evaluations(run: Any) -> list[dict[str, Any]]:
    """One `agent_eval.true_cost` evaluation per tool call of the run whose result later model calls paid for, the
    `MAX_CALL_EVALUATIONS` with the most induced tokens (ties: in call order), in call order."""
    context = run.evaluation.context if run.evaluation is not None else None
    if context is None or not context.measured or len(context.calls) != len(run.tool_calls):
        return []
    paid = [i for i, cost in enumerate(context.calls) if cost.tokens]
    if len(paid) > MAX_CALL_EVALUATIONS:
        paid = sorted(sorted(paid, key=lambda i: -context.calls[i].tokens)[:MAX_CALL_EVALUATIONS])
    out = []
    calls, costs, scores, n_scores = run.tool_calls, context.calls, run.scores, len(run.scores)
    for i in paid:
        record = calls[i]
        tokens, usd, share, held_by, model = costs[i]
        on = " on " + model if model else ""
        if usd is None:  # no score: a count of tokens is no price
            out.append({_NAME: TRUE_COST_EVALUATION, _LABEL: "unpriced",
                        _EXPLANATION: f"Its result added {share:,} input tokens to each of {held_by:,} later model calls{on}: "
                                      f"{tokens:,} tokens, at no known price.",
                        _TOOL: record.name, TOOL_CALL_SPAN_ID: f"{record.span_id:016x}", CONTEXT_TOKENS: tokens})
            continue
        price = scores[i].static.cost_usd if i < n_scores else 0.0
        true_cost = price + usd
        out.append({_NAME: TRUE_COST_EVALUATION, _SCORE: true_cost, _LABEL: "measured",
                    _EXPLANATION: f"Its result added {share:,} input tokens to each of {held_by:,} later model calls{on}: "
                                  f"{tokens:,} tokens, ${usd:.6g}; true cost ${true_cost:.6g} = catalog price ${price:.6g} + that.",
                    _TOOL: record.name, TOOL_CALL_SPAN_ID: f"{record.span_id:016x}", CONTEXT_TOKENS: tokens,
                    CONTEXT_COST_USD: usd, TRUE_COST_USD: true_cost})
    return out


_NAME, _SCORE, _LABEL = c.GEN_AI_EVALUATION_NAME, c.GEN_AI_EVALUATION_SCORE_VALUE, c.GEN_AI_EVALUATION_SCORE_LABEL
_EXPLANATION, _TOOL = c.GEN_AI_EVALUATION_EXPLANATION, c.GEN_AI_TOOL_NAME
