"""Task routing at catalog scale: the indexed look-up picks exactly the route a scan in catalog order picks,
and a value never seen costs a handful of candidates, not one match per route."""
from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_agent_eval.config.catalog import TaskRoute, parse_catalog
from otel_agent_eval.core.scoring import Scorer, _RouteIndex


class Region(str, enum.Enum):  # an attribute value that is a str subclass: matched by its value
    EU = "a"
    US = "ab"


KEYS = st.sampled_from(["gen_ai.agent.name", "app.route", "tenant"])
PATTERNS = st.sampled_from(["a", "b", "ab", "a*", "*b", "?", "[ab]", "c", "a*b", "*a", "ab*", "a?", "?a", "*", "x[a]",
                            "[a]", "[!a]b", "a]", "[]a]*", "*]", "[ab", "*a*", "a[b]c*", "ba*", "*ab"])
route = st.dictionaries(KEYS, st.lists(PATTERNS, min_size=1, max_size=3, unique=True).map(tuple), max_size=2)
TEXTS = st.sampled_from(["a", "b", "ab", "c", "x", "B", "a*", "[a]", "x[a]", "]", "a]", "ba", "aab", "abc", "[ab", "xa", ""])
values = st.dictionaries(KEYS, st.one_of(TEXTS, st.text(alphabet="ab[]*?x", max_size=5), st.integers(0, 2), st.booleans(),
                                         st.sampled_from(list(Region))))


@settings(max_examples=1_000, deadline=None)
@given(matches=st.lists(route, max_size=10), attributes=values)
def test_the_index_agrees_with_a_scan_in_catalog_order(matches, attributes):
    routes = tuple(TaskRoute(name=f"r{i}", capability="c", match=m) for i, m in enumerate(matches))
    lookup = attributes.get
    scanned = next((r for r in routes if r.matches(lookup)), None)
    assert _RouteIndex(routes).first_match(lookup) is scanned


def test_a_thousand_exact_routes_are_indexed_not_scanned():
    routes = tuple(TaskRoute(name=f"r{i}", capability="c", match={"app.route": (f"/r{i}",)}) for i in range(1_000))
    index = _RouteIndex(routes)
    calls = []
    lookup = lambda key: calls.append(key) or "/r777"  # noqa: E731
    assert index.first_match(lookup).name == "r777"
    assert len(calls) <= 2  # one look-up for the index, one to confirm the candidate: not 1,000 matches


class CountingAttributes(Mapping[str, Any]):
    """Span attributes that count how often routing reads them: a scan of the routes reads once per route."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values
        self.reads = 0

    def __getitem__(self, key: str) -> Any:
        self.reads += 1
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_ten_thousand_glob_routes_route_a_never_seen_value_through_a_handful_of_candidates():
    """10,000 glob routes on tenant.id and a tenant.id that changes every call (issue 30: 12.3 ms a span,
    every route tried): each call now reads the attributes a handful of times, whatever the route count."""
    data: dict[str, Any] = {"version": 1, "tasks": {}, "tools": {
        "web_search": {"cost_usd": 0.001, "latency_ms": 100, "capabilities": ["search"], "complexity": "simple"}}}
    for j in range(10_000):  # literal prefixes, suffixes, and routes on two keys
        if j % 3 == 0:
            match = {"tenant.id": f"tenant-{j:05d}-*"}
        elif j % 3 == 1:
            match = {"tenant.id": f"*-{j:05d}.eu"}
        else:
            match = {"gen_ai.agent.name": "support_agent", "tenant.id": f"t{j:05d}?x*"}
        data["tasks"][f"route_{j:05d}"] = {"match": match, "capability": "search"}
    data["tasks"]["everyone_else"] = {"match": {"tenant.id": "*"}, "capability": "search"}
    scorer = Scorer(parse_catalog(yaml.safe_dump(data, sort_keys=False), source="<10,000 glob routes>"))
    for n in range(200):  # never seen: every value is new
        expected = {f"tenant-03000-{n}": "route_03000", f"eu-{n}-04000.eu": "route_04000",
                    f"t05000{n % 10}x{n}": "route_05000", f"new-tenant-{n}": "everyone_else"}
        for value, route in expected.items():
            attributes = CountingAttributes({"tenant.id": value})
            assert scorer.route("support_agent", attributes).name == route
            assert attributes.reads <= 8, (value, attributes.reads)
