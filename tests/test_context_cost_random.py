"""The context cost on many random runs: conserved, and the same whatever order the spans came in.

The hand-worked examples (tests/test_context_cost.py) fix what each rule gives; these runs mix every rule at once
(ties, tools without times, model calls inside tools, calls without token counts, shrinking contexts, cached
input, unpriced models, failed calls, results of every shape), as the one walk over the sorted calls sees them.
"""
from __future__ import annotations

import random
from typing import Any

from otel_agent_eval.core.context_cost import context_cost, split
from otel_agent_eval.core.recognize import LLMCall

PRICES = {"a": (3e-6, 3e-7), "b": (1e-7, 1e-7), None: None}


class Tool:
    """A tool call as context_cost reads it (`ToolCallRecord`'s fields)."""

    __slots__ = ("start_ns", "end_ns", "output", "error", "error_message", "_attrs")

    def __init__(self, start: int | None, end: int | None, output: Any, error: str | None = None,
                 attrs: dict[str, Any] | None = None) -> None:
        self.start_ns, self.end_ns, self.output, self.error, self._attrs = start, end, output, error, attrs
        self.error_message = "timed out after 30 s" if error else None


def rates(call: LLMCall) -> tuple[float, float] | None:
    return PRICES[call.model] if call.input_tokens > 0 else None


def random_run(rnd: random.Random) -> tuple[list[LLMCall], list[Tool]]:
    if rnd.random() < 0.5:  # an agent's run: model and tool calls in turn, growing, sometimes tied to the millisecond
        t, size, llm, tools = 0, rnd.randint(100, 2000), [], []
        for i in range(rnd.randint(1, 8)):
            llm.append(LLMCall(rnd.choice(["a", "b", None]), size, rnd.randint(0, 100), i, start_ns=t,
                               cached_input_tokens=rnd.choice([0, size // 2])))
            t += rnd.choice([0, 5, 10])
            for _ in range(rnd.randint(0, 3)):
                tools.append(Tool(t, t + rnd.randint(0, 3), "r" * rnd.randint(0, 99)))
                t += rnd.choice([0, 1, 4])
            size += rnd.randint(-50, 900)
        return llm, tools
    span = rnd.choice([50, 1000])  # anything: overlaps, missing times and counts, nested calls
    llm = [LLMCall(rnd.choice(["a", "b", None]), max(0, rnd.randint(-200, 3000)), rnd.randint(0, 200), i,
                   start_ns=None if rnd.random() < 0.1 else rnd.randrange(span),
                   cached_input_tokens=rnd.choice([0, rnd.randint(0, 3000)])) for i in range(rnd.randint(0, 8))]
    tools = []
    for _ in range(rnd.randint(0, 8)):
        start = None if rnd.random() < 0.1 else rnd.randrange(span)
        end = None if rnd.random() < 0.1 else (start if start is not None else 0) + rnd.randrange(span // 3)
        tools.append(Tool(start, end, rnd.choice([None, "x" * rnd.randint(0, 50), ["ab", 3, "c"], 5]),
                          rnd.choice([None, None, "TimeoutError"]),
                          rnd.choice([{}, {"gen_ai.output": "y" * rnd.randint(0, 30)}, None])))
    return llm, tools


def test_random_runs_are_conserved_and_independent_of_span_order():
    rnd = random.Random(42)
    attributed_runs = ordered_runs = 0
    for _ in range(3_000):
        llm, tools = random_run(rnd)
        cost = context_cost(llm, tools, rates)
        assert len(cost.calls) == len(tools)
        if not cost.measured:
            assert all(c.tokens is None and c.usd is None for c in cost.calls)
            continue
        assert cost.input_tokens == sum(call.input_tokens for call in llm)
        assert cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens
        assert cost.attributed_tokens == sum(c.tokens for c in cost.calls)
        assert all(c.tokens == c.share * c.held_by and c.tokens >= 0 for c in cost.calls)
        assert abs(cost.attributed_usd + cost.unattributed_usd - cost.input_usd) <= 1e-12 + 1e-9 * cost.input_usd
        attributed_runs += cost.attributed_tokens > 0
        if not _untied(llm, tools):  # calls that tie keep the order they came in: nothing else tells them apart
            continue
        ordered_runs += 1
        order = list(range(len(tools)))  # the same spans, arriving in another order
        rnd.shuffle(order)
        shuffled = context_cost(rnd.sample(llm, len(llm)), [tools[i] for i in order], rates)
        assert [shuffled.calls[order.index(i)] for i in range(len(tools))] == list(cost.calls)
        assert shuffled == cost._replace(calls=shuffled.calls)  # every figure, to the last bit
    assert attributed_runs > 1_000 and ordered_runs > 1_000  # the runs exercise the attribution, not only its edges


def _untied(llm: list[LLMCall], tools: list[Tool]) -> bool:
    starts = [call.start_ns for call in llm]
    timed = [t.start_ns if t.start_ns is not None else t.end_ns for t in tools]
    timed = [t for t in timed if t is not None]
    return None not in starts and len(set(starts)) == len(starts) and len(set(timed)) == len(timed)


def test_split_adds_up_and_follows_the_weights():
    rnd = random.Random(7)
    for _ in range(5_000):
        weights = [rnd.choice([None, 0, rnd.randint(0, 1000)]) if rnd.random() < 0.3 else rnd.randint(0, 1000)
                   for _ in range(rnd.randint(1, 6))]
        total = rnd.randint(0, 5000)
        parts = split(total, weights)
        assert sum(parts) == total and all(p >= 0 for p in parts)
        even = None in weights or not sum(weights)
        used = [1] * len(weights) if even else weights
        for part, weight in zip(parts, used):  # each part within one token of its exact share
            assert abs(part - total * weight / sum(used)) < 1
