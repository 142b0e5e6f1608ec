"""What deepeval asks of a metric that scores in one call: `measure` and `a_measure` (its sync and async runners
call one or the other, with progress-bar hints), and `is_successful` by deepeval's rule. A metric of ours says
how it scores in `_measure(test_case) -> float`, setting `score`, `reason` and `success`."""
from __future__ import annotations

from typing import Any, Optional

from deepeval.metrics import BaseMetric
from deepeval.metrics.indicator import metric_progress_indicator
from deepeval.test_case import LLMTestCase

__all__ = ["MeasuredMetric"]


class MeasuredMetric(BaseMetric):
    """deepeval's `measure`/`a_measure` protocol around `_measure`; nothing to await, so both run it inline."""

    def measure(self, test_case: LLMTestCase, _show_indicator: bool = True, _in_component: bool = False,
                **_: Any) -> float:
        """Score `test_case`; extra keywords (deepeval's runners pass progress-bar hints to some metrics) are ignored."""
        with metric_progress_indicator(self, _show_indicator=_show_indicator, _in_component=_in_component):
            return self._measure(test_case)

    async def a_measure(self, test_case: LLMTestCase, _show_indicator: bool = True, _in_component: bool = False,
                        **_: Any) -> float:
        """Same as :meth:`measure`; deepeval's async runners call this one."""
        with metric_progress_indicator(self, async_mode=True, _show_indicator=_show_indicator,
                                       _in_component=_in_component):
            return self._measure(test_case)

    def is_successful(self) -> Optional[bool]:
        """deepeval's rule: an error fails, otherwise ``score >= threshold``."""
        if self.threshold is None:
            self.success = None
        elif self.error is not None or self.score is None:
            self.success = False
        else:
            self.success = self.score >= self.threshold
        return self.success

    def _measure(self, test_case: LLMTestCase) -> float:
        raise NotImplementedError
