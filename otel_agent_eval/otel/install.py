"""One line in an app: `install()` puts the processor on the global TracerProvider.

    >>> import otel_agent_eval
    >>> otel_agent_eval.install(catalog="catalog.yaml")   # metrics on 127.0.0.1:9464/metrics

Explicit arguments win over `OTEL_AGENT_EVAL_*` environment variables, which win over
defaults (`wiring.resolve`, shared with the zero-code exporter). A catalog file that cannot
be used, given as an argument or by the environment, is logged and the packaged one scores
instead, with `agent_eval_catalog_fallback` at 1: a deployment typo never takes the app down. So is
any other argument that cannot be used: logged, naming it, and its setting or default used instead.
"""
from __future__ import annotations

import difflib
import inspect
import logging
import threading
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from ..config.catalog import Catalog, PathLike
from ..config.settings import ARGUMENTS, Settings
from .exporter import AgentEvalSpanExporter, exporter_behind
from .processor import AgentEvalSpanProcessor
from .wiring import AUTO, attach, build_pipeline

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
    otlp_metrics: Any = AUTO,
    **processor_options: Any,
) -> AgentEvalSpanProcessor | AgentEvalSpanExporter:
    """Add an `AgentEvalSpanProcessor` to the (global) tracer provider and serve /metrics.

    `forward_to` is the processor that exports spans (e.g. `BatchSpanProcessor(OTLPSpanExporter())`);
    give it here instead of adding it to the provider yourself, so that it receives the
    enriched tool spans. The metrics also go out over OTLP on the OTLP metric readers of the app's global
    `MeterProvider` when it has any (set it up before install(); `otlp_metrics=False` keeps them to /metrics; see
    `AgentEvalSpanProcessor` for the other values). Returns the processor; `processor.shutdown()` also stops the endpoint.
    A second call for the same provider returns the running processor (logged), so a module
    imported twice does not score every span twice. Under `opentelemetry-instrument` with
    `OTEL_TRACES_EXPORTER=agent_eval` the zero-code exporter already scores every span of the provider:
    install() logs so and returns that `AgentEvalSpanExporter` (its `reload_catalog()`, `metrics` and
    `metrics_address` work the same), adding nothing.
    """
    provider = tracer_provider or global_sdk_provider()
    with _installing:
        running = _installed.get(provider)
        if running is not None and not running.is_shut_down:
            logger.warning("otel-agent-eval: install() was already called for this TracerProvider; returning the running "
                           "processor (shut it down first to install with other settings)")
            return running
        exporter = zero_code_exporter(provider)
        if exporter is not None:
            logger.warning("otel-agent-eval: install() found the zero-code exporter (OTEL_TRACES_EXPORTER=agent_eval, "
                           "AgentEvalSpanExporter) already scoring this TracerProvider's spans; install() adds nothing "
                           "and returns that exporter (its OTEL_AGENT_EVAL_* settings apply, not install()'s arguments)")
            return exporter
        given = _usable(dict(catalog=catalog, port=port, addr=addr, profile=profile, environment=environment,
                             serve_metrics=serve_metrics, **_known(processor_options)))
        catalog = given.pop("catalog", None)
        settings = Settings.from_env().override(profile=given.pop("profile", None), environment=given.pop("environment", None),
                                                metrics_enabled=given.pop("serve_metrics", None),
                                                metrics_port=given.pop("port", None), metrics_addr=given.pop("addr", None))
        registry = _registry(registry)
        options = dict(forward_to=forward_to, otlp_metrics=_otlp_metrics(otlp_metrics), settings=settings, **given)
        try:
            processor = AgentEvalSpanProcessor(catalog, registry=registry, **options)
        except ValueError as exc:  # the registry is held (another processor's, not shut down): score without it
            if registry is None:
                raise
            logger.error("%s; install() scores without Prometheus metrics in that registry (agent_eval_* not served)", exc)
            processor = AgentEvalSpanProcessor(catalog, registry=None, **options)
        try:  # the provider gets it last, once all else went through; a failure leaves nothing behind
            attach(processor, settings, catalog)
            provider.add_span_processor(processor)
        except BaseException:
            _undo(processor)
            raise
        _installed[provider] = processor
    return processor


def _usable(given: dict[str, Any]) -> dict[str, Any]:
    """The arguments that can be used; a bad one is logged, naming it, and the environment's value or the default
    is used instead, as for a bad environment variable. (A bad `redact_keys` is kept: redaction fails closed.)
    Booleans given as text read as the environment variables' do ("false" is False), never as truthy."""
    usable = {}
    for name, value in given.items():
        check = ARGUMENTS.get(name)
        if check is None:
            usable[name] = value
        elif value is not None:  # None: not given
            try:
                usable[name] = check(value)
            except ValueError as exc:
                logger.warning("otel-agent-eval: ignoring install(%s=%r) (%s); using its environment variable or "
                               "the default", name, value, exc)
    return usable


def _known(options: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the processor takes; any other (a typo) is logged, naming it, and left out."""
    known = _option_names()
    for name in [n for n in options if n not in known]:
        close = difflib.get_close_matches(name, known, n=1)
        logger.warning("otel-agent-eval: ignoring install(%s=%r): unknown argument %s%s", name, options.pop(name), name,
                       f" (did you mean {close[0]}?)" if close else "")
    return options


def _option_names() -> list[str]:
    """`install(**processor_options)` names: the processor's and the pipeline's keyword arguments, less the
    ones install() sets itself."""
    names = {*inspect.signature(AgentEvalSpanProcessor.__init__).parameters, *inspect.signature(build_pipeline).parameters}
    return sorted(names - {"self", "options", "settings", "sees_starts", "catalog", "registry", "forward_to", "otlp_metrics",
                           "profile", "environment"})


def _registry(registry: Any) -> CollectorRegistry | None:
    if registry is None or isinstance(registry, CollectorRegistry):
        return registry
    logger.warning("otel-agent-eval: ignoring install(registry=%r) (expected a prometheus_client CollectorRegistry or "
                   "None); using the default prometheus_client.REGISTRY", registry)
    return REGISTRY


def _otlp_metrics(target: Any) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter

    if target is None or isinstance(target, (bool, MetricExporter, MeterProvider)) or target == AUTO:
        return target
    logger.warning("otel-agent-eval: ignoring install(otlp_metrics=%r) (expected a MetricExporter, a MeterProvider, True "
                   "or False); using the default %r (the global MeterProvider's OTLP readers, if any)", target, AUTO)
    return AUTO


def zero_code_exporter(provider: TracerProvider) -> AgentEvalSpanExporter | None:
    """The running `AgentEvalSpanExporter` behind one of `provider`'s span processors (the SDK configurator puts
    it behind a `BatchSpanProcessor`), or None. The SDK keeps both links private (`_active_span_processor.
    _span_processors`, `BatchSpanProcessor._batch_processor._exporter` in 1.45), so any other layout reads as None."""
    processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ())
    for processor in processors if isinstance(processors, tuple) else ():
        exporter = exporter_behind(processor)
        if isinstance(exporter, AgentEvalSpanExporter) and not exporter.is_shut_down:
            return exporter
    return None


def _undo(processor: AgentEvalSpanProcessor) -> None:
    """Stop a processor that was never installed, freeing its registry; the app's forwarded processor is left alone."""
    processor.forward_to = None
    processor.shutdown()


_installed: weakref.WeakKeyDictionary[TracerProvider, AgentEvalSpanProcessor] = weakref.WeakKeyDictionary()
_installing = threading.Lock()


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
