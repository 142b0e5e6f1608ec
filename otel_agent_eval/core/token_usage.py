"""Token counts of a model call, read under every name the mainstream instrumentations write or wrote since 2024.

One table (`TOKEN_NAMES`): each attribute name, what it counts, whether that count is part of its parent count
(cached and cache-written tokens of the input, reasoning tokens of the output), and who writes it, read at the
source. `token_usage(attrs)` turns a span's attributes into one shape: the whole prompt, the part of it read from
the provider's cache, the part written to it, the output (reasoning included) and the reasoning tokens.

    >>> token_usage({"gen_ai.usage.prompt_tokens": 1000, "gen_ai.usage.completion_tokens": 50,
    ...              "gen_ai.usage.cache_read_input_tokens": 800})
    TokenUsage(input_tokens=1000, cached_input_tokens=800, cache_creation_input_tokens=0, output_tokens=50, reasoning_tokens=0)

What a name includes differs by writer (docs/frameworks.md, "Token counts we read"): the GenAI conventions ask
`gen_ai.usage.input_tokens` to include cached tokens, OpenAI's `prompt_tokens` do, and OpenLLMetry and OpenInference
add Anthropic's disjoint `input_tokens`, `cache_creation_input_tokens` and `cache_read_input_tokens` up into one
prompt count; strands-agents writes Bedrock's input as it comes, without the cache. An input that
reads smaller than its own cached parts, or a total that adds the cached parts on top of the input, is such a
disjoint count, and the whole prompt is their sum. Likewise reasoning tokens are part of the output count except
under google-adk's `gen_ai.usage.experimental.reasoning_tokens` (ADK before 2.3 wrote Gemini's candidate tokens,
without the thoughts, as the output).

This runs for every model-call span (`token_counts`, a plain tuple): the common span (input and output, no cache or
reasoning figures) is read with a few dict look-ups and one pass over its keys in C.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

MAX_TOKENS = 10**12  # more tokens than this in one call is not a count

INPUT = "input"  # the prompt (whole, unless the span says otherwise: see the module docstring)
UNCACHED_INPUT = "uncached_input"  # the part of the prompt neither read from nor written to the cache
CACHE_READ = "cache_read"  # the part of the prompt served from the provider's cache (priced apart)
CACHE_CREATION = "cache_creation"  # the part of the prompt written to the provider's cache
OUTPUT = "output"  # the completion, reasoning included
REASONING = "reasoning"  # the part of the output spent reasoning
TOTAL = "total"  # prompt and completion: read only to tell a disjoint input or output from an inclusive one
KINDS = (INPUT, UNCACHED_INPUT, CACHE_READ, CACHE_CREATION, OUTPUT, REASONING, TOTAL)


class TokenName(NamedTuple):
    """One attribute name of a token count."""

    name: str
    kind: str  # one of KINDS
    writers: str  # who writes or wrote it (read at the source)
    included: bool = True  # for cache and reasoning counts: part of the input (output) count, as its writers mean it


# In the order they are read: for each kind, the first name the span carries wins.
TOKEN_NAMES: tuple[TokenName, ...] = (
    # -- the prompt
    TokenName("gen_ai.usage.input_tokens", INPUT,
              "GenAI conventions; OpenLLMetry 0.48+; pydantic-ai, strands-agents, google-adk, any-agent, "
              "Microsoft agent-framework, the Vercel AI SDK's doGenerate/doStream spans and ai 7"),
    TokenName("gen_ai.usage.prompt_tokens", INPUT,
              "GenAI conventions' older name (deprecated for input_tokens); OpenLLMetry up to 0.47 "
              "(`LLM_USAGE_PROMPT_TOKENS`); strands-agents (beside input_tokens)"),
    TokenName("llm.token_count.prompt", INPUT, "OpenInference (Anthropic's three input counts summed)"),
    TokenName("ai.usage.inputTokens", INPUT, "Vercel AI SDK 5+ (6+: cache included; 5 with Anthropic: without the cache)"),
    TokenName("ai.usage.promptTokens", INPUT, "Vercel AI SDK up to 4"),
    TokenName("ai.usage.inputTokenDetails.noCacheTokens", UNCACHED_INPUT, "Vercel AI SDK 6+"),
    # -- cached input: read from the cache
    TokenName("gen_ai.usage.cache_read.input_tokens", CACHE_READ,
              "GenAI conventions; OpenLLMetry 0.55+; pydantic-ai, agent-framework, google-adk 2.3+"),
    TokenName("gen_ai.usage.cache_read_input_tokens", CACHE_READ,
              "OpenLLMetry up to 0.54 (`LLM_USAGE_CACHE_READ_INPUT_TOKENS`); strands-agents"),
    TokenName("llm.token_count.prompt_details.cache_read", CACHE_READ, "OpenInference"),
    TokenName("ai.usage.inputTokenDetails.cacheReadTokens", CACHE_READ, "Vercel AI SDK 6+"),
    TokenName("ai.usage.cachedInputTokens", CACHE_READ, "Vercel AI SDK 5+"),
    TokenName("gen_ai.usage.details.cache_read_tokens", CACHE_READ, "pydantic-ai (kept beside the GenAI name)"),
    # -- cached input: written to the cache
    TokenName("gen_ai.usage.cache_creation.input_tokens", CACHE_CREATION,
              "GenAI conventions; OpenLLMetry 0.55+; pydantic-ai, agent-framework"),
    TokenName("gen_ai.usage.cache_creation_input_tokens", CACHE_CREATION,
              "OpenLLMetry up to 0.54 (`LLM_USAGE_CACHE_CREATION_INPUT_TOKENS`)"),
    TokenName("gen_ai.usage.cache_write_input_tokens", CACHE_CREATION, "strands-agents (Bedrock's `cacheWriteInputTokens`)"),
    TokenName("llm.token_count.prompt_details.cache_write", CACHE_CREATION, "OpenInference"),
    TokenName("ai.usage.inputTokenDetails.cacheWriteTokens", CACHE_CREATION, "Vercel AI SDK 6+"),
    TokenName("gen_ai.usage.details.cache_write_tokens", CACHE_CREATION, "pydantic-ai (kept beside the GenAI name)"),
    # -- the completion
    TokenName("gen_ai.usage.output_tokens", OUTPUT, "GenAI conventions and the writers of gen_ai.usage.input_tokens"),
    TokenName("gen_ai.usage.completion_tokens", OUTPUT,
              "GenAI conventions' older name (deprecated for output_tokens); OpenLLMetry up to 0.47; strands-agents "
              "(beside output_tokens)"),
    TokenName("llm.token_count.completion", OUTPUT, "OpenInference"),
    TokenName("ai.usage.outputTokens", OUTPUT, "Vercel AI SDK 5+"),
    TokenName("ai.usage.completionTokens", OUTPUT, "Vercel AI SDK up to 4"),
    # -- reasoning, part of the output
    TokenName("gen_ai.usage.reasoning.output_tokens", REASONING, "GenAI conventions; agent-framework; google-adk 2.3+"),
    TokenName("gen_ai.usage.reasoning_tokens", REASONING, "OpenLLMetry up to 0.47 and 0.55+"),
    TokenName("llm.usage.reasoning_tokens", REASONING, "OpenLLMetry 0.51 to 0.54 (`LLM_USAGE_REASONING_TOKENS`)"),
    TokenName("llm.token_count.completion_details.reasoning", REASONING, "OpenInference"),
    TokenName("ai.usage.outputTokenDetails.reasoningTokens", REASONING, "Vercel AI SDK 6+"),
    TokenName("ai.usage.reasoningTokens", REASONING, "Vercel AI SDK 5+"),
    TokenName("gen_ai.usage.details.reasoning_tokens", REASONING, "pydantic-ai (OpenAI's reasoning tokens)"),
    TokenName("gen_ai.usage.details.thinking_tokens", REASONING, "pydantic-ai (Anthropic's thinking tokens)"),
    TokenName("gen_ai.usage.experimental.reasoning_tokens", REASONING,
              "google-adk before 2.3 (Gemini's thoughts; its output_tokens are the candidates alone)", included=False),
    # -- totals
    TokenName("gen_ai.usage.total_tokens", TOTAL, "OpenLLMetry 0.54+; strands-agents"),
    TokenName("llm.usage.total_tokens", TOTAL, "OpenLLMetry (`LLM_USAGE_TOTAL_TOKENS`)"),
    TokenName("llm.token_count.total", TOTAL, "OpenInference"),
    TokenName("ai.usage.totalTokens", TOTAL, "Vercel AI SDK 5+"),
)

BY_NAME: Mapping[str, TokenName] = {entry.name: entry for entry in TOKEN_NAMES}
_NAMES_OF = {kind: tuple(entry.name for entry in TOKEN_NAMES if entry.kind == kind) for kind in KINDS}
INPUT_NAMES, OUTPUT_NAMES = _NAMES_OF[INPUT], _NAMES_OF[OUTPUT]
INPUT_TOKENS, OUTPUT_TOKENS = INPUT_NAMES[0], OUTPUT_NAMES[0]  # gen_ai.usage.input_tokens / output_tokens: the common span
_OTHER_INPUT_NAMES, _OTHER_OUTPUT_NAMES = INPUT_NAMES[1:], OUTPUT_NAMES[1:]
# The names that send a span to the detailed reading: cache and reasoning figures, and the Vercel AI SDK's uncached part.
# A total alone does not (it only tells a disjoint count from an inclusive one, and matters only beside those).
_DETAIL_NAMES = frozenset(entry.name for entry in TOKEN_NAMES if entry.kind not in (INPUT, OUTPUT))
_TRIGGER_NAMES = frozenset(entry.name for entry in TOKEN_NAMES if entry.kind not in (INPUT, OUTPUT, TOTAL))
_RANKED = {entry.name: (entry.kind, rank) for rank, entry in enumerate(TOKEN_NAMES)}  # name -> (kind, its place)
_EXCLUDED_REASONING = frozenset(entry.name for entry in TOKEN_NAMES if entry.kind == REASONING and not entry.included)


class TokenUsage(NamedTuple):
    """A model call's tokens in one shape: `input_tokens` is the whole prompt (its cached parts included),
    `output_tokens` the whole completion (its reasoning included)."""

    input_tokens: int
    cached_input_tokens: int  # of input_tokens, read from the provider's cache
    cache_creation_input_tokens: int  # of input_tokens, written to the provider's cache
    output_tokens: int
    reasoning_tokens: int  # of output_tokens


_new_tuple = tuple.__new__


def token_usage(attrs: Mapping[str, Any]) -> TokenUsage:
    """The token counts these attributes carry, in one shape (zeros for what is missing or unreadable)."""
    return _new_tuple(TokenUsage, token_counts(attrs))


def token_counts(attrs: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """`token_usage` as a plain tuple (input, cached, created, output, reasoning): what `llm_call_of` reads for every
    model-call span, without building the named tuple."""
    get = attrs.get
    tokens_in = get(INPUT_TOKENS)
    if tokens_in is None:
        for name in _OTHER_INPUT_NAMES:  # (inline: a helper's call would cost more than these look-ups)
            tokens_in = get(name)
            if tokens_in is not None:
                break
    tokens_out = get(OUTPUT_TOKENS)
    if tokens_out is None:
        for name in _OTHER_OUTPUT_NAMES:
            tokens_out = get(name)
            if tokens_out is not None:
                break
    tokens_in = tokens_in if type(tokens_in) is int and 0 < tokens_in <= MAX_TOKENS else tokens(tokens_in)
    tokens_out = tokens_out if type(tokens_out) is int and 0 < tokens_out <= MAX_TOKENS else tokens(tokens_out)
    if _TRIGGER_NAMES.isdisjoint(attrs):  # the common span: input and output (and a total) alone
        return (tokens_in, 0, 0, tokens_out, 0) if tokens_in or tokens_out else _NO_TOKENS
    return _detailed(attrs, tokens_in, tokens_out)


_NO_TOKENS = (0, 0, 0, 0, 0)


def _detailed(attrs: Mapping[str, Any], tokens_in: int, tokens_out: int) -> tuple[int, int, int, int, int]:
    """The counts of a span that also carries cache or reasoning figures."""
    cached = created = reasoning = total = uncached = 0
    reasoning_name = None
    ranks: dict[str, int] = {}  # kind -> the place in the table of the name read for it
    for name in _DETAIL_NAMES.intersection(attrs):  # the few the span carries
        kind, rank = _RANKED[name]
        if ranks.get(kind, rank) < rank:
            continue  # a name of the same kind that comes first in the table was read
        ranks[kind] = rank
        value = attrs[name]
        value = value if type(value) is int and 0 < value <= MAX_TOKENS else tokens(value)
        if kind == CACHE_READ:
            cached = value
        elif kind == CACHE_CREATION:
            created = value
        elif kind == REASONING:
            reasoning, reasoning_name = value, name
        elif kind == TOTAL:
            total = value
        else:
            uncached = value
    if not tokens_in and uncached:
        tokens_in = uncached + cached + created
    cache = cached + created
    if cache and (cache > tokens_in or total == tokens_in + cache + tokens_out):
        tokens_in += cache  # an input count without its cached parts (Anthropic's, Bedrock's): the prompt is their sum
    if reasoning and (reasoning_name in _EXCLUDED_REASONING or reasoning > tokens_out
                      or total == tokens_in + tokens_out + reasoning):
        tokens_out += reasoning  # an output count without the reasoning (Gemini's candidates)
    return min(tokens_in, MAX_TOKENS), cached, created, min(tokens_out, MAX_TOKENS), reasoning


def tokens(value: Any) -> int:
    """A count as an int: 0 for anything that is not a count from 1 to `MAX_TOKENS` (a string of digits is one)."""
    if value is None or type(value) is bool:  # a bool is no count (int(True) would be 1)
        return 0
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return count if 0 < count <= MAX_TOKENS else 0
