"""deepeval's tool-selection judge (seed 001's `available_tools`): requests, results, the judge itself.

Off every hot path: deepeval is imported only when a judgement is made.
"""
from __future__ import annotations

from .request import JudgeRequest, request_of
from .result import PART_DETERMINISTIC, PART_JUDGE, Judge, JudgeResult

__all__ = ["PART_DETERMINISTIC", "PART_JUDGE", "Judge", "JudgeRequest", "JudgeResult", "request_of"]
