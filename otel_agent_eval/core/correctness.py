"""Tool-correctness scoring with deepeval's exact semantics, without importing deepeval.

This runs on the span-processor path, where importing deepeval would cost ~1.2 s, so
it re-implements ``ToolCorrectnessMetric._calculate_score`` (deepeval 4.3.1) in plain
Python. Quirks are reproduced on purpose so scores match deepeval bit for bit
(``tests/test_correctness.py`` checks that against deepeval itself):

- Non-exact mode matches greedily, expected tool by expected tool, and never reuses a
  called tool that *equals* one already matched under ``ToolCall.__eq__``/``__hash__``
  (name, input and output; ``type`` ignored). Two identical calls therefore count once:
  expected ``[A, A]`` vs called ``[A, A]`` scores 0.5, and deepeval's docs example
  (expected ``[WebSearch, ToolQuery, WebSearch]``, called ``[WebSearch, WebSearch,
  ToolQuery]``) scores 2/3 with or without ordering.
- Partial input matching sums ``1 / len(all keys)`` per equal key, in the iteration
  order of the same ``set`` expression deepeval uses, so floats agree exactly.
- Ordering mode reads the weighted LCS back by backtracking and sums the diagonal
  differences (mathematically ``dp[m][n]``; kept for identical rounding).

One deliberate difference: deepeval raises ``AttributeError`` when partial input
matching meets ``input_parameters=None`` on one side and a dict on the other; here
``None`` counts as ``{}`` (no arguments), so ``None`` vs ``{}`` is a full match.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "DEFAULT_TOOL_TYPE",
    "ToolCallLike",
    "ToolCorrectness",
    "partial_dict_match",
    "tool_correctness",
    "tool_correctness_score",
    "tool_type",
    "weighted_lcs",
]

#: deepeval's ``ToolCallType.FUNCTION.value``, the type of a ``ToolCall`` that names none.
DEFAULT_TOOL_TYPE = "FUNCTION"

MODE_EXACT = "exact match"
MODE_ORDERED = "ordering considered"
MODE_UNORDERED = "order not considered"


class ToolCallLike(Protocol):
    """What scoring reads from a tool call; an optional ``type`` is read with getattr."""

    @property
    def name(self) -> str: ...

    @property
    def input_parameters(self) -> Mapping[str, Any] | None: ...

    @property
    def output(self) -> Any: ...


@dataclass(frozen=True)
class ToolCorrectness:
    """A score plus the few facts a human needs to see why it is not 1."""

    score: float
    mode: str
    expected_names: tuple[str, ...]
    called_names: tuple[str, ...]
    missing: tuple[str, ...] = ()
    out_of_order: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()
    type_mismatches: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        """Formatted on demand, so scoring on the hot path pays nothing for it."""
        seen = f"expected {list(self.expected_names)}, called {list(self.called_names)}"
        if self.score == 1:
            return f"Correct tool usage ({self.mode}): {seen}."
        issues = [
            f"{label} {list(names)}"
            for label, names in (
                ("missing tools", self.missing),
                ("out-of-order tools", self.out_of_order),
                ("called but unmatched tools", self.unmatched),
                ("tool type mismatches", self.type_mismatches),
            )
            if names
        ]
        detail = "; ".join(issues) or "calls differ in order, count, arguments or output"
        return f"Incorrect tool usage ({self.mode}, score {self.score:.4g}): {detail}; {seen}."


def tool_type(tool: object) -> Hashable:
    """The comparable value of ``tool.type``: deepeval's enum compared by value.

    Strings are upper-cased so OpenTelemetry's lowercase ``gen_ai.tool.type`` values
    ("function") meet deepeval's ("FUNCTION"); deepeval accepts no other spelling, so
    this cannot change a score it could compute.
    """
    value = getattr(tool, "type", None)
    if value is None:
        return DEFAULT_TOOL_TYPE
    value = getattr(value, "value", value)
    return value.upper() if isinstance(value, str) else value


def partial_dict_match(expected: Mapping[str, Any] | None, called: Mapping[str, Any] | None) -> float:
    """deepeval's ``_compare_dicts``: share of keys with equal values, nested dicts recursing."""
    expected = {} if expected is None else expected  # deepeval raises AttributeError here
    called = {} if called is None else called
    if expected == called:
        return 1.0
    # Same expressions, same order as deepeval: set iteration order fixes float rounding.
    match_score = 0
    matched_keys = set(expected.keys()).intersection(set(called.keys()))
    total_keys = set(expected.keys()).union(set(called.keys()))
    for key in matched_keys:
        if expected[key] == called[key]:
            match_score += 1 / len(total_keys)
        elif isinstance(expected[key], dict) and isinstance(called[key], dict):
            match_score += partial_dict_match(expected[key], called[key]) / len(total_keys)
    return match_score


def weighted_lcs(
    called: Sequence[ToolCallLike],
    expected: Sequence[ToolCallLike],
    *,
    input_parameters: bool = False,
    output: bool = False,
) -> tuple[list[ToolCallLike], float]:
    """deepeval's ``_compute_weighted_lcs``: the matched expected tools and their total weight."""
    called_types = [tool_type(t) for t in called]
    expected_types = [tool_type(t) for t in expected]
    m, n = len(expected), len(called)
    dp = [[0.0] * (n + 1) for _ in range(m + 1)]
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            e, c = expected[i - 1], called[j - 1]
            if e.name != c.name or expected_types[i - 1] != called_types[j - 1]:
                dp[i][j] = max(dp[i - 1][j], dp[i][j - 1])
                continue
            score = 1.0
            if input_parameters:
                score *= partial_dict_match(e.input_parameters, c.input_parameters)
            if output and e.output != c.output:
                score = 0.0
            dp[i][j] = max(dp[i - 1][j], dp[i][j - 1], dp[i - 1][j - 1] + score if score > 0 else 0)
    # Backtracking prefers "up", then "left", then the diagonal, as deepeval does.
    i, j, total = m, n, 0.0
    lcs: list[ToolCallLike] = []
    while i > 0 and j > 0:
        if dp[i][j] == dp[i - 1][j]:
            i -= 1
        elif dp[i][j] == dp[i][j - 1]:
            j -= 1
        else:
            lcs.append(expected[i - 1])
            total += dp[i][j] - dp[i - 1][j - 1]
            i, j = i - 1, j - 1
    return lcs[::-1], total


def tool_correctness_score(
    called: Sequence[ToolCallLike],
    expected: Sequence[ToolCallLike],
    *,
    exact_match: bool = False,
    consider_ordering: bool = False,
    input_parameters: bool = False,
    output: bool = False,
) -> float:
    """deepeval's tool-calling score in [0, 1]; ``exact_match`` overrides ``consider_ordering``."""
    return _score(called, expected, exact_match, consider_ordering, input_parameters, output)[0]


def tool_correctness(
    called: Sequence[ToolCallLike],
    expected: Sequence[ToolCallLike],
    *,
    exact_match: bool = False,
    consider_ordering: bool = False,
    input_parameters: bool = False,
    output: bool = False,
) -> ToolCorrectness:
    """The score of :func:`tool_correctness_score` plus which expected tools went unmatched."""
    score, left_over = _score(called, expected, exact_match, consider_ordering, input_parameters, output)
    called_names = tuple(t.name for t in called)
    expected_names = tuple(t.name for t in expected)
    missing = _unique(n for n in expected_names if n not in called_names)
    unmatched = _unique(n for n in left_over or () if n in called_names)
    mode = MODE_EXACT if exact_match else MODE_ORDERED if consider_ordering else MODE_UNORDERED
    return ToolCorrectness(
        score,
        mode,
        expected_names,
        called_names,
        missing=missing,
        out_of_order=unmatched if consider_ordering else (),
        unmatched=() if consider_ordering else unmatched,
        type_mismatches=_type_mismatches(called, expected),
    )


def _score(
    called: Sequence[ToolCallLike],
    expected: Sequence[ToolCallLike],
    exact_match: bool,
    consider_ordering: bool,
    input_parameters: bool,
    output: bool,
) -> tuple[float, list[str] | None]:
    """deepeval's ``_calculate_score`` without strict mode (the metric applies that).

    Also returns the names of expected calls left unmatched (``None`` for exact match).
    """
    if exact_match:
        return _exact_score(called, expected, input_parameters, output), None
    if consider_ordering:
        lcs, weight = weighted_lcs(called, expected, input_parameters=input_parameters, output=output)
        unmatched = list((Counter(t.name for t in expected) - Counter(t.name for t in lcs)).elements())
        if not expected:
            return (1.0 if not called else 0.0), unmatched
        return weight / len(expected), unmatched
    return _unordered_score(called, expected, input_parameters, output)


def _exact_score(
    called: Sequence[ToolCallLike], expected: Sequence[ToolCallLike], input_parameters: bool, output: bool
) -> float:
    """deepeval's ``_calculate_exact_match_score``: same tools, same order, same types."""
    if len(called) != len(expected):
        return 0.0
    for c, e in zip(called, expected):
        if c.name != e.name or tool_type(c) != tool_type(e):
            return 0.0
        if input_parameters and c.input_parameters != e.input_parameters:
            return 0.0
        if output and c.output != e.output:
            return 0.0
    return 1.0


def _unordered_score(
    called: Sequence[ToolCallLike], expected: Sequence[ToolCallLike], input_parameters: bool, output: bool
) -> tuple[float, list[str]]:
    """deepeval's ``_calculate_non_exact_match_score``: greedy best match per expected tool."""
    if not expected:
        return (1.0 if not called else 0.0), []
    called_types = [tool_type(t) for t in called]
    keys = [_ToolCallKey(t) for t in called]
    matched: set[_ToolCallKey] = set()
    unmatched: list[str] = []
    total = 0.0
    for e in expected:
        e_type = tool_type(e)
        best_score, best_key = 0.0, None
        for c, c_type, key in zip(called, called_types, keys):
            if key in matched:
                continue
            if e.name == c.name and e_type == c_type:
                match = 1.0
                if input_parameters:
                    match *= partial_dict_match(e.input_parameters, c.input_parameters)
                if output and e.output != c.output:
                    match = 0.0
                if match > best_score:
                    best_score, best_key = match, key
        if best_score > 0:
            total += best_score
            matched.add(best_key)
        else:
            unmatched.append(e.name)
    return total / len(expected), unmatched


class _ToolCallKey:
    """Set key with deepeval ``ToolCall.__eq__``/``__hash__`` semantics: ``type`` is ignored."""

    __slots__ = ("tool", "_hash")

    def __init__(self, tool: ToolCallLike) -> None:
        self.tool = tool
        self._hash: int | None = None

    def __hash__(self) -> int:
        if self._hash is None:  # computed on first use, as deepeval's set would first need it
            params = self.tool.input_parameters
            params = params if params is not None else {}
            self._hash = hash((self.tool.name, _make_hashable(params), _make_hashable(self.tool.output)))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ToolCallKey):
            return NotImplemented
        a, b = self.tool, other.tool
        # A set tests identity before __eq__; the wrapper must keep that for the tool itself.
        return a is b or (a.name == b.name and a.input_parameters == b.input_parameters and a.output == b.output)


def _make_hashable(obj: Any) -> Hashable:
    """deepeval's ``_make_hashable``: dicts and lists as sorted tuples, leaves as themselves."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return tuple(sorted((k, _make_hashable(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(_make_hashable(item) for item in obj)
    if isinstance(obj, (set, frozenset)):
        return frozenset(_make_hashable(item) for item in obj)
    try:
        hash(obj)
    except TypeError:
        return ("__unhashable__", type(obj).__qualname__)
    return obj


def _type_mismatches(called: Sequence[ToolCallLike], expected: Sequence[ToolCallLike]) -> tuple[str, ...]:
    """Expected tools called only under another type (deepeval flags the first same-name call)."""
    found: list[str] = []
    for e in expected:
        e_type = tool_type(e)
        other = [tool_type(c) for c in called if c.name == e.name]
        if other and e_type not in other:
            found.append(f"{e.name} (expected {e_type}, called {other[0]})")
    return _unique(found)


def _unique(items: Any) -> tuple[str, ...]:
    """Distinct items in first-seen order."""
    return tuple(dict.fromkeys(items))
