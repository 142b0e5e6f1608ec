"""The native readers (`native/`, Rust) when the install built them and `OTEL_AGENT_EVAL_NATIVE` is not `0`.

Each gives exactly what its Python twin gives, or None where that reader must read the input (see
`native/src/lib.rs`); `proto_spans` calls its own first. `NATIVE` says whether they are in use.
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Any

__all__ = ["NATIVE", "reader"]


def _module() -> ModuleType | None:
    if os.environ.get("OTEL_AGENT_EVAL_NATIVE", "").strip() == "0":
        return None
    try:
        from . import _native
    except ImportError:
        return None
    return _native


_built = _module()
NATIVE = _built is not None


def reader(name: str) -> Any:
    """The native function `name`, or None when the native readers are not in use."""
    return getattr(_built, name, None)
