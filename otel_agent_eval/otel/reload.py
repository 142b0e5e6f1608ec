"""Catalog reloads without a restart: on SIGHUP, or when the file changes.

Both call the owner's `reload_catalog()` (the processor's or the exporter's), which swaps the
new catalog into the pipeline atomically or, for a broken file, logs one line, counts it, and
keeps the last good one.

    >>> watch_catalog(processor, "catalog.yaml", interval_s=5)   # poll the file's mtime and size
    >>> reload_on_sighup(processor)                               # kill -HUP <pid>
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from ..config.catalog import Catalog, PathLike, load_catalog
from ..config.settings import known_name
from ..core.pipeline import Pipeline

logger = logging.getLogger(__name__)


def reload_catalog(pipeline: Pipeline, catalog: Catalog | PathLike | None = None) -> bool:
    """Load `catalog` (default: the file the current one came from) and swap it in, or keep the old one.

    A broken catalog is rejected with one log line and `agent_eval_processor_catalog_reloads_rejected_total`.
    """
    try:
        if catalog is None:  # the file the current catalog came from, or the one it stands in for (None: the packaged default)
            source = pipeline.catalog.source
            catalog = pipeline.fallback_for or (None if source.startswith("<") else source)
        new = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
        names = _wanted_names(pipeline, new)
        state = pipeline.build_state(new, names)
    except Exception as exc:  # noqa: BLE001 - a catalog, or building from it, must never reach the app
        pipeline.sink.count("catalog_reloads_rejected")
        logger.error("otel-agent-eval: catalog reload rejected, still scoring with %s: %s", pipeline.catalog.source, exc)
        return False
    pipeline.swap(state, names)
    pipeline.fallback_for = pipeline.wanted_names = None
    pipeline.sink.count("catalog_reloads")
    logger.info("otel-agent-eval: catalog reloaded from %s (%d tools, %d tasks)", new.source, len(new.tools), len(new.tasks))
    return True


def _wanted_names(pipeline: Pipeline, catalog: Catalog) -> dict[str, str | None] | None:
    """While the packaged catalog stands in for the configured one: the configured profile and environment
    for `catalog`, those it does not define replaced by its defaults (logged). None otherwise."""
    wanted = pipeline.wanted_names
    if pipeline.fallback_for is None or not wanted:
        return None
    where = f"the reloaded catalog {catalog.source}"
    return {"profile": known_name(wanted.get("profile"), catalog.profiles, "OTEL_AGENT_EVAL_PROFILE", where),
            "environment": known_name(wanted.get("environment"), catalog.thresholds, "OTEL_AGENT_EVAL_ENVIRONMENT", where)}


class CatalogWatcher:
    """A daemon thread that reloads the catalog when its file's mtime or size changes."""

    def __init__(self, processor: Any, path: PathLike, interval_s: float = 5.0) -> None:
        self.processor, self.path, self.interval_s = processor, os.fspath(path), interval_s
        self._stop = threading.Event()
        self._seen = self._stamp()
        self._thread = threading.Thread(target=self._run, name="otel-agent-eval-catalog-watch", daemon=True)

    def start(self) -> CatalogWatcher:
        self._thread.start()
        self.processor.close_on_shutdown(self.stop)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval_s + 1)

    def check(self) -> bool | None:
        """Reload if the file changed since the last look; None when it did not change."""
        stamp = self._stamp()
        if stamp == self._seen:
            return None
        self._seen = stamp
        return self.processor.reload_catalog(self.path)

    def _stamp(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - a watcher must outlive any one bad look
                logger.exception("otel-agent-eval: catalog watch failed; will look again")


def watch_catalog(processor: Any, path: PathLike, interval_s: float = 5.0) -> CatalogWatcher:
    return CatalogWatcher(processor, path, interval_s).start()


def reload_on_sighup(processor: Any, path: PathLike | None = None) -> bool:
    """Reload the catalog on SIGHUP (chaining any previous handler). Only the main thread can set it."""
    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        logger.warning("otel-agent-eval: SIGHUP reload needs the main thread on a POSIX system; not installed")
        return False
    previous = signal.getsignal(signal.SIGHUP)

    def handler(signum: int, frame: Any) -> None:
        # A signal handler runs in the middle of whatever the main thread was doing: reload on a
        # thread of its own, so a slow or failing catalog never lands in the app's code.
        threading.Thread(target=processor.reload_catalog, args=(path,), name="otel-agent-eval-reload", daemon=True).start()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGHUP, handler)
    return True
