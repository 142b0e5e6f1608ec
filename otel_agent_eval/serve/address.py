"""`host:port` as URLs and messages write it."""
from __future__ import annotations

__all__ = ["host_port"]


def host_port(host: str, port: int) -> str:
    """`127.0.0.1:4318`, `[::1]:4318`: an IPv6 address goes in brackets, or its last group would read as the port."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
