"""The judge's Prometheus families: its scores per agent and task, judgements by outcome, latency, tokens and cost.

Kept apart from the scoring accumulators (`collector.py`), which expose them when a judge runs
(`EvalMetrics.judge`); labels are placed by the same caps and sample budget (`EvalMetrics.judge_labels`),
so a judge adds no unbounded series. Every update comes from the judge's worker thread, a few a minute:
plain accumulators under one lock; in prometheus-client multiprocess mode they are written to the
process's files as the other families are (`MultiprocessMirror`).

    >>> judge_metrics = JudgeMetrics(place=metrics.judge_labels)
    >>> judge_metrics.outcome("sampled_out")
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import Metric

from . import names as n
from .families import family
from .histogram import DURATION_BUCKETS_S, BucketCounts

__all__ = ["JudgeMetrics"]

TOKEN_TYPES = ("input", "output")


class JudgeMetrics:
    """Accumulators of the online judge. `place(agent, task, judge_model, prompt_version)` gives the score series' labels
    (capped and charged to the sample budget, `_other_` past them)."""

    def __init__(self, place: Callable[[str | None, str, str, str], tuple[str, ...]]) -> None:
        self._place = place
        self.on_change: Callable[[], None] | None = None  # e.g. write the multiprocess files
        self.reset()

    def reset(self) -> None:
        """Counts from zero (a forked child's are its own)."""
        self._lock = threading.Lock()
        self.outcomes: Counter[str] = Counter(dict.fromkeys(n.JUDGE_OUTCOMES, 0))
        self._scores: dict[tuple[str, ...], BucketCounts] = {}
        self._duration = BucketCounts(DURATION_BUCKETS_S)
        self._tokens: Counter[str] = Counter(dict.fromkeys(TOKEN_TYPES, 0))
        self._cost_usd = 0.0

    def outcome(self, name: str, n_runs: int = 1) -> None:
        """Count `n_runs` completed runs under `name` (one of `names.JUDGE_OUTCOMES`)."""
        with self._lock:
            self.outcomes[name] += n_runs
        self._changed()

    def judged(self, agent: str | None, task: str, result: Any, trace_id: int = 0) -> None:
        """Count a judgement that answered in time, with its score (a `JudgeResult`)."""
        labels = self._place(agent, task, str(result.judge_model), str(result.prompt_version))
        with self._lock:
            self.outcomes["judged"] += 1
            series = self._scores.get(labels)
            if series is None:
                series = self._scores[labels] = BucketCounts(n.SCORE_BUCKETS)
            series.observe(float(result.score), f"{trace_id:032x}" if trace_id else None)
        self._changed()

    def spent(self, latency_s: float, input_tokens: int, output_tokens: int, cost_usd: float | None) -> None:
        """What one judgement took and used, answered in time or not (a late answer still cost its tokens)."""
        with self._lock:
            if latency_s >= 0:
                self._duration.observe(latency_s)
            self._tokens["input"] += max(0, int(input_tokens or 0))
            self._tokens["output"] += max(0, int(output_tokens or 0))
            if cost_usd is not None and cost_usd > 0:
                self._cost_usd += cost_usd
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # noqa: BLE001 - the files are written again at the next change
                pass

    def families(self) -> Iterator[Metric]:
        with self._lock:
            outcomes, tokens, cost = Counter(self.outcomes), Counter(self._tokens), self._cost_usd
            scores = [(labels, hist.copy()) for labels, hist in self._scores.items()]
            duration = self._duration.copy()
        by_outcome = family(n.JUDGEMENTS)
        for outcome in n.JUDGE_OUTCOMES:
            by_outcome.add_metric([outcome], outcomes[outcome])
        yield by_outcome
        score = family(n.JUDGE_SCORE)
        for labels, hist in scores:
            score.add_counts(list(labels), hist.bounds, hist.counts, hist.sum, hist.exemplars)
        yield score
        latency = family(n.JUDGE_DURATION)
        latency.add_counts([], duration.bounds, duration.counts, duration.sum, duration.exemplars)
        yield latency
        token_family = family(n.JUDGE_TOKENS)
        for token_type in TOKEN_TYPES:
            token_family.add_metric([token_type], tokens[token_type])
        yield token_family
        cost_family = family(n.JUDGE_COST)
        cost_family.add_metric([], cost)
        yield cost_family
