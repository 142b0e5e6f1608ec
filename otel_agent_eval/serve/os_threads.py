"""Serve's two busiest threads named for the OS, so that `top -H`, `ps -L` and `/proc/PID/task/TID/comm` tell them
apart (Python's thread names stay inside the interpreter), and the bench can say which thread spent a hop's CPU.

Linux only: elsewhere, or where `/proc` cannot be written, a thread keeps the name it has.
"""
from __future__ import annotations

import threading

__all__ = ["FORWARD", "INTAKE", "name_for_os"]

INTAKE, FORWARD = "serve-intake", "serve-forward"  # the kernel keeps at most 15 bytes


def name_for_os(name: str) -> None:
    """Give the calling thread `name` in the OS (best effort: never raises)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name)
    except OSError:
        pass
