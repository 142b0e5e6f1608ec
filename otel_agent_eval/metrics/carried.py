"""The monotonic series of a process's metrics, taken as bytes and added back under a later process's own.

`serve --wal-dir` writes them into each checkpoint of its write-ahead log (`serve/durable.py`), taken between two
requests, and the process that replays the log starts from them: its counters go on from where the killed one's
stood at that checkpoint, instead of from zero, and what it replays after that point is counted as new. What is
carried: every counter sample (`_total`), every histogram's bucket counts and sum, a summary's `_count` and `_sum`.
What cannot be: gauges (they say what is now, not what was) and a summary's sliding-window quantiles (the window's
observations are not kept); those start again from the new process's own observations.

    >>> blob = take(metrics.families())        # bytes, at a point where no request is half evaluated
    >>> metrics.carried = Carried.load(blob)   # in the next process, before it evaluates anything
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from .families import BucketFamily

__all__ = ["Carried", "take"]

FORMAT = 1
# A sum of floats (a cost, a histogram's sum) added back in two parts may round a few units of its last place below
# the value the killed process showed, which Prometheus would take for a counter reset (and `increase()` for a jump
# of the whole value): such a value is carried up by this share, far above rounding and far below anything shown.
ROUNDING_MARGIN = 1e-9
LabelItems = tuple[tuple[str, str], ...]


def take(families: Iterable[Metric]) -> bytes:
    """The monotonic series of `families`, compressed: `{"v": 1, "c": [[family, sample, labels, value]],
    "h": {family: [bounds, [[labels, counts, sum]]]}}`."""
    counters: list[list[Any]] = []
    histograms: dict[str, list[Any]] = {}
    for family in families:
        if isinstance(family, BucketFamily):
            series = [[list(labels), list(counts), total] for labels, _, counts, total, _ in family.points]
            if series:
                histograms[family.name] = [list(family.points[0][1]), series]
        elif family.type in ("counter", "summary"):
            for sample in family.samples:
                if sample.name.endswith(("_total", "_count", "_sum")):
                    counters.append([family.name, sample.name, sorted(sample.labels.items()), sample.value])
    return zlib.compress(json.dumps({"v": FORMAT, "c": counters, "h": histograms}, separators=(",", ":")).encode(), 1)


class Carried:
    """Series a killed process had counted, added to this process's own at every collection (`apply`)."""

    def __init__(self, counters: dict[str, dict[tuple[str, LabelItems], float]],
                 histograms: dict[str, tuple[list[float], dict[tuple[str, ...], tuple[list[float], float]]]]) -> None:
        self.counters = counters  # family -> (sample name, labels) -> value
        self.histograms = histograms  # family -> (bounds, label values -> (counts per bucket, sum))

    @classmethod
    def load(cls, blob: bytes) -> Carried:
        """ValueError when `blob` is not what `take` made."""
        try:
            data = json.loads(zlib.decompress(blob))
            if data.get("v") != FORMAT:
                raise ValueError(f"format {data.get('v')!r}, not {FORMAT}")
            counters: dict[str, dict[tuple[str, LabelItems], float]] = {}
            for family, sample, labels, value in data["c"]:
                counters.setdefault(family, {})[(sample, tuple((k, v) for k, v in labels))] = _up(value)
            histograms = {family: ([float(b) for b in bounds], {tuple(labels): ([float(c) for c in counts], _up(total))
                                                                 for labels, counts, total in series})
                          for family, (bounds, series) in data["h"].items()}
        except (zlib.error, UnicodeDecodeError, TypeError, KeyError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a metric state ({exc})") from None
        return cls(counters, histograms)

    @property
    def samples(self) -> int:
        """The samples these series expose (what they take of the sample budget)."""
        return (sum(map(len, self.counters.values()))
                + sum((len(bounds) + 2) * len(series) for bounds, series in self.histograms.values()))

    def apply(self, families: Iterable[Metric]) -> Iterator[Metric]:
        """`families`, each with the carried series added to its own (a series it lacks appended)."""
        for family in families:
            if isinstance(family, BucketFamily):
                if family.name in self.histograms:
                    _add_points(family, *self.histograms[family.name])
            elif family.name in self.counters:
                _add_samples(family, self.counters[family.name])
            yield family


def _up(value: float) -> float:
    """A count as it is; a sum of floats carried up by ROUNDING_MARGIN."""
    value = float(value)
    return value if value.is_integer() else value * (1 + ROUNDING_MARGIN)


def _add_samples(family: Metric, carried: dict[tuple[str, LabelItems], float]) -> None:
    at = {(s.name, tuple(sorted(s.labels.items()))): i for i, s in enumerate(family.samples)}
    for (name, labels), value in carried.items():
        i = at.get((name, labels))
        if i is None:
            family.samples.append(Sample(name, dict(labels), value))
        else:
            family.samples[i] = family.samples[i]._replace(value=family.samples[i].value + value)


def _add_points(family: BucketFamily, bounds: list[float], carried: dict[tuple[str, ...], tuple[list[float], float]]) -> None:
    at = {point[0]: i for i, point in enumerate(family.points)}
    for labels, (counts, total) in carried.items():
        i = at.get(labels)
        if i is None:
            family.points.append((labels, bounds, counts, total, None))
            continue
        own_labels, own_bounds, own_counts, own_total, exemplars = family.points[i]
        if len(own_counts) != len(counts):  # another version's buckets: its counts cannot be added bucket by bucket
            continue
        family.points[i] = (own_labels, own_bounds, [a + b for a, b in zip(own_counts, counts)], own_total + total, exemplars)
