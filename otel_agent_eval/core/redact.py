"""Keep secrets and tool payloads out of the spans we forward."""
from __future__ import annotations

import json
import re
from typing import Any

from . import conventions as c


class Redactor:
    """Keeps secrets and tool payloads out of exported tool spans.

    With `drop_io`, tool arguments and results are removed. With a key `pattern`
    (case-insensitive regular expression), attributes whose key matches, and keys inside
    JSON arguments and results that match, get the value ``[REDACTED]``.
    """

    IO_KEYS = (c.GEN_AI_TOOL_CALL_ARGUMENTS, c.GEN_AI_TOOL_CALL_RESULT, c.OI_INPUT_VALUE, c.OI_OUTPUT_VALUE,
               c.TRACELOOP_ENTITY_INPUT, c.TRACELOOP_ENTITY_OUTPUT)
    MASK = "[REDACTED]"

    def __init__(self, pattern: str | None = None, drop_io: bool = False) -> None:
        self.pattern = re.compile(pattern, re.IGNORECASE) if pattern else None
        self.drop_io = drop_io

    def apply(self, attrs: dict[str, Any]) -> None:
        """Redact `attrs` in place (it is the copy being exported)."""
        for key in self.IO_KEYS:
            if key in attrs:
                if self.drop_io:
                    del attrs[key]
                elif self.pattern is not None and isinstance(attrs[key], str):
                    attrs[key] = self._redact_json(attrs[key])
        if self.pattern is not None:
            for key in [k for k in attrs if self.pattern.search(k)]:
                attrs[key] = self.MASK

    def _redact_json(self, text: str) -> str:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if not isinstance(value, (dict, list)):
            return text
        return json.dumps(self._mask(value), ensure_ascii=False)

    def _mask(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.MASK if isinstance(k, str) and self.pattern.search(k) else self._mask(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._mask(v) for v in value]
        return value
