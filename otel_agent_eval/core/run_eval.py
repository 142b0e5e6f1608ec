"""Run-level evaluation, deterministic: did the task get done, how well were tools called, at what cost.

The metrics are those of the agent-evaluation tutorial (seed 002): task completion, tool call
accuracy (arguments valid against the tool's JSON Schema, call order), spurious and redundant
calls, the call budget, tool correctness with deepeval's semantics, cost per run (tools from
the catalog; LLM calls priced by the catalog's `models`, else by the cost the span reports, else by
genai-prices' table: core/prices.py) and a 0-100 health score with the tutorial's weights, renormalised over the parts that are known.

What is unknown stays unknown: a call whose arguments were not captured is neither valid nor
invalid (left out of argument validity, listed in `arguments_not_captured`) and repeats no other
call, nor loops with it. A **loop** is LOOP_CALLS (3) or more consecutive calls of one tool with the same
captured arguments (`RunEvaluation.loops`, one tool name per loop). Calls of the catalog's `ignore_tools` (framework-internal, e.g. smolagents' `final_answer`)
are no part of the run's evaluation.

Calls are compared by their catalog tool (an alias or qualified name is its tool; an unknown name is
itself) everywhere: redundancy, recovery from errors, loops, spurious calls and tool correctness. The
lists of the evaluation keep the names as called. A run closed before its root span ended (TTL,
capacity, shutdown) has no root status: it is not completed.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..config.catalog import Catalog, TaskRoute, Tool
from .context_cost import ContextCost, Rates, catalog_rates, context_cost, input_rates
from .correctness import tool_correctness_score
from .prices import CATALOG, UNPRICED, LLMPricer, catalog_cost, price_of
from .runs import AgentRun, RunEvaluation
from .schema_check import compile_check

logger = logging.getLogger(__name__)

HEALTH_WEIGHTS = {"completion": 0.30, "tool_accuracy": 0.25, "hallucination_free": 0.25, "latency": 0.10, "cost": 0.10}
_W_COMPLETION, _W_ACCURACY, _W_HALLUCINATION, _W_LATENCY, _W_COST = HEALTH_WEIGHTS.values()  # once per run: no look-ups
LATENCY_AT_ZERO_S = 10.0  # tutorial: a 10 s run scores 0 on latency
COST_AT_ZERO_USD = 0.10  # tutorial: a $0.10 run scores 0 on cost
_CACHE_LIMIT = 4096  # compiled schemas, correctness results: cleared when full


LOOP_CALLS = 3  # this many consecutive calls of one tool with the same arguments are a loop
_UNUSABLE = object()  # a schema jsonschema could not apply: the call is not checked
_MAX_KEPT_ARGUMENTS = 1024  # characters of repr(arguments) up to which a refusal is remembered
_NOT_LOOKED_UP = object()  # a model not looked up in the catalog yet
_SPAN_SCHEMA = object()  # no catalog schema for this call: the span's own, if any, decides


class _Shape(NamedTuple):
    order: float | None  # ordered tool correctness against the route's expected tools
    correctness: float | None
    spurious: tuple[str, ...]
    validators: tuple[Any, ...]  # per call: the catalog tool's compiled check, or _SPAN_SCHEMA
    canonical: tuple[str, ...]  # per call: its catalog tool's name, or the name as called when unknown
    repeated: frozenset[str]  # catalog tools called more than once: the only ones a call can repeat
    streaks: tuple[tuple[int, int], ...]  # [start, end) of LOOP_CALLS+ consecutive calls of one tool: where loops can be


class RunEvaluator:
    """Evaluates finished runs against a catalog; schema validators are compiled once per tool.

    `validator(run) -> bool` adds the user's own completion check; `hallucination(run) -> float | None`
    supplies a hallucination-free score (0-1) when the user has one (e.g. from an LLM judge offline).
    """

    def __init__(self, catalog: Catalog, *, validator: Callable[[AgentRun], bool] | None = None,
                 hallucination: Callable[[AgentRun], float | None] | None = None) -> None:
        self.catalog = catalog
        self.validator = validator
        self.hallucination = hallucination
        self._validators: dict[int, tuple[Any, Callable[[dict[str, Any]], bool] | None]] = {}
        self._invalid: dict[tuple[int, str], Any] = {}  # (validator id, repr of arguments) -> why they fail
        self._shapes: dict[tuple[tuple[str, ...], str | None, str | None], _Shape] = {}
        self._pricer = LLMPricer(catalog.models)
        self._model_prices: dict[str | None, Any] = {}  # model -> its catalog price or None: found once per catalog
        self._model_rates: dict[str | None, Rates | None] = {}  # model -> its catalog input rates or None: the same
        self._context_failed = False  # the context cost raised once (logged once; the runs are evaluated without it)

    def evaluate(self, run: AgentRun, route: TaskRoute | None) -> RunEvaluation:
        ignore = self.catalog.ignore_tools
        calls = [r for r in run.tool_calls if r.name not in ignore] if ignore else run.tool_calls  # only read
        shape = self._shape(tuple([r.name for r in calls]), route, run.scores)
        completed, why = self._completion(run, calls, shape.canonical)
        validity, invalid, not_captured = self._argument_validity(calls, shape.validators)
        spurious, redundant = shape.spurious, _redundant(calls, shape.canonical, shape.repeated) if shape.repeated else ()
        loops = _loops(calls, shape.streaks) if shape.streaks else ()
        precision = 1 - min(len(calls), len(spurious) + len(redundant)) / len(calls) if calls else None
        known = [v for v in (validity, shape.order, precision) if v is not None]
        accuracy = sum(known) / len(known) if known else None
        llm_cost, unpriced, sources = self._llm_cost(run) if run.llm_calls else (0.0, (), ())
        tool_cost = 0.0
        for score in run.scores:
            tool_cost += score.static.cost_usd
        hallucination_free = self._hallucination_free(run) if self.hallucination is not None else None
        duration = run.duration_s
        health = _health(completed, accuracy, hallucination_free, duration, tool_cost + llm_cost)
        return RunEvaluation(  # positional, in field order: keywords cost a third more, once per run
            completed, why, accuracy, validity, shape.order, precision, invalid, spurious, redundant,
            bool(route and route.max_calls and len(calls) > route.max_calls), shape.correctness, tool_cost, llm_cost,
            unpriced, duration, hallucination_free, health, not_captured, loops, sources, self.context_cost(run),
        )

    def context_cost(self, run: AgentRun) -> ContextCost:
        """What each tool call's result cost the run's later model calls (core/context_cost.py), priced as the
        run's LLM cost is; None for a run without model calls (nothing to measure, and nothing added to its root)."""
        if not run.llm_calls:
            return None
        try:
            return context_cost(run.llm_calls, run.tool_calls, self._input_rates)
        except Exception as exc:  # noqa: BLE001 - the run's evaluation stands without it
            if not self._context_failed:
                self._context_failed = True
                logger.warning("otel-agent-eval: the context cost of a run could not be measured (%s: %s); its runs are "
                               "evaluated without it (logged once)", type(exc).__name__, exc)
            return None

    def _input_rates(self, call: Any) -> Rates | None:
        """`input_rates`, with a catalog model's rates found once (a run's calls are mostly of one or two models)."""
        rate = self._model_rates.get(call.model, _NOT_LOOKED_UP)
        if rate is _NOT_LOOKED_UP:
            self._catalog_price(call.model)
            rate = self._model_rates[call.model]
        if rate is not None and call.input_tokens > 0:
            return rate
        return input_rates(call, self._catalog_price, self._pricer.table)

    def _catalog_price(self, model: str | None) -> Any:
        """The catalog's price of a model, or None; price_of scans the catalog's models for a dated snapshot:
        once per model (and its input rates with it)."""
        prices = self._model_prices
        found = prices.get(model, _NOT_LOOKED_UP)
        if found is _NOT_LOOKED_UP:
            if len(prices) >= _CACHE_LIMIT:
                prices.clear()
                self._model_rates.clear()
            found = prices[model] = price_of(self.catalog.models, model)
            self._model_rates[model] = None if found is None else catalog_rates(found)
        return found

    def _shape(self, names: tuple[str, ...], route: TaskRoute | None, scores: list[Any]) -> _Shape:
        """What a run's evaluation takes from its tool names alone: runs of one agent repeat the
        same sequences, so each distinct (names, route, optimal tool) is worked out once."""
        optimal = None
        if route is not None and (route.expected_tools or route.acceptable_tools):  # spurious calls are counted
            # the route's optimal tool, or the one the scorer worked out for it: a call scored optimal is never spurious
            optimal = route.optimal_tool or next((s.static.optimal_tool for s in scores if s.static.task == route.name), None)
        key = (names, route.name if route is not None else None, optimal)
        shape = self._shapes.get(key)
        if shape is None:
            tools = [self.catalog.tool(name) for name in names]
            canonical = tuple(t.name if t is not None else n for t, n in zip(tools, names))
            expected = route.expected_tools if route else ()
            order = correctness = None
            if expected:
                called, wanted = [_Named(n) for n in canonical], [_Named(n) for n in expected]
                order = tool_correctness_score(called, wanted, consider_ordering=True)
                correctness = tool_correctness_score(called, wanted)
            spurious: tuple[str, ...] = ()
            if route is not None and (route.expected_tools or route.acceptable_tools):
                allowed = {*route.expected_tools, *route.acceptable_tools, optimal}
                spurious = tuple(n for n, c in zip(names, canonical) if c not in allowed)
            validators = tuple(self._catalog_validator(t) for t in tools)
            repeated = frozenset(n for n in canonical if canonical.count(n) > 1)
            if len(self._shapes) >= _CACHE_LIMIT:
                self._shapes.clear()
            shape = self._shapes[key] = _Shape(order, correctness, spurious, validators, canonical, repeated, _streaks(canonical))
        return shape

    def _completion(self, run: AgentRun, calls: list[Any], canonical: tuple[str, ...]) -> tuple[bool, str]:
        if run.closed_by != "end":  # closed by TTL, capacity or shutdown: the root never ended, it has no status
            return False, f"closed by {run.closed_by} before its root span ended"
        if run.status == "error":
            return False, f"the run ended with an error: {run.error}"
        failed = [r for r in calls if r.error is not None]
        unhandled = _unhandled_errors(calls, canonical) if failed else ()
        if unhandled:
            return False, f"tool errors not recovered by a later successful call: {', '.join(unhandled)}"
        if self.validator is not None:
            try:
                if not self.validator(run):
                    return False, "the completion validator rejected the run"
            except Exception as exc:  # noqa: BLE001 - a user hook must not break scoring
                logger.warning("otel-agent-eval: completion validator raised %s: %s; run counted as failed", type(exc).__name__, exc)
                return False, f"the completion validator raised {type(exc).__name__}"
        return True, "root span OK and every tool error recovered" if failed else "root span OK, no tool errors"

    def _argument_validity(self, calls: list[Any], validators: tuple[Any, ...]) -> tuple[float | None, tuple[str, ...], tuple[str, ...]]:
        """(share of checked calls with valid arguments, "tool: why" of the invalid ones, tools of the
        calls whose arguments were not captured: unknown, so not checked). `validators[i]` is the
        catalog's for call i, `_SPAN_SCHEMA` where the span's own schema decides."""
        checked, invalid, not_captured = 0, [], []
        for record, compiled in zip(calls, validators):
            arguments = record.arguments
            if arguments is None:
                not_captured.append(record.name)
                continue
            if compiled is _SPAN_SCHEMA:
                compiled = self._span_validator(record.parameters_schema)
            if compiled is None:
                continue
            validator, fast = compiled
            if len(arguments) == 1 and "input" in arguments:  # plain text input: maybe the schema's one argument
                arguments = _as_schema_expects(arguments, validator.schema)
            if fast is not None and fast(arguments):  # valid: the common case, without jsonschema
                checked += 1
                continue
            why = self._why_invalid(validator, arguments)
            if why is _UNUSABLE:
                continue
            checked += 1
            if why is not None:
                invalid.append(f"{record.name}: {why}")
        return ((checked - len(invalid)) / checked if checked else None), tuple(invalid), tuple(not_captured)

    def _why_invalid(self, validator: Any, arguments: dict[str, Any]) -> Any:
        """jsonschema's first error for arguments the fast check refused ("path: message"), None if they are
        valid after all, `_UNUSABLE` if the schema cannot be used. Agents repeat their invalid calls, and
        jsonschema's error path is ~20 us: results are kept per (schema, arguments) for short arguments."""
        text = repr(arguments)
        key = (id(validator), text) if len(text) <= _MAX_KEPT_ARGUMENTS else None
        if key is not None and key in self._invalid:
            return self._invalid[key]
        try:
            error = next(iter(validator.iter_errors(arguments)), None)
        except Exception:  # noqa: BLE001 - a span's own schema can be unusable (bad $ref, recursion)
            why: Any = _UNUSABLE
        else:
            why = None
            if error is not None:
                where = "/".join(map(str, error.absolute_path))
                why = f"{where + ': ' if where else ''}{error.message}"
        if key is not None:
            if len(self._invalid) >= _CACHE_LIMIT:
                self._invalid.clear()
            self._invalid[key] = why
        return why

    def _catalog_validator(self, tool: Tool | None) -> Any:
        """The compiled check of a catalog tool's parameters; `_SPAN_SCHEMA` when it has none (the span's own may)."""
        if tool is None or tool.parameters is None:
            return _SPAN_SCHEMA
        return self._compiled(id(tool.parameters), tool.parameters)

    def _span_validator(self, schema: Any) -> Any:
        if not isinstance(schema, Mapping):
            return None
        try:
            key = hash(json.dumps(schema, sort_keys=True, default=str))
        except (ValueError, TypeError, RecursionError):
            return None
        return self._compiled(key, schema)

    def _compiled(self, key: int, schema: Mapping[str, Any]) -> Any:
        validator = self._validators.get(key)
        if validator is None:
            from jsonschema import Draft202012Validator
            from referencing import Registry

            try:
                Draft202012Validator.check_schema(schema)
            except Exception:  # noqa: BLE001 - a span's own schema may be anything; the catalog's were checked at load
                return None
            if len(self._validators) > _CACHE_LIMIT:
                self._validators.clear()
                self._invalid.clear()  # keyed by validator id: an id may be reused once a validator is gone
            # An empty registry: a $ref is resolved inside the schema or not at all, never fetched
            # from a host that span content names.
            validator = self._validators[key] = (Draft202012Validator(schema, registry=Registry()), compile_check(schema))
        return validator

    def _llm_cost(self, run: AgentRun) -> tuple[float, tuple[str, ...], tuple[str, ...]]:
        """(USD, models of the calls no source prices, where each call's price came from)."""
        total, unpriced, sources = 0.0, [], []
        price, catalog_price = self._pricer.price, self._catalog_price
        for call in run.llm_calls:
            found = catalog_price(call.model)
            if found is not None:  # as LLMPricer.price prices it, without the look-up
                usd, source = catalog_cost(found, call.input_tokens, call.cached_input_tokens, call.output_tokens), CATALOG
            else:
                usd, source = price(call)
            total += usd
            sources.append(source)
            if source == UNPRICED:
                unpriced.append(call.model or "unknown")
        return total, tuple(unpriced), tuple(sources)

    def _hallucination_free(self, run: AgentRun) -> float | None:
        if self.hallucination is None:
            return None
        try:
            value = self.hallucination(run)
        except Exception as exc:  # noqa: BLE001
            logger.warning("otel-agent-eval: hallucination hook raised %s: %s", type(exc).__name__, exc)
            return None
        return None if value is None else min(1.0, max(0.0, float(value)))


def _health(completed: bool, accuracy: float | None, hallucination_free: float | None, duration: float | None,
            cost: float) -> float:
    """0-100: the tutorial's weighted parts (HEALTH_WEIGHTS), renormalised over those that are known
    (summed in the order of HEALTH_WEIGHTS, so the figure is the same to the last bit everywhere)."""
    total, weight = _W_COMPLETION * (1.0 if completed else 0.0), _W_COMPLETION
    if accuracy is not None:
        total, weight = total + _W_ACCURACY * accuracy, weight + _W_ACCURACY
    if hallucination_free is not None:
        total, weight = total + _W_HALLUCINATION * hallucination_free, weight + _W_HALLUCINATION
    if duration is not None:
        latency = 1 - duration / LATENCY_AT_ZERO_S
        total, weight = total + _W_LATENCY * (latency if latency > 0.0 else 0.0), weight + _W_LATENCY  # max(0.0, ...)
    cheap = 1 - cost / COST_AT_ZERO_USD
    total, weight = total + _W_COST * (cheap if cheap > 0.0 else 0.0), weight + _W_COST
    return 100 * total / weight


def _as_schema_expects(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Plain-text input (OpenInference records a one-argument tool's input as bare text, read as
    {"input": text}, the only arguments this is called for) is the value of the schema's single argument."""
    properties = schema.get("properties") or {}
    if "input" in properties:
        return arguments
    names = list(schema.get("required") or properties)
    return {names[0]: arguments["input"]} if len(names) == 1 else arguments


def _unhandled_errors(calls: list[Any], canonical: tuple[str, ...]) -> list[str]:
    """Tools whose last call in the run failed (an error followed by a success of the same catalog tool,
    by any of its names, is handled), named as that last call named them."""
    last: dict[str, Any] = {}
    for record, tool in zip(calls, canonical):
        last[tool] = record
    return [record.name for record in last.values() if record.error is not None]


# json.dumps builds an encoder per call when given options; this one is built once (the same text)
_canonical = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":")).encode


def _redundant(calls: list[Any], canonical: tuple[str, ...], repeated: frozenset[str]) -> tuple[str, ...]:
    """Calls repeating an earlier successful call of the same catalog tool (`canonical[i]`: an alias is its
    tool) with the same arguments (a retry after an error is not), named as called. Calls whose arguments
    were not captured repeat nothing: unknown arguments are not the same arguments. Only tools in
    `repeated` (called more than once) are looked at: the others skip the canonical JSON."""
    succeeded: set[tuple[str, str]] = set()
    repeats = []
    for record, tool in zip(calls, canonical):
        if tool not in repeated:
            continue
        arguments = record.arguments
        if arguments is None:
            continue
        try:
            key = (tool, _canonical(arguments))
        except (ValueError, TypeError, RecursionError):
            continue
        if key in succeeded:
            repeats.append(record.name)
        if record.error is None:
            succeeded.add(key)
    return tuple(repeats)


def _streaks(names: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """[start, end) of each run of at least LOOP_CALLS consecutive calls of the same tool."""
    out, start = [], 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            if i - start >= LOOP_CALLS:
                out.append((start, i))
            start = i
    return tuple(out)


def _loops(calls: list[Any], streaks: tuple[tuple[int, int], ...]) -> tuple[str, ...]:
    """One tool name per loop: LOOP_CALLS or more consecutive calls of a tool with the same arguments, failed
    or not (a retry loop is a loop too). A call whose arguments were not captured breaks a loop: unknown
    arguments are never the same arguments."""
    loops = []
    for start, end in streaks:
        previous, length = None, 0
        for record in calls[start:end]:
            arguments = record.arguments
            key = None
            if arguments is not None:
                try:
                    key = _canonical(arguments)
                except (ValueError, TypeError, RecursionError):
                    key = None
            if key is not None and key == previous:
                length += 1
                if length == LOOP_CALLS:
                    loops.append(record.name)
            else:
                length = 1 if key is not None else 0
            previous = key
    return tuple(loops)


class _Named:
    """The least a tool call needs to be compared by name (deepeval's default correctness mode)."""

    __slots__ = ("name",)
    input_parameters = None
    output = None

    def __init__(self, name: str) -> None:
        self.name = name
