"""One wiring for every entry point: settings (+ explicit overrides) into a pipeline, its metrics,
its /metrics endpoint and its catalog reloaders.

`install()`, the zero-code exporter and `AgentEvalSpanProcessor` all build through here, so a
setting means the same wherever it is given.

    >>> options = resolve(Settings.from_env(), catalog="catalog.yaml")
    >>> pipeline, metrics = build_pipeline(**options, registry=REGISTRY)
"""
from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from ..config.catalog import AttributeMapping, Catalog, CatalogError, PathLike, load_catalog
from ..config.settings import FailClosed, Settings, check_arguments, known_name, usable_redaction
from ..core.pipeline import Pipeline
from ..core.recognize import ToolCallRecord
from ..core.redact import Redactor
from ..core.runs import AgentRun
from ..core.scoring import CallScore
from ..metrics.budget import DEFAULT_MAX_SAMPLES
from ..metrics.collector import EvalMetrics
from ..metrics.endpoint import serve
from ..metrics.multiprocess import multiprocess_dir, multiprocess_registry
from .otlp_metrics import OtlpMetricsLink
from .reload import reload_on_sighup, watch_catalog

logger = logging.getLogger(__name__)


class Owner(Protocol):
    """What the endpoint and the reloaders attach to: a processor or the exporter."""

    pipeline: Pipeline
    metrics: EvalMetrics
    metrics_address: tuple[str, int] | None

    def close_on_shutdown(self, close: Callable[[], Any]) -> None: ...


def build_pipeline(
    catalog: Catalog | PathLike | None = None,
    *,
    registry: CollectorRegistry | None,
    profile: str | None = None,
    environment: str | None = None,
    enrich: bool = True,
    attribute_mapping: AttributeMapping | None = None,
    window_s: float = 300.0,
    max_unknown_tools: int = 20,
    max_agents: int = 100,
    max_samples: int = DEFAULT_MAX_SAMPLES,
    max_open_traces: int = 10_000,
    max_calls_per_run: int = 1_000,
    run_ttl_s: float = 600.0,
    on_call: Callable[[ToolCallRecord, CallScore], None] | None = None,
    on_run: Callable[[AgentRun], None] | None = None,
    run_validator: Callable[[AgentRun], bool] | None = None,
    redact_keys: str | None = None,
    drop_tool_io: bool = False,
    sees_starts: bool = True,
    clock: Callable[[], float] = time.monotonic,
    evaluation_events: str = "span",
    logger_provider: Any = None,
    judge: Any = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    judge_sample_rate: float = 0.1,
    judge_max_per_minute: int = 60,
    judge_max_usd_per_hour: float = 1.0,
    judge_timeout_s: float = 30.0,
    judge_queue_limit: int = 100,
    judge_arguments: bool = True,
) -> tuple[Pipeline, EvalMetrics]:
    """The evaluation core and the Prometheus accumulators it feeds (registered in `registry` unless None).

    A bad option raises ValueError naming it, before anything is registered; a `redact_keys` that cannot be
    used is logged and redaction fails closed (`settings.FAIL_CLOSED`), never open."""
    check_arguments(window_s=window_s, max_unknown_tools=max_unknown_tools, max_agents=max_agents, max_samples=max_samples,
                    max_open_traces=max_open_traces, max_calls_per_run=max_calls_per_run, run_ttl_s=run_ttl_s,
                    evaluation_events=evaluation_events, judge_sample_rate=judge_sample_rate,
                    judge_max_per_minute=judge_max_per_minute, judge_max_usd_per_hour=judge_max_usd_per_hour,
                    judge_timeout_s=judge_timeout_s, judge_queue_limit=judge_queue_limit, judge_arguments=judge_arguments,
                    **{k: v for k, v in dict(judge=judge, judge_model=judge_model, judge_base_url=judge_base_url).items()
                       if v is not None})
    redact_keys = usable_redaction(redact_keys)
    drop_tool_io = drop_tool_io or isinstance(redact_keys, FailClosed)
    loaded = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    mapping = attribute_mapping or loaded.attribute_mapping  # in-house tool I/O keys are tool I/O too
    io_keys = (mapping.arguments, mapping.result) if mapping else ()
    redactor = Redactor(redact_keys, drop_tool_io, io_keys=io_keys) if redact_keys or drop_tool_io else None
    metrics = EvalMetrics(registry=registry, catalog=loaded, window_s=window_s, max_unknown_tools=max_unknown_tools,
                          max_agents=max_agents, max_samples=max_samples, label_mask=redactor.text if redactor else None)
    try:
        pipeline = Pipeline(loaded, profile=profile, environment=environment, attribute_mapping=attribute_mapping,
                            run_validator=run_validator, sink=metrics, enrich=enrich, redactor=redactor, on_call=on_call,
                            on_run=on_run, max_open_traces=max_open_traces, max_calls_per_run=max_calls_per_run,
                            run_ttl_s=run_ttl_s, sees_starts=sees_starts, clock=clock, evaluation_events=evaluation_events,
                            logger_provider=logger_provider)
    except BaseException:  # e.g. an unknown profile: closed, as after a shutdown, the next processor takes the registry
        metrics.close()
        raise
    metrics.closed_early = pipeline.runs.closed_early
    if judge is not None or judge_model:  # the tool-selection judge, on completed runs (docs/judge.md); off by default
        from ..judge.setup import online_judge

        pipeline.judge_run = online_judge(pipeline, metrics, judge=judge, model=judge_model, base_url=judge_base_url,
                                          sample_rate=judge_sample_rate, max_per_minute=judge_max_per_minute,
                                          max_usd_per_hour=judge_max_usd_per_hour, timeout_s=judge_timeout_s,
                                          queue_limit=judge_queue_limit, arguments=_flag_of(judge_arguments),
                                          logger_provider=logger_provider)
    return pipeline, metrics


def resolve(settings: Settings, *, catalog: Catalog | PathLike | None = None, **explicit: Any) -> dict[str, Any]:
    """`build_pipeline` arguments from settings; explicit arguments win. A catalog file that cannot be
    used, given here or by the environment, is logged and the packaged one is used instead (the
    app always starts; `attach` then sets `agent_eval_catalog_fallback` to 1)."""
    loaded = catalog if isinstance(catalog, Catalog) else _load_or_fallback(catalog if catalog is not None else settings.catalog)
    options: dict[str, Any] = dict(
        catalog=loaded,
        profile=known_name(settings.profile, loaded.profiles, "OTEL_AGENT_EVAL_PROFILE"),
        environment=known_name(settings.environment, loaded.thresholds, "OTEL_AGENT_EVAL_ENVIRONMENT"),
        enrich=settings.enrich, window_s=settings.window_seconds, max_unknown_tools=settings.max_unknown_tools,
        max_agents=settings.max_agents, max_samples=settings.max_samples, redact_keys=settings.redact_keys, drop_tool_io=settings.drop_tool_io,
        evaluation_events=settings.evaluation_events, judge_model=settings.judge_model, judge_base_url=settings.judge_base_url,
        judge_sample_rate=settings.judge_sample_rate, judge_max_per_minute=settings.judge_max_per_minute,
        judge_max_usd_per_hour=settings.judge_max_usd_per_hour, judge_timeout_s=settings.judge_timeout_seconds,
        judge_queue_limit=settings.judge_queue, judge_arguments=settings.judge_arguments,
    )
    options.update(explicit)
    return options


def attach(owner: Owner, settings: Settings, catalog: Catalog | PathLike | None = None) -> None:
    """Serve /metrics and start catalog reloading for `owner`, as the settings ask."""
    show_fallback(owner, settings, catalog)
    if settings.metrics_enabled and owner.metrics.registry is not None:
        registry = multiprocess_registry(owner.metrics) if multiprocess_dir() else owner.metrics.registry
        start_metrics_endpoint(owner, registry, settings)
    path = catalog if catalog is not None and not isinstance(catalog, Catalog) else settings.catalog
    if settings.catalog_poll_seconds > 0 and path is not None:
        watch_catalog(owner, path, settings.catalog_poll_seconds)
    if settings.reload_on_sighup:
        reload_on_sighup(owner, path)


def stop_judging_on_shutdown(owner: Owner, within_s: float | None = None) -> None:
    """Have `owner`'s shutdown stop its online judge, if one runs, after the runs it closes were offered: within
    the judge's own shutdown timeout (and `within_s`, when the owner's shutdown has a bound of its own), never
    waiting on a judge that hangs."""
    online = owner.pipeline.judge_run
    if online is not None and hasattr(online, "stop"):
        if within_s is not None:
            online.shutdown_timeout_s = min(online.shutdown_timeout_s, within_s)
        owner.close_on_shutdown(online.stop)


def show_fallback(owner: Owner, settings: Settings, catalog: Catalog | PathLike | None = None) -> None:
    """`agent_eval_catalog_fallback` at 1 when the wanted catalog file could not be used (`resolve` fell back),
    and a later reload without arguments reads that file again. Every owner does this, a processor built
    by hand too: it serves nothing, but it scores with the packaged catalog all the same."""
    wanted = catalog if catalog is not None else settings.catalog
    owner.metrics.catalog_fallback = (wanted is not None and not isinstance(wanted, Catalog)
                                      and owner.pipeline.catalog.source.startswith("<packaged"))
    if owner.metrics.catalog_fallback:  # a reload without arguments reads the wanted file again, not the packaged one
        owner.pipeline.fallback_for = os.fspath(wanted)
        # and once it loads, the profile and environment configured for it apply (the packaged catalog may lack them)
        owner.pipeline.wanted_names = {"profile": settings.profile, "environment": settings.environment}


AUTO = "auto"  # otlp_metrics of install() and the zero-code exporter: the app's OTLP metric readers, if it has any


def link_otlp_metrics(owner: Owner, target: Any, histograms: str | None = None) -> OtlpMetricsLink | None:
    """Send `owner`'s metrics over OTLP too, as `target` says: a `MetricExporter` (a reader of our own), a
    `MeterProvider` or True (the OTLP readers of that, or the global, provider), `AUTO` (the global provider's
    OTLP readers if there are any, or once it has them: `OtlpMetricsLink.to_provider` again), None or False: not."""
    if target is None or target is False:
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter

    link = OtlpMetricsLink(owner.metrics.collect, histograms=histograms, before_last_export=_pending_of(owner))
    if isinstance(target, MetricExporter):
        link.to_exporter(target)
    elif target is True or target == AUTO or isinstance(target, MeterProvider):
        found = link.to_provider(target if isinstance(target, MeterProvider) else None)
        if not found and target != AUTO:
            logger.warning("otel-agent-eval: otlp_metrics=%r: the MeterProvider has no OTLP metric reader; metrics go to "
                           "/metrics only (give an OTLPMetricExporter instead, or set OTEL_METRICS_EXPORTER=otlp)", target)
    else:
        raise ValueError(f"otel-agent-eval: otlp_metrics={target!r}: expected a MetricExporter, a MeterProvider, True or False")
    owner.close_on_shutdown(link.close)
    return link


def _pending_of(owner: Owner) -> Callable[[float], bool] | None:
    """What a reader's last collection calls first: the owner (held weakly) evaluates what is queued, runs left open."""
    flush = getattr(owner, "flush_for_exit", None)
    if flush is None:
        return None
    ref = weakref.WeakMethod(flush)

    def evaluate_pending(timeout_s: float) -> bool:
        alive = ref()
        return True if alive is None else bool(alive(timeout_s, close_runs=False))

    return evaluate_pending


def start_metrics_endpoint(owner: Owner, registry: CollectorRegistry, settings: Settings) -> None:
    """Serve /metrics for `owner`; a busy port (or any failure to serve) is logged, never raised."""
    try:
        server, thread = serve(registry, port=settings.metrics_port, addr=settings.metrics_addr)
    except Exception as exc:  # noqa: BLE001 - a busy port, an address that is no address, ...
        logger.error("otel-agent-eval: cannot serve metrics on %s:%s (%s); scoring goes on without the endpoint",
                     settings.metrics_addr, settings.metrics_port, exc)
        return
    owner.metrics_address = server.server_address[:2]

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    owner.close_on_shutdown(stop)
    logger.info("otel-agent-eval: metrics on http://%s:%s/metrics", *owner.metrics_address)


def _flag_of(value: Any) -> bool:
    """A boolean argument as the variables read one (`"false"` is False), checked already."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes", "on")


def _load_or_fallback(path: PathLike | None) -> Catalog:
    if path is None:
        return load_catalog()
    try:
        return load_catalog(path)
    except CatalogError as exc:
        logger.error("otel-agent-eval: catalog %s; scoring with the packaged default catalog instead "
                     "(agent_eval_catalog_fallback is 1)", exc)
        return load_catalog()
