"""A buffered multiprocess mirror (`serve --workers`) writes the files the unbuffered one writes, once flushed.

prometheus-client picks its file-backed values when imported with PROMETHEUS_MULTIPROC_DIR set, so each
mode runs the same demo spans in a process of its own, into a directory of its own; the files are read
back here with `MultiProcessCollector`, as `serve --workers` serves them.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

APP = textwrap.dedent('''
    import itertools, json, sys
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    from otel_agent_eval.otel.wiring import build_pipeline
    from otel_agent_eval.tools.demo import run_workload

    buffered, directory = sys.argv[1] == "buffered", sys.argv[2]
    memory = InMemorySpanExporter()
    ticks = itertools.count(1_700_000_000_000_000_000, 7_919_000)  # the same times in both processes
    run_workload(SimpleSpanProcessor(memory), runs=120, suboptimal_share=0.3, seed=11, clock=lambda: next(ticks))
    pipeline, metrics = build_pipeline(registry=None)
    mirror = metrics.mirror
    if buffered:
        mirror.buffer()
    spans = memory.get_finished_spans()
    for i, span in enumerate(spans):
        pipeline.ended(span)
        if buffered and i == len(spans) // 2:
            mirror.flush(metrics)
    pipeline.close_all()

    def calls():
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
        return sum(s.value for f in registry.collect() if f.name == "agent_eval_tool_calls" for s in f.samples)

    before = calls()
    mirror.flush_tallies(metrics)
    mirror.flush(metrics)
    print(json.dumps({"before_flush": before, "after_flush": calls()}))
''')


def _run(mode: str, tmp_path) -> tuple[dict[str, float], dict[tuple, float]]:
    directory = tmp_path / mode
    directory.mkdir()
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "OTEL_AGENT_EVAL_CATALOG": ""}
    run = subprocess.run([sys.executable, str(app), mode, str(directory)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}
    return json.loads(run.stdout.splitlines()[-1]), samples


def test_buffered_mirror_writes_what_the_unbuffered_one_writes(tmp_path):
    plain, expected = _run("plain", tmp_path)
    buffered, got = _run("buffered", tmp_path)
    assert plain["before_flush"] == plain["after_flush"] > 0  # unbuffered: written as they come
    assert 0 < buffered["before_flush"] < buffered["after_flush"] == plain["after_flush"]  # held until flushed
    assert got.keys() == expected.keys()
    assert any(name.endswith("_bucket") for name, _ in got)
    for key, value in expected.items():  # counts exactly; sums added in another order, to the last bits
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-12), key


def _otlp(collect) -> list:
    """Every OTLP point of `collect`'s families, as comparable text, each family's points sorted."""
    from otel_agent_eval.metrics.otlp import OtlpMetrics

    out = []
    for metric in OtlpMetrics(collect, histograms="explicit").metrics():
        points = sorted(repr((sorted(p.attributes.items()), getattr(p, "value", None), getattr(p, "count", None),
                              getattr(p, "sum", None), list(getattr(p, "bucket_counts", ()) or ()),
                              list(getattr(p, "explicit_bounds", ()) or ()))) for p in metric.data.data_points)
        out.append((metric.name, metric.unit, type(metric.data).__name__, points))
    return sorted(out)


def test_file_sums_serve_what_prometheus_client_sums(tmp_path):
    """`FileSums` (what `serve --workers` and the multiprocess registry read the files with) gives the series
    prometheus-client's collector gives, on the files of two processes, in a scrape and over OTLP, collection after
    collection (its parsed keys are kept)."""
    from prometheus_client.exposition import generate_latest

    from otel_agent_eval.metrics.families import BucketFamily
    from otel_agent_eval.metrics.multiprocess import FileSums

    directory = tmp_path / "both"
    directory.mkdir()
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "OTEL_AGENT_EVAL_CATALOG": ""}
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    MultiProcessCollector(theirs, path=str(directory))
    sums = FileSums(ours, path=str(directory))
    for mode in ("plain", "buffered"):  # a second process adds its own files to the same series
        run = subprocess.run([sys.executable, str(app), mode, str(directory)], env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        for _ in range(2):
            families = list(sums.collect())
            assert any(isinstance(f, BucketFamily) and f.points for f in families)
            assert sorted(generate_latest(ours).decode().splitlines()) == sorted(generate_latest(theirs).decode().splitlines())
            assert _otlp(sums.collect) == _otlp(lambda: MultiProcessCollector.merge(
                [str(p) for p in directory.glob("*.db")]))
    assert len(list(directory.glob("histogram_*.db"))) == 2
