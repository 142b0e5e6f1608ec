"""One budget for the size of a scrape, instead of per-label caps that multiply.

Every label set a scored series adds costs the samples it will expose (a histogram: its
buckets plus `_sum` and `_count`). A new label set is admitted while the budget has room;
past it the value is counted under `_other_` instead, so totals stay exact and the
folding shows (`agent_eval_processor_labels_folded_total`). A tenth of the budget is kept
for those `_other_` series, whose number is fixed; only the catalog (its tasks, tools and
profiles) can grow them, never the traffic.
"""
from __future__ import annotations

from . import names as n

DEFAULT_MAX_SAMPLES = 50_000


def histogram_samples(buckets: tuple[float, ...]) -> int:
    return len(buckets) + 2  # the buckets, _sum and _count


# What one new label set costs, by where it appears.
PAIR = 6 + len(n.QUANTILES) + 2  # per (tool, agent): cost, excess latency, SLO violations, context tokens, cost and calls,
# the latency summary
DURATION = histogram_samples(n.TOOL_DURATION.buckets)  # per (tool, error_type)
EFFICIENCY = histogram_samples(n.TOOL_EFFICIENCY.buckets)  # per (tool, agent, profile, dimension)
JUDGE = histogram_samples(n.JUDGE_SCORE.buckets)  # per (agent, task) the judge scored
RUN = sum(histogram_samples(spec.buckets) for spec in n.RUN_HISTOGRAMS.values()) + 4  # per (agent, task): + outcomes, over budget


class SampleBudget:
    """Samples the scored series may expose; not thread-safe (the collector's lock guards it)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = DEFAULT_MAX_SAMPLES) -> None:
        self.limit = limit - limit // 10  # the rest is kept for the _other_ series
        self.used = 0

    def take(self, samples: int) -> bool:
        """Reserve `samples` for a new label set; False (nothing taken) when they don't fit."""
        if self.used + samples > self.limit:
            return False
        self.used += samples
        return True

    def charge(self, samples: int) -> None:
        """Account an `_other_` series, which is always admitted."""
        self.used += samples
