"""Quickstart: one `install()`, one agent run with two tool calls, the scores on /metrics.

    python examples/quickstart.py

No agent framework, no API key: the spans are written by hand with the GenAI conventions
that instrumented frameworks use. `support_agent` matches the packaged catalog's `faq` task,
whose optimal tool is `local_index`; its `web_search` call is scored suboptimal.
"""
import os
import urllib.request

from opentelemetry import trace

import otel_agent_eval

# A real app writes `otel_agent_eval.install()` (metrics on port 9464, or OTEL_AGENT_EVAL_METRICS_PORT: install()
# reads it, and logs a bad value); here 0 picks a free port unless the variable is set.
processor = otel_agent_eval.install(port=None if os.environ.get("OTEL_AGENT_EVAL_METRICS_PORT") else 0)
url = "http://{}:{}/metrics".format(*processor.metrics_address)
print("metrics on", url)

tracer = trace.get_tracer("quickstart")
agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}
with tracer.start_as_current_span("invoke_agent support_agent", attributes=agent):
    for tool in ("local_index", "web_search"):  # optimal, then suboptimal for an FAQ
        with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
            pass  # the tool's work

for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
    if line.startswith("agent_eval_tool_calls_total"):
        print(line)
processor.shutdown()  # stops the metrics endpoint
