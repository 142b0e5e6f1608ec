"""Task routing at catalog scale: the indexed look-up picks exactly the route a scan in catalog order picks."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_agent_eval.config.catalog import TaskRoute
from otel_agent_eval.core.scoring import _RouteIndex

KEYS = st.sampled_from(["gen_ai.agent.name", "app.route", "tenant"])
PATTERNS = st.sampled_from(["a", "b", "ab", "a*", "*b", "?", "[ab]", "c"])
route = st.builds(lambda match: match, st.dictionaries(KEYS, st.lists(PATTERNS, min_size=1, max_size=3, unique=True).map(tuple),
                                                         max_size=2))
values = st.dictionaries(KEYS, st.one_of(st.sampled_from(["a", "b", "ab", "c", "x", "B"]), st.integers(0, 2), st.booleans()))


@settings(max_examples=500, deadline=None)
@given(matches=st.lists(route, max_size=8), attributes=values)
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
