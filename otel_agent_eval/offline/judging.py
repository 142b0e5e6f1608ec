"""`score --judge`: deepeval's tool-selection judge on a deterministic sample of recorded runs, under a total cap.

`OfflineJudging` is fed by `score_traces`' own callbacks: `on_span` reads the tool definitions the
sampled traces' spans declare (model calls' `gen_ai.tool.definitions`, ...), `on_run` judges each
sampled run as it closes. The sample is `judge.sampling.chosen(trace_id, rate)`, the online judge's,
so a trace judged live is judged offline too. The budget is a total: at most `max_judgements`
judgements and `max_usd` of judge cost (a judgement is started while the spend is below the cap:
the total can pass it by what the last one cost); runs past it are counted, not judged. A judgement
that fails (unreachable model, bad JSON) is counted with its error; scoring goes on.

    >>> judging = OfflineJudging(DeepEvalJudge(judge_model("gpt-4o-mini")), catalog, rate=0.1, max_usd=1.0)
    >>> report = score_traces(paths, catalog, on_span=judging.on_span, on_run=judging.on_run)
    >>> report = judging.attach(report)
"""
from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ..config.catalog import Catalog
from ..core.recognize import attribute_dict
from ..core.redact import Redactor
from ..core.runs import AgentRun
from ..core.tool_definitions import ToolDefinition, read_definitions
from ..judge.request import request_of
from ..judge.result import Judge, JudgeResult, describe_error
from .report import AgentGroups, Report

__all__ = ["JudgeGroup", "JudgeSummary", "JudgedRun", "OfflineJudging", "parse_budget"]

logger = logging.getLogger(__name__)

MAX_DECLARING_TRACES = 10_000  # sampled traces whose declared tools are held until their runs close (oldest dropped)
MAX_RESULTS = 1_000  # judged runs listed in the report (lowest scores first); all are in the figures
LOWEST_PER_GROUP = 3  # lowest-scored runs shown per agent/task group, with the judge's reasons
MAX_ERRORS = 5  # distinct judge errors listed
_BUDGET = re.compile(r"\s*(?:\$\s*(?P<usd1>[0-9.eE+-]+)|(?P<usd2>[0-9.eE+-]+)\s*usd|(?P<count>[0-9]+))\s*\Z", re.I)


def parse_budget(items: Iterable[str] | None) -> tuple[float | None, int | None]:
    """`["$0.50", "200"]` as (USD cap, judgements cap): `$X` or `Xusd` is dollars, a whole number is judgements.

    Raises ValueError with one line naming the bad item."""
    usd: float | None = None
    count: int | None = None
    for item in items or ():
        match = _BUDGET.match(item)
        if match is None:
            raise ValueError(f"--judge-budget {item!r}: expected $USD (e.g. $0.50 or 0.5usd) or a whole number of judgements")
        if match["count"] is not None:
            count = int(match["count"])
            continue
        try:
            usd = float(match["usd1"] or match["usd2"])
        except ValueError:
            raise ValueError(f"--judge-budget {item!r}: not a number of dollars") from None
        if not 0 <= usd < math.inf:
            raise ValueError(f"--judge-budget {item!r}: expected a finite amount >= 0")
    return usd, count


@dataclass(frozen=True)
class JudgedRun:
    """One sampled run: its judgement, or why it has none (the judge failed)."""

    trace_id: str  # 32 hex digits
    agent: str
    task: str
    result: JudgeResult | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "agent": self.agent, "task": self.task, "error": self.error,
                **(self.result.as_dict() if self.result is not None else {})}


@dataclass(frozen=True)
class JudgeGroup:
    """The judgements of one agent on one task."""

    agent: str
    task: str
    judged: int
    failed: int
    score: float | None  # mean combined score (deepeval's ToolCorrectnessMetric with the judge)
    selection_score: float | None  # mean of the judge's tool-selection part
    argument_score: float | None  # mean argument correctness, over the runs whose arguments were judged
    judge_part: int  # runs whose score the judge's part gave (the rest: the deterministic part)
    cost_usd: float | None  # the judgements' cost; None when none was priced
    lowest: tuple[JudgedRun, ...]  # the lowest-scored runs, with the judge's reasons

    @property
    def name(self) -> str:
        return f"{self.agent or '(no agent)'}/{self.task or '(unrouted)'}"

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "lowest"}, "lowest": [r.to_dict() for r in self.lowest]}


@dataclass(frozen=True)
class JudgeSummary:
    """What judging found and what it cost, with the provenance that makes it reproducible."""

    judge_model: str
    metric: str
    metric_version: str
    prompt_version: str
    sample_rate: float
    max_usd: float | None
    max_judgements: int | None
    runs: int  # runs seen
    sampled: int  # chosen by the sample
    judged: int
    failed: int
    over_budget: int  # sampled, not judged: the budget was spent
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # of the priced judgements; None when none was priced
    unpriced: int  # judgements whose cost is unknown (the judge's model has no price)
    groups: tuple[JudgeGroup, ...]
    results: tuple[JudgedRun, ...]  # lowest scores first, at most MAX_RESULTS; failed ones after
    errors: tuple[str, ...] = ()  # distinct errors of failed judgements, at most MAX_ERRORS

    def group(self, agent: str, task: str) -> JudgeGroup | None:
        return next((g for g in self.groups if g.agent == agent and g.task == task), None)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if k not in ("groups", "results", "errors")}
        data["groups"] = [g.to_dict() for g in self.groups]
        data["results"] = [r.to_dict() for r in self.results]
        data["errors"] = list(self.errors)
        return data


class OfflineJudging:
    """Judges the sampled runs of a `score_traces` replay; `summary()` and `attach(report)` when it is done.

    `chosen(trace_id, rate)` is the sample (the online judge's `judge.sampling.chosen`); `redactor` masks
    what is sent (the judge always redacts: see `judge.request.judge_redactor`).
    """

    def __init__(self, judge: Judge, catalog: Catalog, *, rate: float = 1.0, max_usd: float | None = None,
                 max_judgements: int | None = None, redactor: Redactor | None = None,
                 chosen: Callable[[int, float], bool] | None = None) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"judge sample rate {rate!r}: expected a number from 0 to 1")
        if chosen is None:
            chosen = _all if rate >= 1.0 else _sampling()
        self.judge, self.catalog, self.rate, self.redactor, self.chosen = judge, catalog, rate, redactor, chosen
        self.max_usd, self.max_judgements = max_usd, max_judgements
        self.runs = self.sampled = self.over_budget = self.unpriced = self.input_tokens = self.output_tokens = 0
        self.spent = 0.0  # by this replay's judgements
        self.priced = False
        self.total = _Total()  # the budget's: shared by the replays of one command (`another`)
        self.judged: list[JudgedRun] = []
        self.errors: dict[str, None] = {}
        self._declared: OrderedDict[int, dict[str, ToolDefinition]] = OrderedDict()
        self._agents = AgentGroups()

    def another(self) -> OfflineJudging:
        """A judging for another replay (`compare`'s other side): the same judge, sample and redaction, and the same
        budget, which is a total over both."""
        other = OfflineJudging(self.judge, self.catalog, rate=self.rate, max_usd=self.max_usd,
                               max_judgements=self.max_judgements, redactor=self.redactor, chosen=self.chosen)
        other.total = self.total
        return other

    def on_span(self, span: ReadableSpan) -> None:
        """Remember the tools a sampled trace's span declares (for the runs of that trace)."""
        context = span.get_span_context()
        trace_id = context.trace_id if context is not None else 0
        if not self.chosen(trace_id, self.rate):
            return
        found = self._declared.get(trace_id)
        if found is None:
            found = self._declared[trace_id] = {}
            if len(self._declared) > MAX_DECLARING_TRACES:
                self._declared.popitem(last=False)
        read_definitions(attribute_dict(span), found)

    def on_run(self, run: AgentRun) -> None:
        """Judge `run` when the sample chose it and the budget allows."""
        self.runs += 1
        if not self.chosen(run.trace_id, self.rate):
            return
        self.sampled += 1
        if self._spent():
            self.over_budget += 1
            return
        agent, task = self._agents(run.agent), run.task or ""
        route = self.catalog.task(run.task) if run.task else None
        trace_id = format(run.trace_id, "032x")
        self.total.judgements += 1
        try:
            request = request_of(run, route, self.catalog, redactor=self.redactor, declared=self._declared.get(run.trace_id))
            result = self.judge.judge(request)
        except Exception as error:  # noqa: BLE001 - a judge that fails is counted with its error; scoring goes on
            line = describe_error(error)
            if line not in self.errors:
                logger.warning("judge failed on trace %s: %s", trace_id, line)
            if len(self.errors) < MAX_ERRORS:
                self.errors.setdefault(line, None)
            self.judged.append(JudgedRun(trace_id, agent, task, None, line))
            return
        self.input_tokens += result.input_tokens
        self.output_tokens += result.output_tokens
        if result.cost_usd is None:
            self.unpriced += 1
        else:
            self.spent += result.cost_usd
            self.total.usd += result.cost_usd
            self.priced = True
        self.judged.append(JudgedRun(trace_id, agent, task, result))

    def summary(self) -> JudgeSummary:
        ok = [j for j in self.judged if j.result is not None]
        first = ok[0].result if ok else None
        by_group: dict[tuple[str, str], list[JudgedRun]] = {}
        for judged in self.judged:
            by_group.setdefault((judged.agent, judged.task), []).append(judged)
        groups = tuple(_group(agent, task, runs) for (agent, task), runs in sorted(by_group.items()))
        ranked = sorted(ok, key=lambda j: (j.result.score, j.trace_id)) + [j for j in self.judged if j.result is None]
        return JudgeSummary(
            judge_model=first.judge_model if first else str(getattr(self.judge, "model_name", "")),
            metric=first.metric if first else "ToolCorrectnessMetric",
            metric_version=first.metric_version if first else "",
            prompt_version=first.prompt_version if first else "",
            sample_rate=self.rate, max_usd=self.max_usd, max_judgements=self.max_judgements, runs=self.runs,
            sampled=self.sampled, judged=len(ok), failed=len(self.judged) - len(ok), over_budget=self.over_budget,
            input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            cost_usd=self.spent if self.priced else None, unpriced=self.unpriced, groups=groups,
            results=tuple(ranked[:MAX_RESULTS]), errors=tuple(self.errors))

    def attach(self, report: Report) -> Report:
        """`report` with the judgements: `report.judge`, and each judged group's `judge_score` (for the gate)."""
        summary = self.summary()
        groups = []
        for group in report.groups:
            judged = summary.group(group.agent, group.task)
            groups.append(group if judged is None else dataclasses.replace(
                group, judge_score=judged.score, judged_runs=judged.judged))
        return dataclasses.replace(report, groups=tuple(groups), judge=summary)

    def _spent(self) -> bool:
        if self.max_judgements is not None and self.total.judgements >= self.max_judgements:
            return True
        return self.max_usd is not None and self.total.usd >= self.max_usd


class _Total:
    """What the judgements of one command have used of its budget (both sides of a `compare`)."""

    def __init__(self) -> None:
        self.judgements = 0  # started, failed ones too: a failed call may still have cost
        self.usd = 0.0


def _group(agent: str, task: str, runs: list[JudgedRun]) -> JudgeGroup:
    ok = [r.result for r in runs if r.result is not None]
    arguments = [r.argument_score for r in ok if r.argument_score is not None]
    selections = [r.selection_score for r in ok if r.selection_score is not None]
    priced = [r.cost_usd for r in ok if r.cost_usd is not None]
    lowest = sorted((r for r in runs if r.result is not None), key=lambda r: (r.result.score, r.trace_id))[:LOWEST_PER_GROUP]
    return JudgeGroup(
        agent=agent, task=task, judged=len(ok), failed=len(runs) - len(ok),
        score=math.fsum(r.score for r in ok) / len(ok) if ok else None,
        selection_score=math.fsum(selections) / len(selections) if selections else None,
        argument_score=math.fsum(arguments) / len(arguments) if arguments else None,
        judge_part=sum(1 for r in ok if r.part == "judge"),
        cost_usd=math.fsum(priced) if priced else None, lowest=tuple(lowest))


def _all(trace_id: int, rate: float) -> bool:
    return True


def _sampling() -> Callable[[int, float], bool]:
    """The online judge's deterministic sample (`judge.sampling.chosen`)."""
    from ..judge.sampling import chosen

    return chosen
