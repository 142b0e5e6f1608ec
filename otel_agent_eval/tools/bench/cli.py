"""What the kit costs, each figure beside its anchor: the span processor beside the bare SDK and its peers, serve
beside the OpenTelemetry Collector, score beside a plain orjson read (`python -m otel_agent_eval.bench`).

This module holds the sections, their sizes and the command line: it runs the chosen sections and prints the report
(or JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from .instructions import _count_child, instructions
from .judge import serve_judge_section
from .mix import mix_section
from .processor import (CALLS_PER_RUN, FLOOR_VARIANTS, ROOT_ATTRIBUTES, ROOT_NAME, SAMPLE_EVERY, TOOL_SPANS, TOOLS, otlp_metrics_cost,
                        overhead, throughput)
from .report import format_report
from .scale import catalog_scale, routing, scrape_size, scrape_under_load
from .context import context_cost_section
from .score import read_child, score_child, score_section
from .serve import serve_section

SIZES: dict[str, dict[str, Any]] = {
    "default": {"runs": 20_000, "rounds": 20, "warmup": 200, "throughput_runs": 4_000, "throughput_rounds": 3,
                "scrape_s": 5.0, "scrapes": 20, "series": (50, 20), "series_calls": 3,
                "catalogs": ((10_000, 0), (1_000, 1_000)), "route_calls": (100_000, 2_000), "route_cap_s": 2.0,
                "counted_runs": 300, "glob_routes": 10_000, "routing_spans": 4_000, "routing_rounds": 5,
                "serve_s": 10.0, "serve_connections": 4, "serve_runs": 2_000, "latency_runs": 500, "serve_workers": (2,),
                "score_spans": 200_000, "score_rounds": 3, "mix_serve_runs": 700,
                "judge_s": 60.0, "judge_rounds": 2, "judge_warm_s": 3.0},
    "quick": {"runs": 60, "rounds": 2, "warmup": 10, "throughput_runs": 40, "throughput_rounds": 1,
              "scrape_s": 0.3, "scrapes": 2, "series": (5, 2), "series_calls": 1,
              "catalogs": ((200, 0), (30, 30)), "route_calls": (2_000, 200), "route_cap_s": 0.2,
              "counted_runs": 30, "glob_routes": 200, "routing_spans": 100, "routing_rounds": 1,
              "serve_s": 1.0, "serve_connections": 2, "serve_runs": 150, "latency_runs": 40, "serve_workers": (),
              "score_spans": 5_000, "score_rounds": 1, "mix_serve_runs": 50,
              "judge_s": 1.0, "judge_rounds": 1, "judge_warm_s": 0.5},
}
SECTIONS = ("overhead", "throughput", "scrape-load", "scrape-size", "catalog", "otlp-metrics", "routing",
            "context-cost")  # the full run
ON_REQUEST = ("instructions", "floor")  # minutes under valgrind; a diagnostic of the targets: run when asked for
FLEET = ("serve", "score", "mix", "serve-judge")  # the fleet's figures beside their anchors: processes of their own, in
# the full run too; `mix`: every path on the realistic mix (mostly spans with nothing to score), beside its old path;
# `serve-judge`: serve with the online judge off, hanging and answering
SPANS_PER_REQUEST = 512  # as a BatchSpanProcessor sends them
LATENCY_SPANS_PER_REQUEST = 64  # more requests to take quantiles over


# -- running and reporting -------------------------------------------------------------

def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def environment() -> dict[str, Any]:
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "opentelemetry_sdk": _version("opentelemetry-sdk"), "prometheus_client": _version("prometheus-client"),
            "otel_agent_eval": _version("otel-agent-eval"),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "switch_interval_s": sys.getswitchinterval()}


def run(*, quick: bool = False, runs: int | None = None, rounds: int | None = None,
        sections: Sequence[str] = SECTIONS + FLEET, score_file: str | None = None,
        score_spans: int | None = None) -> dict[str, Any]:
    """Runs the chosen sections; returns everything as plain JSON-able data."""
    size = dict(SIZES["quick" if quick else "default"])
    size["runs"] = runs or size["runs"]
    size["rounds"] = rounds or size["rounds"]
    result: dict[str, Any] = {"environment": environment(), "quick": quick, "sections": list(sections),
                              "workload": {"root": {"name": ROOT_NAME, "attributes": ROOT_ATTRIBUTES},
                                           "tools_per_run": CALLS_PER_RUN, "tools": list(TOOLS),
                                           "tool_attributes": dict(TOOL_SPANS[1][1]), "sample_every_runs": SAMPLE_EVERY}}
    if "overhead" in sections:
        result["overhead"] = overhead(size["runs"], size["rounds"], size["warmup"])
    if "throughput" in sections:
        result["throughput"] = throughput(size["throughput_runs"], size["throughput_rounds"])
    if "scrape-load" in sections:
        result["scrape_under_load"] = scrape_under_load(size["scrape_s"])
    if "scrape-size" in sections:
        result["scrape_size"] = scrape_size(*size["series"], size["series_calls"], size["scrapes"])
    if "catalog" in sections:
        result["catalog_scale"] = [catalog_scale(tools, routes, *size["route_calls"], size["route_cap_s"])
                                   for tools, routes in size["catalogs"]]
    if "routing" in sections:
        result["routing"] = routing(size["glob_routes"], size["routing_spans"], size["routing_rounds"])
    if "instructions" in sections:
        result["instructions"] = instructions(size["counted_runs"])
    if "otlp-metrics" in sections:
        result["otlp_metrics"] = otlp_metrics_cost(size["runs"], size["rounds"], size["warmup"], size["scrapes"])
    if "context-cost" in sections:
        result["context_cost"] = context_cost_section(size["runs"] // 2, size["rounds"], size["warmup"])
    if "floor" in sections:
        result["floor"] = overhead(size["runs"], size["rounds"], size["warmup"], FLOOR_VARIANTS)
    if "serve" in sections:
        result["serve"] = serve_section(size["serve_s"], size["serve_connections"], SPANS_PER_REQUEST, size["serve_runs"],
                                        LATENCY_SPANS_PER_REQUEST, size["latency_runs"], size["serve_workers"])
    if "score" in sections:
        result["score"] = score_section(score_spans or size["score_spans"], size["score_rounds"], score_file)
    if "mix" in sections:
        result["mix"] = mix_section(dict(size, score_spans=score_spans or size["score_spans"]), SPANS_PER_REQUEST)
    if "serve-judge" in sections:
        result["serve_judge"] = serve_judge_section(size["judge_s"], size["serve_connections"], SPANS_PER_REQUEST,
                                                    size["serve_runs"], size["judge_rounds"], size["judge_warm_s"])
    result["environment"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otel_agent_eval.bench", description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--runs", type=int, help=f"agent runs per variant over all rounds (default {SIZES['default']['runs']})")
    parser.add_argument("--rounds", type=int, help=f"interleaved rounds (default {SIZES['default']['rounds']})")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs, measures nothing")
    parser.add_argument("--section", choices=SECTIONS + FLEET + ON_REQUEST,
                        help="run one section only (instructions and floor: only when asked for; instructions needs valgrind; "
                             "serve compares with the Collector `bash .ci/collector` builds)")
    parser.add_argument("--score-file", metavar="PATH",
                        help="the score section's demo file: written there once, reused when it exists (default: a "
                             "temporary file per run)")
    parser.add_argument("--score-spans", type=int, metavar="N",
                        help=f"spans of the score section's demo file when it is written (default "
                             f"{SIZES['default']['score_spans']:,}: writing runs at about 5,000 spans/s)")
    parser.add_argument("--count-child", nargs=2, metavar=("VARIANT", "RUNS"), help=argparse.SUPPRESS)
    parser.add_argument("--score-child", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--read-child", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count_child:
        _count_child(args.count_child[0], int(args.count_child[1]))
        return 0
    if args.score_child:
        score_child(args.score_child)
        return 0
    if args.read_child:
        read_child(args.read_child)
        return 0
    if (args.runs is not None and args.runs < 1) or (args.rounds is not None and args.rounds < 1):
        parser.error("--runs and --rounds must be positive")
    if args.score_spans is not None and args.score_spans < 1:
        parser.error("--score-spans must be positive")
    try:
        result = run(quick=args.quick, runs=args.runs, rounds=args.rounds,
                     sections=(args.section,) if args.section else SECTIONS + FLEET, score_file=args.score_file,
                     score_spans=args.score_spans)
    except (OSError, RuntimeError) as exc:  # a --score-file that cannot be written or read, a child that failed
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
