"""The online judge as the settings ask for it: the model (made on first use), the request builder, the budget,
the metrics and the events, put together for one pipeline (`otel/wiring.py` calls this when judging is on).

    >>> pipeline.judge_run = online_judge(pipeline, metrics, model="gpt-4.1-mini", sample_rate=0.1)
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .budget import JudgeBudget
from .events import JudgeEvents
from .online import DEFAULT_QUEUE, DEFAULT_TIMEOUT_S, OnlineJudge
from .request import judge_redactor, request_of

__all__ = ["online_judge"]


def online_judge(pipeline: Any, metrics: Any, *, judge: Any = None, model: str | None = None, base_url: str | None = None,
                 sample_rate: float = 0.1, max_per_minute: int | None = 60, max_usd_per_hour: float | None = 1.0,
                 timeout_s: float = DEFAULT_TIMEOUT_S, queue_limit: int = DEFAULT_QUEUE, arguments: bool = True,
                 logger_provider: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> OnlineJudge:
    """An `OnlineJudge` for `pipeline`: `judge` (any object with `judge(request) -> JudgeResult`), or deepeval's judge with
    `model` (at `base_url`), made on the worker thread at the first judgement (deepeval takes ~1.2 s to import);
    `arguments=False` leaves deepeval's argument judge out (two model calls fewer a run)."""
    own = pipeline.redactor  # the processor's redaction when it names keys, else the common secret keys (as `score
    # --judge`): a judge never sends content unredacted
    redactor = own if own is not None and own.pattern is not None else judge_redactor(None, own is not None and own.drop_io)

    def build(run: Any, route: Any, catalog: Any) -> Any:
        return request_of(run, route, catalog, redactor=redactor)

    if judge is None:
        judge = _ModelJudge(model or "", base_url, timeout_s, sample_rate, lambda: pipeline.catalog, arguments)
    judge_metrics = metrics.start_judging() if metrics is not None else None
    return OnlineJudge(judge, build=build, sample_rate=sample_rate, budget=JudgeBudget(max_per_minute, max_usd_per_hour, clock=clock),
                       timeout_s=timeout_s, queue_limit=queue_limit, metrics=judge_metrics,
                       events=JudgeEvents(logger_provider), mask=redactor.text if redactor is not None else None)


class _ModelJudge:
    """deepeval's judge with a model by name, made once, on the first judgement's thread (not at the app's start),
    or when `prepare` is called."""

    def __init__(self, model: str, base_url: str | None, timeout_s: float, sample_rate: float,
                 catalog: Callable[[], Any], arguments: bool = True) -> None:
        self.model, self.base_url, self.timeout_s, self.sample_rate = model, base_url, timeout_s, sample_rate
        self.arguments = arguments
        self._catalog = catalog
        self._judge: Any = None
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Make the model now (a process that only serves pays deepeval's import at its start); one that cannot be
        made is left to the first judgement, which counts and logs the failure."""
        try:
            self._made()
        except Exception:  # noqa: BLE001
            pass

    def judge(self, request: Any) -> Any:
        return self._made().judge(request)

    def _made(self) -> Any:
        with self._lock:
            if self._judge is None:  # a model that cannot be made (no key) raises here each time: counted failed
                from .deepeval_judge import DeepEvalJudge
                from .models import judge_model

                catalog = self._catalog()
                llm = judge_model(self.model, base_url=self.base_url, timeout_s=self.timeout_s,
                                  models=getattr(catalog, "models", None))
                self._judge = DeepEvalJudge(llm, sample_rate=self.sample_rate, arguments=self.arguments)
            return self._judge
