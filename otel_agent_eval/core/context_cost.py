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
    if type(value) is str:  # the common case, first
        return len(value)
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
    if None in weights or not (whole := sum(weights)):  # type: ignore[arg-type]
        weights, whole = [1] * n, n
    parts: list[int] = []  # (loops, not comprehensions: on Python 3.11 each comprehension is a function call)
    left = total
    for w in weights:
        parts.append(part := total * w // whole)  # type: ignore[operator]
        left -= part
    if left:  # the largest remainders get one more, ties in order
        remainders: list[int] = []
        for w in weights:
            remainders.append(-(total * w % whole))  # type: ignore[operator]
        for i in sorted(range(n), key=remainders.__getitem__)[:left]:
            parts[i] += 1
    return parts


def context_cost(llm_calls: Sequence[Any], tool_calls: Sequence[Any],
                 rates: Callable[[Any], Rates | None]) -> ContextCost:
    """The context cost of a run's tool calls (`LLMCall`s and `ToolCallRecord`s of one conversation, any order);
    `rates(call)` prices a model call's input tokens (None: unpriced).

    One walk over the model calls in start order, with two cursors over the tool calls in start order: one finds
    the model calls that start inside a tool call, the other the tool calls that feed each call of the chain. A
    tool's cost is settled when its carry ends (a shrink, the last call): its share times the calls that held it,
    priced by a running sum of the carried rate, so nothing is kept per model call. Runs once per run, when it
    closes (docs/performance.md: its cost per run), so it builds few objects: one entry per tool call fed."""
    for call in llm_calls:
        if call.input_tokens > 0:
            break
    else:  # no model call reports input tokens (or none at all)
        return unmeasured(len(tool_calls), len(llm_calls))
    # Both lists usually come in order already (spans end in the order they start): sorted only when they did not.
    n_tools = len(tool_calls)
    key: list[int] = []  # per tool call: its start, else its end, else _LAST (after every other): the walking order
    ends: list[int] = []  # per tool call with both times: its end (the model calls that start before it are its own)
    untimed, ordered, previous = 0, True, -1
    for record in tool_calls:
        start, end = record.start_ns, record.end_ns
        if type(start) is int:
            ends.append(end if type(end) is int else -1)
        else:
            ends.append(-1)
            if type(end) is int:
                start = end
            else:
                start = _LAST
                untimed += 1
        key.append(start)
        if start < previous:
            ordered = False
        previous = start
    # in walking order (stable: ties in order; the untimed last), and after them a sentinel that ends every walk
    tools = list(range(n_tools + 1)) if ordered else [*sorted(range(n_tools), key=key.__getitem__), n_tools]
    key.append(_SENTINEL)
    n_timed = n_tools - untimed
    llm_start: list[int] = []
    ordered, previous = True, -1
    for call in llm_calls:
        start = call.start_ns
        if type(start) is not int:
            start = _LAST
        llm_start.append(start)
        if start < previous:
            ordered = False
        previous = start

    out: list[ToolContext] = [_NOTHING] * n_tools
    carried: list[tuple[list[tuple[Any, ...]], int, float, int]] = []  # ended carries: (entries, last call, sums then)
    active: list[tuple[Any, ...]] = []  # (tool, share, first call, USD base, priced calls before it, model)
    input_tokens = unattributed = held = inner = without_usage = shrinks = unpriced = 0
    input_usd = unattributed_usd = old_total = 0.0  # old_total: the sum over the chain of USD per carried token
    priced_total = 0
    prev_in = prev_out = -1  # the previous chained call's input and output tokens (-1: none yet)
    k = -1  # the chained call's index
    p = s = 0  # in start order, the next tool call that fed no call yet; the next that no model call passed yet
    furthest = -1  # the latest end among the tool calls started before the model call
    for i in range(len(llm_calls)) if ordered else sorted(range(len(llm_calls)), key=llm_start.__getitem__):
        call, start = llm_calls[i], llm_start[i]
        size = call.input_tokens
        input_tokens += size
        while key[t := tools[s]] < start:
            if ends[t] > furthest:
                furthest = ends[t]
            s += 1
        if furthest > start:  # a model call inside a tool call: the tool's own conversation
            inner += 1
            unattributed += size
            continue
        if size <= 0:
            without_usage += 1
            unattributed += size
            continue
        k += 1
        if size < prev_in or prev_in < 0:
            if prev_in >= 0:
                shrinks += 1
            if active:  # every carry ends at the call before
                carried.append((active, k - 1, old_total, priced_total))
                active = []
            held = added = old = 0
        else:
            added = size - prev_in - prev_out
            if added < 0:
                added = 0
            old = prev_in
        q = s if s > p else p  # it feeds the first call starting at or after it (a tie too: times cut to ms)
        while q < n_timed and key[tools[q]] <= start:
            q += 1
        if q == p:
            added = 0
        elif not (added and old):  # tools that fed the first call or a shrunk one add nothing measurable
            for t in tools[p:q]:
                out[t] = _new_tuple(ToolContext, (0, 0.0, 0, 0, call.model))
            added = 0
            p = q
        else:
            held += added
        new = size - old  # the prompt added since the previous call: after the part already there, so never cached
        rate = rates(call)
        priced_before = priced_total
        if rate is None:
            unpriced += 1
            per_new = 0.0
        else:
            fresh, cached_rate = rate
            cached = call.cached_input_tokens
            if cached:  # the oldest part of the prompt is the cached one
                if cached > size:
                    cached = size
                cached_old = cached if cached < old else old
                cached_new = cached - old if cached > old else 0
                old_usd = cached_old * cached_rate + (old - cached_old) * fresh
                new_usd = cached_new * cached_rate + (new - cached_new) * fresh
                per_new = new_usd / new if new else 0.0
                per_old = old_usd / old if old else 0.0
                call_usd = old_usd + new_usd
                unattributed_usd += call_usd - added * per_new - (held - added) * per_old
            else:  # every token at the fresh rate
                per_new = fresh
                per_old = fresh if old else 0.0
                call_usd = size * fresh
                unattributed_usd += (size - held) * fresh
            old_total += per_old
            priced_total += 1
            input_usd += call_usd
        if added:
            base = per_new - old_total  # + old_total when its carry ends: its rate here, then the carried rate
            model = call.model
            if q - p == 1:
                active.append((tools[p], added, k, base, priced_before, model))
            else:
                feeders = tools[p:q]
                sizes = []
                for t in feeders:  # (a loop, not a comprehension: on Python 3.11 that is a function call)
                    sizes.append(result_size(tool_calls[t]))
                for t, part in zip(feeders, split(added, sizes)):
                    if part:
                        active.append((t, part, k, base, priced_before, model))
                    else:  # no part of the split
                        out[t] = _new_tuple(ToolContext, (0, 0.0, 0, 0, model))
            p = q
        unattributed += size - held
        prev_in, prev_out = size, call.output_tokens
    if active:
        carried.append((active, k, old_total, priced_total))

    attributed, attributed_usd = 0, 0.0
    for entries, last, total_then, priced_then in carried:  # in time order: the same sums whatever order spans came in
        for t, share, first, base, priced_before, model in entries:
            held_by = last - first + 1
            tokens = share * held_by
            usd = share * (base + total_then)
            attributed += tokens
            attributed_usd += usd
            out[t] = _new_tuple(ToolContext, (tokens, usd if priced_then > priced_before else None, share, held_by, model))
    return _new_tuple(ContextCost, (True, input_tokens, attributed, unattributed, input_usd, attributed_usd,
                                    unattributed_usd, tuple(out), without_usage, inner, shrinks, unpriced))


_LAST = 1 << 62  # a model call without a start time sorts after every other
_SENTINEL = _LAST + 1  # after every model call, timed or not
_new_tuple = tuple.__new__  # a NamedTuple built without its Python-level __new__ (all fields given)


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
        return catalog_rates(price)
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


def catalog_rates(price: Any) -> Rates:
    """USD per fresh and per cached input token of a catalog `ModelPrice`."""
    return price.input_per_1k / 1000, price.cached_per_1k / 1000


def true_cost(catalog_usd: float, induced_usd: float | None) -> float | None:
    """A tool call's true cost: the catalog's price of the call plus what its result cost later model calls."""
    return None if induced_usd is None else catalog_usd + induced_usd


__all__ = ["ContextCost", "EXTRA_RESULT_KEYS", "ToolContext", "catalog_rates", "context_cost", "input_rates", "result_size", "split",
           "true_cost", "unmeasured"]
