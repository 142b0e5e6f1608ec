"""What a tool call costs the model calls after it: the input tokens its result adds to every later call of its run.

A tool's result goes into the agent's context and is paid for, as input, by every later model call of the
conversation that still holds it. This is read from token counts alone (docs/true-cost.md):

* One run is one conversation (`core.runs`: a nested agent is a run of its own). Its model calls are put in
  order of their start; model calls that start inside one of the run's tool calls are that tool's own
  conversation and stay out of the chain (`inner_llm_calls`).
* The **growth** of a call's input over the previous call's input plus output is what was added between them.
  It goes to the tool calls whose results fed that call (those that started after the previous call did and no
  later than this one), split by result size where every one of them records its result (or error text), else
  evenly; a call no tool fed keeps its growth unattributed (a user message). What the first call holds (the
  system prompt, the task) and the model's own output stay unattributed.
* A tool's **share** is carried into every later call until the context **shrinks**: a call whose input is
  smaller than the previous call's input (summarised, truncated, a new conversation) ends every carry, and its
  whole input is unattributed. A model call without token counts is left out of the chain: the results that fed
  it are counted at the next call that has them (its output then counts in that growth).
* Each call is priced by its own model (`input_rates`): the part of its prompt that was already there at the
  previous call comes first and holds its cached tokens (priced at the cache price); what was added since is
  fresh. Carried shares are priced at the rate of the first part, new shares at the rate of the second.

Conservation, per run: attributed + unattributed tokens == the sum of its model calls' input tokens, and the
same for USD over the priced calls. Integer shares are split by largest remainder, so tokens add up exactly.
A run none of whose model calls reports input tokens is **unmeasured** (`ContextCost.measured` False), never 0.

Pure: no I/O, nothing kept. A result is only measured (its length), never copied. Cost O((n + m) log(n + m))
per run, done once when the run is evaluated.

    >>> cost = context_cost(run.llm_calls, run.tool_calls, rates)
    >>> cost.calls[0].tokens, cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens
    (144, True)
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

# Where a tool span keeps its result beyond its convention's own key (`ToolCallRecord.output`): any-agent writes
# `gen_ai.output` on its `execute_tool` spans; google-adk's legacy schema `gcp.vertex.agent.tool_response`.
EXTRA_RESULT_KEYS = ("gen_ai.output", "gcp.vertex.agent.tool_response")

Rates = tuple[float, float]  # USD per fresh input token, per cached input token


class ToolContext(NamedTuple):
    """What one tool call's result cost the later model calls of its run."""

    tokens: int | None  # induced input tokens: its share times the calls that held it; None when the run is unmeasured
    usd: float | None  # their price; None when no call that held it is priced (or the run is unmeasured)
    share: int = 0  # tokens its result added to the first call it fed
    held_by: int = 0  # model calls that held it (the first it fed and the later ones until the context shrank)
    model: str | None = None  # the model of the first call it fed: what it was measured on


class ContextCost(NamedTuple):
    """A run's input tokens and their cost, split into what tool results caused and the rest."""

    measured: bool  # False: no model call of the run reports input tokens ("unmeasured", never 0)
    input_tokens: int  # the sum of the run's model calls' input tokens
    attributed_tokens: int
    unattributed_tokens: int
    input_usd: float  # the input part of the priced calls' cost
    attributed_usd: float
    unattributed_usd: float
    calls: tuple[ToolContext, ...]  # one per tool call, in the order given
    llm_calls_without_usage: int = 0
    inner_llm_calls: int = 0  # model calls made inside a tool call: not in the chain, their input unattributed
    shrinks: int = 0  # calls whose context shrank: each ended every carry
    unpriced_llm_calls: int = 0


UNMEASURED_CALL = ToolContext(None, None)
_NOTHING = ToolContext(0, 0.0)  # a call whose result fed no model call of its run (it ran after the last one)


def unmeasured(tool_calls: int, llm_calls: int = 0) -> ContextCost:
    return ContextCost(False, 0, 0, 0, 0.0, 0.0, 0.0, (UNMEASURED_CALL,) * tool_calls, llm_calls)


def result_size(record: Any) -> int | None:
    """Characters of a tool call's result as its span records it (or of its error text, which is context too);
    None when it records neither. Only the length is read: nothing is copied."""
    value = record.output
    if value is None:
        attrs = getattr(record, "_attrs", None)  # the span's attributes, as recognize read them (no copy)
        if isinstance(attrs, Mapping):
            for key in EXTRA_RESULT_KEYS:
                value = attrs.get(key)
                if value is not None:
                    break
    if value is None and record.error is not None:
        value = record.error_message
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(len(item) if isinstance(item, str) else 0 for item in value)
    return None


def split(total: int, weights: Sequence[int | None]) -> list[int]:
    """`total` split over `weights` by largest remainder (evenly when any weight is unknown or all are 0):
    the parts add up to `total` exactly.

        >>> split(10, [1, 1, 1]), split(7, [3, None]), split(5, [0, 4])
        ([4, 3, 3], [4, 3], [0, 5])
    """
    n = len(weights)
    if n == 0:
        return []
    if any(w is None for w in weights) or not sum(weights):  # type: ignore[arg-type]
        weights = [1] * n
    whole = sum(weights)  # type: ignore[arg-type]
    parts = [total * w // whole for w in weights]  # type: ignore[operator]
    left = total - sum(parts)
    by_remainder = sorted(range(n), key=lambda i: (-(total * weights[i] % whole), i))  # type: ignore[operator]
    for i in by_remainder[:left]:
        parts[i] += 1
    return parts


def context_cost(llm_calls: Sequence[Any], tool_calls: Sequence[Any],
                 rates: Callable[[Any], Rates | None]) -> ContextCost:
    """The context cost of a run's tool calls (`LLMCall`s and `ToolCallRecord`s of one conversation, any order);
    `rates(call)` prices a model call's input tokens (None: unpriced)."""
    for call in llm_calls:
        if call.input_tokens > 0:
            break
    else:  # no model call reports input tokens (or none at all)
        return unmeasured(len(tool_calls), len(llm_calls))
    tool_start = [_start(record) for record in tool_calls]  # None: no time, fed no call
    tools = sorted(range(len(tool_calls)), key=lambda i: _LAST if tool_start[i] is None else tool_start[i])  # stable: ties in order
    llm_start = [call.start_ns if type(call.start_ns) is int else _LAST for call in llm_calls]
    order = sorted(range(len(llm_calls)), key=llm_start.__getitem__)
    inside = _inside_tools(tool_calls, tools)
    chain, starts, inner, without_usage = [], [], 0, 0
    for i in order:
        call = llm_calls[i]
        if inside is not None and inside(llm_start[i]):
            inner += 1
        elif call.input_tokens <= 0:
            without_usage += 1
        else:
            chain.append(call)
            starts.append(llm_start[i])
    fed: list[list[int]] = [[] for _ in chain]  # per chained call: the tool calls whose results it got first
    n_chain = len(chain)
    for t in tools:
        start = tool_start[t]
        if start is None:
            break  # the rest have no time either (sorted last)
        at = bisect.bisect_left(starts, start)  # the first call starting at or after the tool (a tie: times cut to ms)
        if at < n_chain:
            fed[at].append(t)

    shares = [0] * len(tool_calls)
    first = [-1] * len(tool_calls)  # index in `chain` of the first call each tool fed
    last = [-1] * len(tool_calls)
    new_rate, old_rate, priced = [], [], []  # per chained call: USD per newly added token, per carried token
    active: list[int] = []
    held = 0
    input_tokens = sum(call.input_tokens for call in llm_calls)
    input_usd = unattributed_usd = 0.0
    unattributed = input_tokens - sum(call.input_tokens for call in chain)  # inner calls' input
    shrinks = unpriced = 0
    previous = None
    for k, call in enumerate(chain):
        size = call.input_tokens
        if previous is None or size < previous.input_tokens:
            if previous is not None:
                shrinks += 1
            for t in active:
                last[t] = k - 1
            active, held, added, old = [], 0, 0, 0
        else:
            added = max(0, size - previous.input_tokens - previous.output_tokens)
            old = previous.input_tokens
        feeders = fed[k]
        if feeders and added and old:  # tools that fed the first call or a shrunk one add nothing measurable
            parts = [added] if len(feeders) == 1 else split(added, [result_size(tool_calls[t]) for t in feeders])
            for t, part in zip(feeders, parts):
                shares[t], first[t] = part, k
                active.append(t)
            held += added
        else:
            for t in feeders:
                shares[t], first[t] = 0, k
            added = 0
        new = size - old  # the prompt added since the previous call: after the part already there, so never cached
        rate = rates(call)
        if rate is None:
            unpriced += 1
            new_rate.append(0.0)
            old_rate.append(0.0)
            priced.append(0)
        else:
            fresh, cached_rate = rate
            cached = min(call.cached_input_tokens, size)
            cached_old, cached_new = min(cached, old), max(0, cached - old)
            old_usd = cached_old * cached_rate + (old - cached_old) * fresh
            new_usd = cached_new * cached_rate + (new - cached_new) * fresh
            new_rate.append(new_usd / new if new else 0.0)
            old_rate.append(old_usd / old if old else 0.0)
            priced.append(1)
            call_usd = old_usd + new_usd
            input_usd += call_usd
            unattributed_usd += call_usd - added * new_rate[k] - (held - added) * old_rate[k]
        unattributed += size - held
        previous = call
    for t in active:
        last[t] = len(chain) - 1

    old_sum, priced_sum = [0.0], [0]  # prefix sums over the chain
    for rate, p in zip(old_rate, priced):
        old_sum.append(old_sum[-1] + rate)
        priced_sum.append(priced_sum[-1] + p)
    out: list[ToolContext] = [_NOTHING] * len(tool_calls)
    attributed, attributed_usd = 0, 0.0
    for t in tools:  # summed in time order: the same figure to the last bit whatever order the spans came in
        k = first[t]
        if k < 0:  # fed no model call of the run (it ran after the last one): its result cost nothing
            continue
        share, end = shares[t], last[t] if shares[t] else k
        held_by = end - k + 1 if share else 0
        tokens = share * held_by
        usd = share * (new_rate[k] + old_sum[end + 1] - old_sum[k + 1]) if share else 0.0
        any_priced = priced_sum[end + 1] - priced_sum[k] > 0
        attributed += tokens
        attributed_usd += usd
        out[t] = _new_tuple(ToolContext, (tokens, usd if any_priced or not share else None, share, held_by, chain[k].model))
    return ContextCost(True, input_tokens, attributed, unattributed, input_usd, attributed_usd, unattributed_usd,
                       tuple(out), without_usage, inner, shrinks, unpriced)


_LAST = 1 << 62  # a model call without a start time sorts after every other
_new_tuple = tuple.__new__  # a NamedTuple built without its Python-level __new__ (all fields given)


def _start(record: Any) -> int | None:
    start = record.start_ns
    if type(start) is int:
        return start
    end = getattr(record, "end_ns", None)
    return end if type(end) is int else None


def _inside_tools(tool_calls: Sequence[Any], order: list[int]) -> Callable[[Any], bool] | None:
    """Whether a time falls strictly inside one of the tool calls (a model call the tool made itself); None: no tool
    call has both times."""
    spans = [(tool_calls[t].start_ns, tool_calls[t].end_ns) for t in order
             if type(tool_calls[t].start_ns) is int and type(tool_calls[t].end_ns) is int]
    if not spans:
        return None
    starts = [s for s, _ in spans]
    reach, furthest = [], -1  # the latest end among the tools started so far
    for _, end in spans:
        furthest = max(furthest, end)
        reach.append(furthest)

    def inside(start: Any) -> bool:
        if type(start) is not int:
            return False
        at = bisect.bisect_left(starts, start)  # tools starting strictly before
        if at == 0:
            return False
        # some earlier-starting tool still running: but only one that started strictly before and ends strictly after
        return reach[at - 1] > start

    return inside


def input_rates(call: Any, catalog_price: Callable[[str | None], Any], table: Any) -> Rates | None:
    """USD per fresh and per cached input token of one model call, by the sources `core.prices` tries in order:
    the catalog's `models` (its `input_per_1k`, `cached_per_1k`); the span's reported cost, whose input part is
    the table's input share of the call when genai-prices knows the model, else the input tokens' share of all
    its tokens (one rate for cached and fresh: the span does not split them); genai-prices' table. None: unpriced."""
    size = call.input_tokens
    if size <= 0:
        return None
    price = catalog_price(call.model)
    if price is not None:
        return price.input_per_1k / 1000, price.cached_per_1k / 1000
    reported = call.reported_cost_usd
    table_fresh = table_cached = None
    if table is not None and call.model:
        table_fresh = table.cost(call.model, call.provider, size, 0, 0, call.start_ns)
        if table_fresh is not None:
            table_cached = table.cost(call.model, call.provider, size, size, 0, call.start_ns)
    if reported is not None:
        share = size / (size + call.output_tokens)
        if table_fresh is not None and call.output_tokens:
            whole = table.cost(call.model, call.provider, size, min(call.cached_input_tokens, size),
                               call.output_tokens, call.start_ns)
            part = table.cost(call.model, call.provider, size, min(call.cached_input_tokens, size), 0, call.start_ns)
            if whole and part is not None:
                share = part / whole
        per_token = reported * share / size
        return per_token, per_token
    if table_fresh is not None and table_cached is not None:
        return table_fresh / size, table_cached / size
    return None


def true_cost(catalog_usd: float, induced_usd: float | None) -> float | None:
    """A tool call's true cost: the catalog's price of the call plus what its result cost later model calls."""
    return None if induced_usd is None else catalog_usd + induced_usd


__all__ = ["ContextCost", "EXTRA_RESULT_KEYS", "ToolContext", "context_cost", "input_rates", "result_size", "split",
           "true_cost", "unmeasured"]
