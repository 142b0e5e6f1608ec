"""`BucketFamily`, the histogram family of our collectors: the samples a scrape reads are those
`HistogramMetricFamily` makes of the same buckets, and OTLP reads from its counts what it would read from them."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.metrics_core import HistogramMetricFamily

from otel_agent_eval.metrics.families import BucketFamily, le_buckets
from otel_agent_eval.metrics.otlp import _counted, _sampled

bounds = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=0, max_size=6, unique=True).map(
    lambda b: (*sorted(b), math.inf))
labels = st.tuples(st.text(max_size=4), st.text(max_size=4))


@st.composite
def points(draw):
    out = []
    for values in draw(st.lists(labels, max_size=4, unique=True)):  # a collector adds each series once
        b = draw(bounds)
        counts = draw(st.lists(st.integers(0, 10**6), min_size=len(b), max_size=len(b)))
        exemplars = draw(st.one_of(st.none(), st.lists(
            st.one_of(st.none(), st.tuples(st.integers(1, 2**128 - 1), st.floats(0, 10), st.floats(1e9, 2e9))),
            min_size=len(b), max_size=len(b))))
        out.append((values, b, counts, draw(st.floats(0, 1e9)), exemplars))
    return out


@settings(max_examples=300, derandomize=True, deadline=None)
@given(points())
def test_samples_and_counts_are_those_of_a_histogram_family(series):
    ours, theirs = BucketFamily("x_seconds", "doc", ["tool", "agent"]), HistogramMetricFamily("x_seconds", "doc", labels=["tool", "agent"])
    for values, b, counts, total, exemplars in series:
        ours.add_counts(values, b, counts, total, exemplars)
        theirs.add_metric(list(values), le_buckets(b, counts, exemplars), total)
    assert ours.samples == theirs.samples
    assert ours.samples == theirs.samples  # made once, read twice
    assert _counted(ours) == _sampled(theirs)


def test_points_added_after_a_read_are_read_too():
    family = BucketFamily("x_seconds", "doc", ["tool"])
    family.add_counts(["a"], (1.0, math.inf), [1, 2], 3.5)
    assert [s.value for s in family.samples] == [1, 3, 3, 3.5]
    family.add_counts(["b"], (1.0, math.inf), [0, 1], 2.0)
    assert [s.labels.get("tool") for s in family.samples] == ["a"] * 4 + ["b"] * 4


def test_it_takes_counts_not_le_buckets():
    with pytest.raises(TypeError, match="add_counts"):
        BucketFamily("x_seconds", "doc", []).add_metric([], [("+Inf", 1)], 1.0)
