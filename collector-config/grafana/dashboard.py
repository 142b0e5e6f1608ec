"""The kit's Grafana dashboard as code: writes grafana/dashboards/agent-eval.json (`make dashboard`).

Built with Grafana's grafana-foundation-sdk: its typed builders fail at generation on a misspelt option or a
call of the wrong form, and option values are its enums, where hand-written JSON took anything silently.
tests/test_ops_dashboard.py fails when the committed JSON differs from what this writes, and holds every
panel and query of the hand-written dashboard this replaced.

A section is one function returning its panels; SECTIONS lists them in order, each under a row. Panels flow
left to right, 24 columns to a line (a stat is 4 wide, a time series 12 or 8). To add a panel, append a
`stat(...)`, `timeseries(...)` or `table(...)` to a section's list; to add a section, write a function and
add it to SECTIONS. collector-config/README.md ("Dashboard as code") says more.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.stat import Panel as StatPanel
from grafana_foundation_sdk.builders.table import Panel as TablePanel
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, dashboard
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "agent-eval.json"
UID = "otel-agent-eval"  # the provisioned dashboard's identity: keep it, or links and bookmarks break
DATASOURCE = common.DataSourceRef(type_val="prometheus", uid="${datasource}")  # the "Data source" variable

Panel = Builder[dashboard.Panel]
P = TypeVar("P", StatPanel, TimeseriesPanel, TablePanel)
Steps = Sequence[tuple[str, float | None]]  # (colour, from value); the first step's value is None (-Infinity)


# -- queries -------------------------------------------------------------------------------------


def series(expr: str, legend: str, *, exemplar: bool = False) -> PrometheusQuery:
    """A range query: one line per series over time."""
    query = PrometheusQuery().datasource(DATASOURCE).expr(expr).legend_format(legend).range()
    return query.exemplar(True) if exemplar else query


def instant(expr: str, legend: str = "__auto", *, table: bool = False) -> PrometheusQuery:
    """An instant query over the time range ($__range): one value per series."""
    query = PrometheusQuery().datasource(DATASOURCE).expr(expr).legend_format(legend).instant()
    return query.format(PromQueryFormat.TABLE) if table else query


def with_targets(panel: P, targets: Sequence[PrometheusQuery]) -> P:
    """The queries of a panel, lettered A, B, C... in order (overrides refer to them by letter)."""
    for letter, target in zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", targets):
        panel.with_target(target.ref_id(letter))
    return panel


# -- panels --------------------------------------------------------------------------------------


def thresholds(steps: Steps) -> dash.ThresholdsConfig:
    return dash.ThresholdsConfig().mode(dashboard.ThresholdsMode.ABSOLUTE).steps(
        [dashboard.Threshold(value=value, color=colour) for colour, value in steps])


def stat(title: str, description: str, unit: str, steps: Steps, expr: str, *,
         decimals: int | None = None, width: int = 4, height: int = 4) -> StatPanel:
    """One number over the time range, coloured by fixed thresholds."""
    panel = (StatPanel().title(title).description(description).datasource(DATASOURCE).span(width).height(height)
             .unit(unit).color_scheme(dash.FieldColor().mode(dashboard.FieldColorModeId.THRESHOLDS)).thresholds(thresholds(steps))
             .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
             .color_mode(common.BigValueColorMode.VALUE).graph_mode(common.BigValueGraphMode.AREA)
             .text_mode(common.BigValueTextMode.AUTO).justify_mode(common.BigValueJustifyMode.AUTO)
             .orientation(common.VizOrientation.AUTO))
    if decimals is not None:
        panel.decimals(decimals)
    return with_targets(panel, [instant(expr)])


def dashed_line(colour: str | None) -> list[dashboard.DynamicConfigValue]:
    """A reference line (a threshold, an SLO): dashed, unfilled, in a fixed colour if given."""
    properties = [dashboard.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})]
    if colour is not None:
        properties.append(dashboard.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour}))
    return [*properties, dashboard.DynamicConfigValue(id_val="custom.fillOpacity", value=0)]


def timeseries(title: str, description: str, unit: str, *targets: PrometheusQuery, width: int = 12, height: int = 8,
               min: float = 0, max: float | None = None, decimals: int | None = None, stacked: bool = False,
               dashed: Mapping[str, str | None] | None = None, colors: Mapping[str, str] | None = None) -> TimeseriesPanel:
    """Lines over time with a table legend on the right. `dashed` draws the queries of those letters as dashed
    reference lines (in a colour, or None for the series' own); `colors` fixes the colour of series by name;
    `stacked` stacks the series as filled areas."""
    panel = (TimeseriesPanel().title(title).description(description).datasource(DATASOURCE).span(width).height(height)
             .unit(unit).min(min).draw_style(common.GraphDrawStyle.LINE).line_width(1)
             .fill_opacity(60 if stacked else 10).show_points(common.VisibilityMode.NEVER).span_nulls(False)
             .stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL if stacked else common.StackingMode.NONE).group("A"))
             .legend(common_builders.VizLegendOptions().display_mode(common.LegendDisplayMode.TABLE)
                     .placement(common.LegendPlacement.RIGHT).calcs(["lastNotNull", "max"]).show_legend(True))
             .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)))
    if max is not None:
        panel.max(max)
    if decimals is not None:
        panel.decimals(decimals)
    for letter, colour in (dashed or {}).items():
        panel.override_by_query(letter, dashed_line(colour))
    for name, colour in (colors or {}).items():
        panel.override_by_name(name, [dashboard.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour})])
    return with_targets(panel, targets)


def table(title: str, description: str, *targets: PrometheusQuery, columns: Mapping[str, tuple[str, str, int]],
          rename: Mapping[str, str], sort_by: str, width: int = 12, height: int = 8) -> TablePanel:
    """Instant table queries merged into one table. `columns` names each query's value column
    ("Value #A": (header, unit, decimals)), `rename` the label columns; rows are sorted by `sort_by`, descending."""
    panel = (TablePanel().title(title).description(description).datasource(DATASOURCE).span(width).height(height)
             .unit("short").show_header(True).sort_by([common_builders.TableSortByFieldState().display_name(sort_by).desc(True)])
             .with_transformation(dashboard.DataTransformerConfig(id_val="merge", options={}))
             .with_transformation(dashboard.DataTransformerConfig(id_val="organize", options={
                 "excludeByName": {"Time": True}, "renameByName": dict(rename)})))
    for column, (header, unit, decimals) in columns.items():
        panel.override_by_name(column, [dashboard.DynamicConfigValue(id_val="displayName", value=header),
                                        dashboard.DynamicConfigValue(id_val="unit", value=unit),
                                        dashboard.DynamicConfigValue(id_val="decimals", value=decimals)])
    return with_targets(panel, targets)


def overview() -> list[Panel]:
    """Overview (selected time range)."""
    return [
        stat("Mean tool efficiency",
             ("Mean efficiency score (0-100 %) of the selected tool calls over the time range; 100 % means "
              "every call used the catalog's optimal tool."),
             "percentunit", [("red", None), ("orange", 0.85), ("green", 0.95)],
             ('sum(rate(agent_eval_tool_efficiency_score_sum{dimension="efficiency", job=~"$job", '
              'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range])) / '
              'sum(rate(agent_eval_tool_efficiency_score_count{dimension="efficiency", job=~"$job", '
              'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range]))')),
        stat("Money wasted",
             "USD paid over the time range beyond what the optimal tools would have cost.",
             "currencyUSD", [("green", None), ("orange", 1), ("red", 10)],
             ('sum(increase(agent_eval_tool_excess_cost_usd_total{job=~"$job", gen_ai_agent_name=~"$agent", '
              'gen_ai_tool_name=~"$tool"}[$__range]))'), decimals=2),
        stat("Suboptimal calls",
             "Share of the selected tool calls that used a suboptimal tool over the time range.",
             "percentunit", [("green", None), ("orange", 0.1), ("red", 0.2)],
             ('(sum(increase(agent_eval_tool_calls_total{outcome="suboptimal", job=~"$job", '
              'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range])) or vector(0)) / '
              'sum(increase(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
              'gen_ai_tool_name=~"$tool"}[$__range]))')),
        stat("Tool calls",
             "Tool calls per second, averaged over the time range.",
             "ops", [("green", None)],
             ('sum(rate(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
              'gen_ai_tool_name=~"$tool"}[$__range]))')),
        stat("Run completion",
             "Share of the selected agents' runs that completed over the time range.",
             "percentunit", [("red", None), ("orange", 0.95), ("green", 0.99)],
             ('(sum(increase(agent_eval_runs_total{outcome="completed", job=~"$job", '
              'gen_ai_agent_name=~"$agent"}[$__range])) or vector(0)) / '
              'sum(increase(agent_eval_runs_total{job=~"$job", gen_ai_agent_name=~"$agent"}[$__range]))')),
        stat("Cost per run",
             "Mean cost of one agent run (tool calls plus priced LLM tokens) over the time range.",
             "currencyUSD", [("green", None)],
             ('sum(rate(agent_eval_run_cost_usd_sum{job=~"$job", gen_ai_agent_name=~"$agent"}[$__range])) / '
              'sum(rate(agent_eval_run_cost_usd_count{job=~"$job", gen_ai_agent_name=~"$agent"}[$__range]))'), decimals=4),
    ]


def tool_choice() -> list[Panel]:
    """Tool choice."""
    return [
        timeseries(
            "Efficiency by tool and agent",
            ("Mean efficiency score (0-1, shown as %) of the calls each agent made to each tool, with the "
             "catalog's warn and fail thresholds of the environment configured in the recording rules. A tool "
             "well below the lines is being used where a cheaper or faster one fits."),
            "percentunit",
            series(('sum by (gen_ai_agent_name, gen_ai_tool_name) '
                    '(rate(agent_eval_tool_efficiency_score_sum{dimension="efficiency", job=~"$job", '
                    'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval])) / sum by '
                    '(gen_ai_agent_name, gen_ai_tool_name) '
                    '(rate(agent_eval_tool_efficiency_score_count{dimension="efficiency", job=~"$job", '
                    'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}} / {{gen_ai_tool_name}}"),
            series("agent_eval:efficiency_threshold:warn",
                   "warn threshold ({{environment}})"),
            series("agent_eval:efficiency_threshold:fail",
                   "fail threshold ({{environment}})"),
            max=1, dashed={"B": "orange", "C": "red"},
        ),
        timeseries(
            "Efficiency by agent",
            ("Mean efficiency of all of an agent's tool calls, weighted by calls: the value the efficiency "
             "alerts watch, with the fail threshold."),
            "percentunit",
            series(('sum by (gen_ai_agent_name) (rate(agent_eval_tool_efficiency_score_sum{dimension="efficiency", '
                    'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval])) / sum '
                    'by (gen_ai_agent_name) (rate(agent_eval_tool_efficiency_score_count{dimension="efficiency", '
                    'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}}"),
            series("agent_eval:efficiency_threshold:fail",
                   "fail threshold ({{environment}})"),
            max=1, dashed={"B": "red"},
        ),
        timeseries(
            "Money wasted per hour by tool -> optimal tool",
            "USD per hour paid beyond the optimal tool's cost, per agent and chosen tool -> optimal tool pair.",
            "currencyUSD",
            series(('3600 * sum by (gen_ai_agent_name, gen_ai_tool_name, optimal_tool) '
                    '(rate(agent_eval_tool_excess_cost_usd_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}}: {{gen_ai_tool_name}} -> {{optimal_tool}}"),
            decimals=2, stacked=True,
        ),
        timeseries(
            "Outcome mix",
            ("Share of tool calls by outcome: optimal, acceptable (an allowed alternative), suboptimal, "
             "unknown_tool (not in the catalog) and error."),
            "percentunit",
            series(('sum by (outcome) (rate(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval])) / ignoring (outcome) group_left () '
                    'sum(rate(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{outcome}}"),
            max=1, stacked=True, colors={"optimal": "green", "acceptable": "blue", "suboptimal": "orange", "unknown_tool": "purple", "error": "red"},
        ),
        table(
            "Top suboptimal tool -> optimal tool pairs",
            ("The ten agent / chosen tool / optimal tool combinations with the most suboptimal calls in the "
             "time range, with the money they wasted. Start a fix here: the prompt or tool descriptions of "
             "that agent."),
            instant(('topk(10, sum by (gen_ai_agent_name, gen_ai_tool_name, optimal_tool) '
                     '(increase(agent_eval_tool_calls_total{outcome="suboptimal", job=~"$job", '
                     'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range])))'), table=True),
            instant(('topk(10, sum by (gen_ai_agent_name, gen_ai_tool_name, optimal_tool) '
                     '(increase(agent_eval_tool_excess_cost_usd_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                     'gen_ai_tool_name=~"$tool"}[$__range])))'), table=True),
            columns={"Value #A": ("suboptimal calls", "short", 0), "Value #B": ("wasted", "currencyUSD", 2)},
            rename={"gen_ai_agent_name": "agent", "gen_ai_tool_name": "chosen tool", "optimal_tool": "optimal tool"},
            sort_by="suboptimal calls",
        ),
        timeseries(
            "Suboptimal-call ratio by agent and task",
            "Share of each agent's calls for a task that used a suboptimal tool, with the alert's limit.",
            "percentunit",
            series(('(sum by (gen_ai_agent_name, task) (rate(agent_eval_tool_calls_total{outcome="suboptimal", '
                    'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval])) or 0 * '
                    'sum by (gen_ai_agent_name, task) (rate(agent_eval_tool_calls_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))) / sum by '
                    '(gen_ai_agent_name, task) (rate(agent_eval_tool_calls_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}} / {{task}}"),
            series("agent_eval:suboptimal_ratio:max",
                   "limit"),
            max=1, dashed={"B": "red"},
        ),
    ]


def latency() -> list[Panel]:
    """Latency."""
    return [
        timeseries(
            "Tool latency p50 / p95 / p99 (fleet)",
            ("Latency quantiles per tool across all instances and agents (the histogram has no agent label: "
             "the agent filter does not apply here; per-agent quantiles are in the panel beside it), from the "
             "gen_ai.execute_tool.duration histogram (buckets ~9 % wide), with each tool's catalog SLO as a "
             "dashed line. Exemplars link to traces in Tempo."),
            "s",
            series(('histogram_quantile(0.5, sum by (le, gen_ai_tool_name) '
                    '(rate(gen_ai_execute_tool_duration_seconds_bucket{job=~"$job", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval])))'),
                   "{{gen_ai_tool_name}} p50"),
            series(('histogram_quantile(0.95, sum by (le, gen_ai_tool_name) '
                    '(rate(gen_ai_execute_tool_duration_seconds_bucket{job=~"$job", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval])))'),
                   "{{gen_ai_tool_name}} p95"),
            series(('histogram_quantile(0.99, sum by (le, gen_ai_tool_name) '
                    '(rate(gen_ai_execute_tool_duration_seconds_bucket{job=~"$job", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval])))'),
                   "{{gen_ai_tool_name}} p99", exemplar=True),
            series(('max by (gen_ai_tool_name) (agent_eval_tool_latency_slo_seconds{job=~"$job", '
                    'gen_ai_tool_name=~"$tool"})'),
                   "{{gen_ai_tool_name}} SLO"),
            dashed={"D": None},
        ),
        timeseries(
            "Per-instance p99 (5-minute sliding window)",
            ("The p99 each app instance computes over its last 5 minutes (agent_eval_tool_latency_seconds): "
             "exact per process, for spotting one slow instance; never average these across instances."),
            "s",
            series(('max by (instance, gen_ai_tool_name) (agent_eval_tool_latency_seconds{quantile="0.99", '
                    'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"})'),
                   "{{instance}} {{gen_ai_tool_name}}"),
        ),
        timeseries(
            "SLO violations per second",
            "Tool calls per second slower than their tool's catalog latency SLO.",
            "ops",
            series(('sum by (gen_ai_tool_name) (rate(agent_eval_tool_slo_violations_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{gen_ai_tool_name}}"),
        ),
        timeseries(
            "Time lost to slower tools",
            ("Seconds of waiting per second (summed over concurrent calls) beyond the optimal tool's expected "
             "latency, per agent."),
            "s",
            series(('sum by (gen_ai_agent_name) (rate(agent_eval_tool_excess_latency_seconds_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}}"),
        ),
    ]


def agent_runs() -> list[Panel]:
    """Agent runs."""
    return [
        timeseries(
            "Runs per second by outcome",
            ("Agent runs (one agent invocation, assembled from its trace) per second, completed or failed, per "
             "agent and task."),
            "ops",
            series(('sum by (gen_ai_agent_name, task, outcome) (rate(agent_eval_runs_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}} / {{task}}: {{outcome}}"),
            stacked=True,
        ),
        timeseries(
            "Run completion rate",
            "Share of runs that completed, per agent and task, with the alert's objective.",
            "percentunit",
            series(('(sum by (gen_ai_agent_name, task) (rate(agent_eval_runs_total{outcome="completed", job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])) or 0 * sum by (gen_ai_agent_name, task) '
                    '(rate(agent_eval_runs_total{job=~"$job", gen_ai_agent_name=~"$agent"}[$__rate_interval]))) / sum '
                    'by (gen_ai_agent_name, task) (rate(agent_eval_runs_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}} / {{task}}"),
            series("agent_eval:run_completion_ratio:min",
                   "objective"),
            max=1, dashed={"B": "red"},
        ),
        timeseries(
            "Cost per run (mean and p95)",
            ("Mean and p95 cost of one run in USD (catalog tool costs plus LLM tokens priced by the catalog's "
             "models), per agent and task."),
            "currencyUSD",
            series(('sum by (gen_ai_agent_name, task) (rate(agent_eval_run_cost_usd_sum{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                    '(rate(agent_eval_run_cost_usd_count{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}} / {{task}} mean"),
            series(('histogram_quantile(0.95, sum by (le, gen_ai_agent_name, task) '
                    '(rate(agent_eval_run_cost_usd_bucket{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])))'),
                   "{{gen_ai_agent_name}} / {{task}} p95"),
            decimals=4,
        ),
        timeseries(
            "Run duration p50 / p95",
            "How long agent runs take end to end, per agent and task.",
            "s",
            series(('histogram_quantile(0.5, sum by (le, gen_ai_agent_name, task) '
                    '(rate(agent_eval_run_duration_seconds_bucket{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])))'),
                   "{{gen_ai_agent_name}} / {{task}} p50"),
            series(('histogram_quantile(0.95, sum by (le, gen_ai_agent_name, task) '
                    '(rate(agent_eval_run_duration_seconds_bucket{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])))'),
                   "{{gen_ai_agent_name}} / {{task}} p95"),
        ),
        timeseries(
            "Tool calls per run",
            "Mean number of tool calls in a run, per agent and task; a rise often means retries or loops.",
            "short",
            series(('sum by (gen_ai_agent_name, task) (rate(agent_eval_run_tool_calls_sum{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                    '(rate(agent_eval_run_tool_calls_count{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "{{gen_ai_agent_name}} / {{task}}"),
            width=8, decimals=2,
        ),
        timeseries(
            "Redundant and spurious calls, runs over max_calls",
            ("Per second: redundant calls (the same tool with the same arguments again within a run) and "
             "spurious calls (tools outside the task's expected and acceptable tools), per agent and tool; and "
             "runs that made more tool calls than their task's max_calls."),
            "ops",
            series(('sum by (gen_ai_agent_name, gen_ai_tool_name) '
                    '(rate(agent_eval_redundant_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "redundant {{gen_ai_agent_name}} / {{gen_ai_tool_name}}"),
            series(('sum by (gen_ai_agent_name, gen_ai_tool_name) '
                    '(rate(agent_eval_spurious_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                    'gen_ai_tool_name=~"$tool"}[$__rate_interval]))'),
                   "spurious {{gen_ai_agent_name}} / {{gen_ai_tool_name}}"),
            series(('sum by (gen_ai_agent_name, task) (rate(agent_eval_runs_over_budget_total{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "runs over max_calls {{gen_ai_agent_name}} / {{task}}"),
            width=8,
        ),
        timeseries(
            "Run health and tool correctness",
            ("Mean run health score (0-100: completion, tool accuracy, latency, cost) and mean tool "
             "correctness against the task's expected tools (deepeval semantics, 0-1 shown as 0-100), per "
             "agent and task."),
            "none",
            series(('sum by (gen_ai_agent_name, task) (rate(agent_eval_run_health_score_sum{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                    '(rate(agent_eval_run_health_score_count{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "health {{gen_ai_agent_name}} / {{task}}"),
            series(('100 * sum by (gen_ai_agent_name, task) (rate(agent_eval_tool_correctness_score_sum{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                    '(rate(agent_eval_tool_correctness_score_count{job=~"$job", '
                    'gen_ai_agent_name=~"$agent"}[$__rate_interval]))'),
                   "correctness {{gen_ai_agent_name}} / {{task}}"),
            width=8, max=100, decimals=1,
        ),
    ]


def true_cost() -> list[Panel]:
    """True cost: what each tool call's result adds to the run's later model calls (docs/true-cost.md)."""
    tool_agent = 'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"'
    return [
        timeseries(
            "Context cost per tool call",
            ("Mean USD of later model-call input that one call's result caused, per tool and agent over the last "
             "hour, with the same over the previous day (dashed): the context-cost jump alert compares the two."),
            "currencyUSD",
            series(f"tool_agent:agent_eval_tool_context_cost_per_call_usd:rate1h{{{tool_agent}}}",
                   "{{gen_ai_agent_name}} / {{gen_ai_tool_name}}"),
            series(f"tool_agent:agent_eval_tool_context_cost_per_call_usd:rate1d_offset1h{{{tool_agent}}}",
                   "{{gen_ai_agent_name}} / {{gen_ai_tool_name}} (previous day)"),
            decimals=6, dashed={"B": None},
        ),
        timeseries(
            "True cost per tool call",
            ("The catalog's price of one call plus the mean context cost its result caused over the last hour, "
             "per tool: what a call of the tool really costs the agent."),
            "currencyUSD",
            series(('max by (gen_ai_tool_name) (agent_eval_tool_cost_per_call_usd{job=~"$job", gen_ai_tool_name=~"$tool"}) '
                    f'+ on (gen_ai_tool_name) sum by (gen_ai_tool_name) (rate(agent_eval_tool_context_cost_usd_total{{{tool_agent}}}[1h])) '
                    f'/ sum by (gen_ai_tool_name) (rate(agent_eval_tool_context_calls_total{{{tool_agent}}}[1h]))'),
                   "{{gen_ai_tool_name}}"),
            decimals=6,
        ),
        timeseries(
            "Input tokens added by tool results",
            "Input tokens per second that tool results added to later model calls, stacked by tool.",
            "short",
            series(f"sum by (gen_ai_tool_name) (rate(agent_eval_tool_context_tokens_total{{{tool_agent}}}[$__rate_interval]))",
                   "{{gen_ai_tool_name}}"),
            stacked=True,
        ),
        timeseries(
            "Context cost per hour by agent",
            "USD per hour of model-call input caused by tool results, per agent.",
            "currencyUSD",
            series(f"3600 * sum by (gen_ai_agent_name) (rate(agent_eval_tool_context_cost_usd_total{{{tool_agent}}}[$__rate_interval]))",
                   "{{gen_ai_agent_name}}"),
            decimals=4,
        ),
    ]


def llm_judge() -> list[Panel]:
    """The tool-selection judge (docs/judge.md): deepeval's ToolCorrectnessMetric with an LLM, on a sample of runs."""
    agent = 'job=~"$job", gen_ai_agent_name=~"$agent"'
    return [
        timeseries(
            "Judged tool selection by agent and task",
            ("Mean judged tool-correctness score (0-1) of the runs judged in the last hour, per agent and task, with "
             "the alert's lowest acceptable mean (dashed). A sample: see the runs judged beside it."),
            "percentunit",
            series(f"agent_task:agent_eval_judge_score:mean_rate1h{{{agent}}}", "{{gen_ai_agent_name}} / {{task}}"),
            series("agent_eval:judge_score:min", "alert threshold"),
            max=1, dashed={"B": "red"},
        ),
        timeseries(
            "Runs judged per hour",
            "Runs the judge scored over the last hour, per agent and task: how much the score beside it rests on.",
            "short",
            series(f"agent_task:agent_eval_judge_score:count_1h{{{agent}}}", "{{gen_ai_agent_name}} / {{task}}"),
        ),
        timeseries(
            "Judgements by outcome",
            ("Completed runs per second by what the judge did with them: judged, sampled_out, over_budget, dropped "
             "(queue full), failed, timed_out."),
            "ops",
            series('sum by (outcome) (rate(agent_eval_judgements_total{job=~"$job"}[$__rate_interval]))', "{{outcome}}"),
            width=8, stacked=True,
        ),
        timeseries(
            "Judge spend per hour",
            "USD per hour of judge tokens, priced like every other LLM call.",
            "currencyUSD",
            series('3600 * sum(rate(agent_eval_judge_cost_usd_total{job=~"$job"}[$__rate_interval]))', "USD per hour"),
            width=8, decimals=4,
        ),
        timeseries(
            "Judge latency p50 / p95",
            "Time one judgement took, answered or not.",
            "s",
            series('histogram_quantile(0.5, sum by (le) (rate(agent_eval_judge_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))',
                   "p50"),
            series('histogram_quantile(0.95, sum by (le) (rate(agent_eval_judge_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))',
                   "p95"),
            width=8,
        ),
        table(
            "Judge model and prompt version",
            ("Runs judged in the time range by judge model and deepeval prompt version: a change of score that comes "
             "with a new row is a change of judge, not of agent."),
            instant(f'sum by (judge_model, prompt_version) (increase(agent_eval_judge_score_count{{{agent}}}[$__range]))',
                    table=True),
            columns={"Value #A": ("runs judged", "short", 0)},
            rename={"judge_model": "judge model", "prompt_version": "prompt version"}, sort_by="runs judged", width=24, height=6,
        ),
    ]


def processor_health() -> list[Panel]:
    """Processor health."""
    return [
        timeseries(
            "Spans per second",
            "Spans the processor saw, scored as tool calls, and ignored (not tool calls), per instance.",
            "ops",
            series('sum by (instance) (rate(agent_eval_processor_spans_seen_total{job=~"$job"}[$__rate_interval]))',
                   "seen {{instance}}"),
            series('sum by (instance) (rate(agent_eval_processor_spans_scored_total{job=~"$job"}[$__rate_interval]))',
                   "scored {{instance}}"),
            series('sum by (instance) (rate(agent_eval_processor_spans_ignored_total{job=~"$job"}[$__rate_interval]))',
                   "ignored {{instance}}"),
            width=8,
        ),
        timeseries(
            "Processor errors and drops",
            ("Per second, per instance: internal and forward errors, enrichments dropped, malformed tool "
             "spans, names folded into _other_, run calls dropped, LLM calls of models the catalog does not "
             "price (left out of run costs) and runs closed early (by reason). All should be zero."),
            "ops",
            series(('sum by (instance) '
                    '(rate(agent_eval_processor_internal_errors_total{job=~"$job"}[$__rate_interval]))'),
                   "internal_errors {{instance}}"),
            series('sum by (instance) (rate(agent_eval_processor_forward_errors_total{job=~"$job"}[$__rate_interval]))',
                   "forward_errors {{instance}}"),
            series(('sum by (instance) '
                    '(rate(agent_eval_processor_enrichments_dropped_total{job=~"$job"}[$__rate_interval]))'),
                   "enrichments_dropped {{instance}}"),
            series(('sum by (instance) '
                    '(rate(agent_eval_processor_malformed_tool_spans_total{job=~"$job"}[$__rate_interval]))'),
                   "malformed_tool_spans {{instance}}"),
            series('sum by (instance) (rate(agent_eval_processor_labels_folded_total{job=~"$job"}[$__rate_interval]))',
                   "labels_folded {{instance}}"),
            series(('sum by (instance) '
                    '(rate(agent_eval_processor_runs_calls_dropped_total{job=~"$job"}[$__rate_interval]))'),
                   "runs_calls_dropped {{instance}}"),
            series(('sum by (instance) '
                    '(rate(agent_eval_processor_unpriced_llm_calls_total{job=~"$job"}[$__rate_interval]))'),
                   "unpriced_llm_calls {{instance}}"),
            series(('sum by (instance, reason) '
                    '(rate(agent_eval_processor_runs_closed_early_total{job=~"$job"}[$__rate_interval]))'),
                   "runs closed early ({{reason}}) {{instance}}"),
            width=8,
        ),
        stat("Targets up",
             "Scrape targets of the selected jobs that are up, out of all.",
             "percentunit", [("red", None), ("green", 1)],
             'sum(up{job=~"$job"}) / count(up{job=~"$job"})', height=8, width=8),
    ]



# -- the dashboard -------------------------------------------------------------------------------

#: The rows, top to bottom: (title, the function that returns its panels).
SECTIONS: list[tuple[str, Callable[[], list[Panel]]]] = [
    ("Overview (selected time range)", overview),
    ("Tool choice", tool_choice),
    ("Latency", latency),
    ("Agent runs", agent_runs),
    ("True cost", true_cost),
    ("LLM judge", llm_judge),
    ("Processor health", processor_health),
]


def label_variable(name: str, label: str, query: str) -> dash.QueryVariable:
    """A multi-value filter listing a label's values, "All" (any value: .*) selected."""
    return (dash.QueryVariable(name).label(label).hide(dashboard.VariableHide.DONT_HIDE).datasource(DATASOURCE).query(query)
            .refresh(dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dashboard.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*").regex("")
            .current(dashboard.VariableOption(selected=True, text=["All"], value=["$__all"])))


def build() -> dashboard.Dashboard:
    board = (
        dash.Dashboard("otel-agent-eval: agent tool efficiency").uid(UID)
        .description("Tool-choice efficiency, money wasted, latency and agent runs scored by otel-agent-eval's span "
                     "processor. See collector-config/README.md (Operations).")
        .tags(["otel-agent-eval", "genai", "agents"]).timezone(common.TimeZoneBrowser).editable()
        .tooltip(dashboard.DashboardCursorSync.CROSSHAIR).refresh("30s").time("now-1h", "now").live_now(False).version(1)
        .annotation(dash.AnnotationQuery().name("Annotations & Alerts").built_in(1).enable(True).hide(True)
                    .datasource(common.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
                    .icon_color("rgba(0, 211, 255, 1)").type("dashboard"))
        .with_variable(dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
                       .hide(dashboard.VariableHide.DONT_HIDE).regex("").multi(False).include_all(False))
        .with_variable(label_variable("job", "Job", "label_values(agent_eval_processor_spans_seen_total, job)"))
        .with_variable(label_variable("agent", "Agent", 'label_values(agent_eval_tool_calls_total{job=~"$job"}, gen_ai_agent_name)'))
        .with_variable(label_variable("tool", "Tool", 'label_values(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent"}, gen_ai_tool_name)'))
    )
    for title, section in SECTIONS:
        board.with_row(dash.Row(title))
        for panel in section():
            board.with_panel(panel)
    model = board.build()
    for number, panel in enumerate(model.panels or [], start=1):  # ids unique within the dashboard, in order
        panel.id_val = number
    return model


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build()) + "\n"


def main(argv: Sequence[str]) -> int:
    """Write the dashboard (or, with --check, say whether the committed file is current)."""
    text = render()
    if "--check" in argv:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is not what {Path(__file__).name} generates: run make dashboard", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
