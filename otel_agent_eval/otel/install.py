"""One line in an app: `install()` puts the processor on the global TracerProvider.

    >>> import otel_agent_eval
    >>> otel_agent_eval.install(catalog="catalog.yaml")   # metrics on 127.0.0.1:9464/metrics

Explicit arguments win over `OTEL_AGENT_EVAL_*` environment variables, which win over
defaults. A catalog passed as an argument must be valid (`CatalogError` otherwise);
a broken catalog named only by the environment is logged and the packaged one is used,
so a deployment typo never takes the app down.
"""
from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from ..config.catalog import Catalog, CatalogError, PathLike, load_catalog
from ..metrics.multiprocess import multiprocess_dir, multiprocess_registry
from .processor import AgentEvalSpanProcessor
from ..metrics.collector import serve
from ..config.settings import Settings

logger = logging.getLogger(__name__)


def install(
    catalog: Catalog | PathLike | None = None,
    *,
    tracer_provider: TracerProvider | None = None,
    forward_to: SpanProcessor | None = None,
    registry: CollectorRegistry | None = REGISTRY,
    serve_metrics: bool | None = None,
    port: int | None = None,
    addr: str | None = None,
    profile: str | None = None,
    environment: str | None = None,
    **processor_options: Any,
) -> AgentEvalSpanProcessor:
    """Add an `AgentEvalSpanProcessor` to the (global) tracer provider and serve /metrics.

    `forward_to` is the processor that exports spans (e.g. `BatchSpanProcessor(OTLPSpanExporter())`);
    give it here instead of adding it to the provider yourself, so that it receives the
    enriched tool spans. Returns the processor; `processor.shutdown()` also stops the endpoint.
    """
    settings = Settings.from_env().override(profile=profile, environment=environment, metrics_enabled=serve_metrics,
                                            metrics_port=port, metrics_addr=addr)
    processor = build_processor(settings, catalog=catalog, registry=registry, forward_to=forward_to, **processor_options)
    provider = tracer_provider or global_sdk_provider()
    provider.add_span_processor(processor)
    if settings.metrics_enabled and registry is not None:
        start_metrics_endpoint(processor, multiprocess_registry(processor) if multiprocess_dir() else registry, settings)
    start_reloading(processor, settings, catalog)
    return processor


def start_reloading(processor: AgentEvalSpanProcessor, settings: Settings, catalog: Catalog | PathLike | None) -> None:
    """Watch the catalog file and/or reload on SIGHUP, as the settings ask."""
    from .reload import reload_on_sighup, watch_catalog

    path = catalog if catalog is not None and not isinstance(catalog, Catalog) else settings.catalog
    if settings.catalog_poll_seconds > 0 and path is not None:
        watch_catalog(processor, path, settings.catalog_poll_seconds)
    if settings.reload_on_sighup:
        reload_on_sighup(processor, path)


def build_processor(settings: Settings, *, catalog: Catalog | PathLike | None = None, **options: Any) -> AgentEvalSpanProcessor:
    """A processor configured by `settings`; an explicit `catalog` overrides the environment's."""
    loaded = catalog if isinstance(catalog, Catalog) else load_catalog(catalog) if catalog is not None else _catalog_from_env(settings)
    profile = _known(settings.profile, loaded.profiles, "OTEL_AGENT_EVAL_PROFILE")
    environment = _known(settings.environment, loaded.thresholds, "OTEL_AGENT_EVAL_ENVIRONMENT")
    options.setdefault("enrich", settings.enrich)
    options.setdefault("window_s", settings.window_seconds)
    options.setdefault("max_unknown_tools", settings.max_unknown_tools)
    options.setdefault("max_agents", settings.max_agents)
    options.setdefault("redact_keys", settings.redact_keys)
    options.setdefault("drop_tool_io", settings.drop_tool_io)
    return AgentEvalSpanProcessor(loaded, profile=profile, environment=environment, **options)


def start_metrics_endpoint(processor: AgentEvalSpanProcessor, registry: CollectorRegistry, settings: Settings) -> None:
    """Serve /metrics for this processor; a busy port is logged, never raised."""
    try:
        server, thread = serve(registry, port=settings.metrics_port, addr=settings.metrics_addr)
    except OSError as exc:
        logger.error("otel-agent-eval: cannot serve metrics on %s:%s (%s); scoring goes on without the endpoint",
                     settings.metrics_addr, settings.metrics_port, exc)
        return
    processor.metrics_address = server.server_address[:2]

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    processor.close_on_shutdown(stop)
    logger.info("otel-agent-eval: metrics on http://%s:%s/metrics", *processor.metrics_address)


def global_sdk_provider() -> TracerProvider:
    """The global SDK TracerProvider, set up if the app has none yet."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return provider
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        raise RuntimeError("the global tracer provider is not an OpenTelemetry SDK TracerProvider; pass tracer_provider=")
    return current


def _catalog_from_env(settings: Settings) -> Catalog:
    if settings.catalog is None:
        return load_catalog()
    try:
        return load_catalog(settings.catalog)
    except CatalogError as exc:
        logger.error("otel-agent-eval: OTEL_AGENT_EVAL_CATALOG: %s; using the packaged default catalog instead", exc)
        return load_catalog()


def _known(name: str | None, known: Any, variable: str) -> str | None:
    if name is None or name in known:
        return name
    logger.warning("otel-agent-eval: %s=%r is not in the catalog (known: %s); using the catalog's default",
                   variable, name, ", ".join(known))
    return None
