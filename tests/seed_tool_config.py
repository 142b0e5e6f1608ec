"""`config.tool_config` of the design article, built from the packaged catalog."""
from otel_agent_eval import load_catalog

_catalog = load_catalog()
_CALCULATORS = ("basic_calculator", "code_interpreter", "wolfram_alpha")

CALCULATOR_TOOLS = {
    "costs": {name: _catalog.tool(name).cost_usd for name in _CALCULATORS},
    "latencies": {name: _catalog.tool(name).latency_ms for name in _CALCULATORS},
}
