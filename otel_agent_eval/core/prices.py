"""What an LLM call cost, and who said so: the catalog, the span itself, or genai-prices' table.

Sources, first that knows wins (docs/llm-prices.md):

1. `catalog`: the catalog's `models` (per 1k tokens; a dated snapshot `gpt-4o-mini-2024-07-18` is
   priced as `gpt-4o-mini`). What the user wrote beats everything else.
2. `reported`: a cost the span carries (USD): OpenInference `llm.cost.total` (or `llm.cost.prompt` +
   `llm.cost.completion`), the proposed GenAI `gen_ai.usage.cost.amount` (with `gen_ai.usage.cost.currency`
   USD or absent), any-agent's `gen_ai.usage.input_cost` + `gen_ai.usage.output_cost`. The instrumentation
   priced the call it saw, with what it knew of it (tier, region, batch): used as reported.
3. `genai_prices`: pydantic's maintained table (the `genai-prices` package), its bundled snapshot only:
   nothing is ever fetched. A model is looked up once per (model, provider), in a bounded cache; the call
   is then priced by the model's rates at the time the call started, as `genai_prices.calc_price` does.
   Its calculation takes ~0.6 ms a call, so a flat rate card (no token tiers) is turned once into per-token
   rates by the library itself, and each call costs a few multiplications; a tiered card is priced by the
   library call by call.
4. `unpriced`: none of them knows the model; the call adds nothing to the run's cost and its model is listed.

    >>> pricer = LLMPricer(catalog.models)
    >>> usd, source = pricer.price(call)
"""
from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, NamedTuple

from ..config.catalog import ModelPrice
from . import conventions as c

logger = logging.getLogger(__name__)

CATALOG, REPORTED, GENAI_PRICES, UNPRICED = "catalog", "reported", "genai_prices", "unpriced"
PRICE_SOURCES = (CATALOG, REPORTED, GENAI_PRICES, UNPRICED)  # in the order they are tried: the label's only values
MAX_MODELS = 1_024  # (model, provider) pairs whose table lookup is kept, and rate cards turned into rates; more clear them
_MILLION = 1_000_000
_DATED_SUFFIX = re.compile(r"-\d")  # gpt-4o-mini-2024-07-18 is priced as gpt-4o-mini
# A Bedrock model id: an optional cross-region prefix, then the vendor (`us.anthropic.claude-haiku-4-5-20251001-v1:0`).
_BEDROCK_ID = re.compile(r"^(?:[a-z]{2,6}\.)?(?:anthropic|amazon|meta|mistral|cohere|ai21|deepseek|openai|qwen|writer)\.")


def price_of(models: Mapping[str, ModelPrice], model: str | None) -> ModelPrice | None:
    """The catalog price of a model, also for a dated snapshot of it (`gpt-4o-mini-2024-07-18`)."""
    if not model:
        return None
    price = models.get(model)
    if price is not None:
        return price
    base = max((m for m in models if model.startswith(m) and _DATED_SUFFIX.match(model, len(m))), key=len, default=None)
    return models[base] if base else None


def catalog_cost(price: ModelPrice, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float:
    cached = min(cached_input_tokens, input_tokens)  # fresh input at the input price, cached at its own
    return ((input_tokens - cached) / 1000 * price.input_per_1k + cached / 1000 * price.cached_per_1k
            + output_tokens / 1000 * price.output_per_1k)


def provider_of(attrs: Mapping[str, Any]) -> str | None:
    """The provider a span names for its model call (GenAI `gen_ai.provider.name` / `gen_ai.system`, OpenInference
    `llm.provider` / `llm.system`), as text, or None."""
    for key in c.PROVIDER_KEYS:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return str.__str__(value)  # an enum by its value
    return None


def reported_cost(attrs: Mapping[str, Any]) -> float | None:
    """The cost in USD a span reports for its model call, or None. Only a finite positive figure counts: an
    instrumentation that could not price a model writes 0 or nothing, and the call is priced further down."""
    if _COST_KEYS.isdisjoint(attrs):  # the common span reports no cost: one pass over its keys, in C
        return None
    total = _usd(attrs.get(c.OI_LLM_COST_TOTAL))
    if total is None:
        total = _sum(attrs, c.OI_LLM_COST_PROMPT, c.OI_LLM_COST_COMPLETION)
    if total is None and c.GEN_AI_USAGE_COST_AMOUNT in attrs:
        currency = attrs.get(c.GEN_AI_USAGE_COST_CURRENCY)
        if currency is None or (isinstance(currency, str) and currency.upper() == "USD"):
            total = _usd(attrs.get(c.GEN_AI_USAGE_COST_AMOUNT))
    if total is None:
        total = _sum(attrs, c.ANY_AGENT_INPUT_COST, c.ANY_AGENT_OUTPUT_COST)
    return total if total else None


_COST_KEYS = frozenset((c.OI_LLM_COST_TOTAL, c.OI_LLM_COST_PROMPT, c.OI_LLM_COST_COMPLETION, c.GEN_AI_USAGE_COST_AMOUNT,
                        c.ANY_AGENT_INPUT_COST, c.ANY_AGENT_OUTPUT_COST))  # every key `reported_cost` may read a figure from


def _sum(attrs: Mapping[str, Any], first: str, second: str) -> float | None:
    a, b = _usd(attrs.get(first)), _usd(attrs.get(second))
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def _usd(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


class PriceTable:
    """genai-prices' bundled table, imported on first use (~0.6 s, once) and never updated from the network here.

    `UpdatePrices` is genai-prices' opt-in background download; this project never starts it. An app that starts
    it itself (Logfire, pydantic-ai do on request) makes genai-prices use the fetched table, here too.
    """

    def __init__(self) -> None:
        self._found: dict[tuple[str, str | None], Any] = {}  # (model, provider) -> (ModelInfo, Provider) or None
        self._rates: dict[int, _Rates] = {}  # id(genai-prices ModelPrice) -> its per-token rates (the card is kept in them)
        self._lock = threading.Lock()
        self._library: Any = None  # the genai_prices module, False when it cannot be imported

    def cost(self, model: str, provider: str | None, input_tokens: int, cached_input_tokens: int, output_tokens: int,
             start_ns: int | None = None) -> float | None:
        """USD of one call by the table, or None when the table does not know the model."""
        key = (model, provider)
        found = self._found.get(key, self)
        if found is self:
            found = self._lookup(model, provider)
            with self._lock:
                if len(self._found) >= MAX_MODELS:
                    self._found.clear()
                self._found[key] = found
        if found is None:
            return None
        info, provider_info = found
        cached = min(cached_input_tokens, input_tokens)
        when = _when(start_ns) or datetime.now(timezone.utc)
        try:
            card = info.get_prices(when)  # the rate card in force then: one of the model's few, the same object each time
            rates = self._rates.get(id(card))
            if rates is None or rates.card is not card:
                rates = self._rates_of(card)
            if rates.base is not None:  # flat: affine in the token counts, exactly as the library sums its units
                return float(rates.base + (input_tokens - cached) * rates.fresh + cached * rates.cached + output_tokens * rates.output)
            usage = self._library.Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output_tokens)
            return float(info.calc_price(usage, provider_info, genai_request_timestamp=when).total_price)
        except Exception as exc:  # noqa: BLE001 - the table's own checks (a usage it refuses): this call is unpriced
            logger.debug("otel-agent-eval: genai-prices could not price %r: %s", model, exc)
            return None

    def _rates_of(self, card: Any) -> _Rates:
        """Per-token rates of a flat card, by the library's own calculation of a million tokens of each kind
        (base: what no token costs, e.g. a per-request fee); `base=None` when a price depends on a token tier."""
        library = self._library
        if any(isinstance(price, library.types.TieredPrices) for price in vars(card).values()):
            rates = _Rates(card, None, Decimal(0), Decimal(0), Decimal(0))
        else:
            def total(**tokens: int) -> Decimal:
                return card.calc_price(library.Usage(**tokens))["total_price"]

            base = total(input_tokens=0, output_tokens=0)
            rates = _Rates(card, base, (total(input_tokens=_MILLION, output_tokens=0) - base) / _MILLION,
                           (total(input_tokens=_MILLION, cache_read_tokens=_MILLION, output_tokens=0) - base) / _MILLION,
                           (total(input_tokens=0, output_tokens=_MILLION) - base) / _MILLION)
        with self._lock:
            if len(self._rates) >= MAX_MODELS:
                self._rates.clear()
            self._rates[id(card)] = rates
        return rates

    def _lookup(self, model: str, provider: str | None) -> Any:
        """(ModelInfo, Provider) by the table's own matching (`calc_price`'s), trying the provider the span names,
        then the model alone, then a `vendor/model` or Bedrock id's vendor: None if none matches."""
        library = self._import()
        if library is None:
            return None
        attempts: list[str | None] = [provider] if provider else []
        attempts.append(None)
        if "/" in model:
            attempts.append("litellm")  # genai-prices reads `mistral/mistral-small-latest` as provider/model then
        if _BEDROCK_ID.match(model):
            attempts.append("aws")
        zero = library.Usage(input_tokens=0, output_tokens=0)
        for attempt in attempts:
            try:
                result = library.calc_price(zero, model, provider_id=attempt)
            except LookupError:
                continue
            except Exception as exc:  # noqa: BLE001 - a name the table chokes on is a model it does not know
                logger.debug("otel-agent-eval: genai-prices lookup of %r failed: %s", model, exc)
                continue
            return result.model, result.provider
        return None

    def _import(self) -> Any:
        if self._library is None:
            try:
                import genai_prices
            except Exception as exc:  # noqa: BLE001 - not installed, or broken: the catalog and reported costs still price
                logger.warning("otel-agent-eval: genai-prices cannot be imported (%s: %s); models the catalog does not "
                               "price and spans do not report stay unpriced (pip install genai-prices)", type(exc).__name__, exc)
                self._library = False
            else:
                self._library = genai_prices
        return self._library or None


class _Rates(NamedTuple):
    card: Any  # the genai-prices ModelPrice these come from (kept alive, so its id is not reused)
    base: Decimal | None  # USD of a call without tokens; None: a tiered card, priced call by call by the library
    fresh: Decimal  # USD per uncached input token
    cached: Decimal  # USD per input token read from the cache
    output: Decimal  # USD per output token


def _when(start_ns: int | None) -> datetime | None:
    if type(start_ns) is not int or start_ns <= 0:
        return None  # genai-prices prices at the current time then
    try:
        return datetime.fromtimestamp(start_ns / 1e9, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


TABLE = PriceTable()  # one per process: what it caches does not depend on the catalog


class LLMPricer:
    """Prices LLM calls by the sources in order: the catalog's `models`, the span's reported cost, genai-prices."""

    def __init__(self, models: Mapping[str, ModelPrice], table: PriceTable | None = TABLE) -> None:
        self.models = models
        self.table = table

    def price(self, call: Any) -> tuple[float, str]:
        """(USD, source) of one `LLMCall`; (0.0, UNPRICED) when no source knows its model."""
        price = price_of(self.models, call.model)
        if price is not None:
            return catalog_cost(price, call.input_tokens, call.cached_input_tokens, call.output_tokens), CATALOG
        if call.reported_cost_usd is not None:
            return call.reported_cost_usd, REPORTED
        if self.table is not None and call.model:
            usd = self.table.cost(call.model, call.provider, call.input_tokens, call.cached_input_tokens,
                                  call.output_tokens, call.start_ns)
            if usd is not None:
                return usd, GENAI_PRICES
        return 0.0, UNPRICED
