"""Attribute names of the tracing conventions we read and write, in one place.

Sources: OpenTelemetry GenAI semantic conventions, OpenInference, and OpenLLMetry
(Traceloop). Every string literal naming a span attribute lives here, but for the names of token
counts: those are one table, `core.token_usage.TOKEN_NAMES` (the names below come from it).
"""
from __future__ import annotations

from . import token_usage as _t

# OpenTelemetry GenAI semantic conventions
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"
OP_INVOKE_WORKFLOW = "invoke_workflow"  # a coordinated process of several agents (CrewAI's crew): a run root too
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"
# Span names of agent and workflow spans (`invoke_agent {gen_ai.agent.name}`, `invoke_workflow {gen_ai.workflow.name}`):
# strands-agents, agent-framework and google-adk start them with no attributes and set those later.
RUN_ROOT_SPAN_PREFIXES = (OP_INVOKE_AGENT + " ", OP_INVOKE_WORKFLOW + " ")
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = _t.BY_NAME["gen_ai.usage.input_tokens"].name
GEN_AI_USAGE_OUTPUT_TOKENS = _t.BY_NAME["gen_ai.usage.output_tokens"].name
GEN_AI_USAGE_PROMPT_TOKENS = _t.BY_NAME["gen_ai.usage.prompt_tokens"].name  # older OpenLLMetry spelling
GEN_AI_USAGE_COMPLETION_TOKENS = _t.BY_NAME["gen_ai.usage.completion_tokens"].name
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = _t.BY_NAME["gen_ai.usage.cache_read.input_tokens"].name  # included in input_tokens
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "call_llm"})  # call_llm: any-agent's
GEN_AI_TOOL_ARGS = "gen_ai.tool.args"  # any-agent's spelling of the arguments (a JSON string)
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_EVALUATION_RESULT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
ERROR_TYPE = "error.type"
# A tool's own outcome, where the span status does not carry it: strands-agents writes "success" or "error"
# (a tool that raised is an error result, and the span status stays OK).
GEN_AI_TOOL_STATUS = "gen_ai.tool.status"
TOOL_STATUS_FAILED = frozenset({"error", "failed", "failure"})
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"

# OpenInference
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
OI_KIND_TOOL = "TOOL"
OI_KIND_AGENT = "AGENT"
OI_KIND_LLM = "LLM"
OI_KIND_CHAIN = "CHAIN"
OI_TOOL_NAME = "tool.name"
OI_TOOL_PARAMETERS = "tool.parameters"  # the JSON *schema* of the arguments
OI_TOOL_CALL_ID = "tool_call.id"
OI_TOOL_CALL_FUNCTION_ARGUMENTS = "tool_call.function.arguments"  # arguments of a tool call an LLM span requested
OI_INPUT_VALUE = "input.value"
OI_OUTPUT_VALUE = "output.value"
OI_AGENT_NAME = "agent.name"
OI_GRAPH_NODE_ID = "graph.node.id"  # CrewAI's AGENT span `<role>._execute_core` names its agent only here (the role)
OI_LLM_MODEL_NAME = "llm.model_name"
OI_LLM_TOKEN_COUNT_PROMPT = _t.BY_NAME["llm.token_count.prompt"].name
OI_LLM_TOKEN_COUNT_COMPLETION = _t.BY_NAME["llm.token_count.completion"].name
OI_LLM_TOKEN_COUNT_TOTAL = _t.BY_NAME["llm.token_count.total"].name
OI_LLM_TOKEN_COUNT_CACHE_READ = _t.BY_NAME["llm.token_count.prompt_details.cache_read"].name  # part of llm.token_count.prompt
OI_LLM_PROMPTS = "llm.prompts"
OI_FIRST_INPUT_MESSAGE_ROLE = "llm.input_messages.0.message.role"
OI_FIRST_OUTPUT_MESSAGE_ROLE = "llm.output_messages.0.message.role"
OI_FIRST_OUTPUT_MESSAGE = "llm.output_messages.0.message.content"
# What an OpenInference LLM-kind span carries when it records a model call itself. llama-index's
# instrumentation also marks the LLM object's helper methods (`_prepare_chat_with_tools`) as LLM
# spans: those carry none of these, and are no model call.
OI_LLM_CALL_EVIDENCE = (OI_LLM_TOKEN_COUNT_PROMPT, OI_LLM_TOKEN_COUNT_COMPLETION, OI_LLM_TOKEN_COUNT_TOTAL,
                        OI_FIRST_INPUT_MESSAGE_ROLE, OI_FIRST_OUTPUT_MESSAGE_ROLE, OI_LLM_PROMPTS)
# The bound call some OpenInference instrumentations (smolagents, llama-index) write as a tool's
# `input.value`: {"args": [...], "kwargs": {...}, "sanitize_inputs_outputs": true}. The arguments
# are under "kwargs" (and positional ones under "args").
OI_BOUND_ARGS = "args"
OI_BOUND_KWARGS = "kwargs"
OI_BOUND_CALL_KEYS = frozenset({OI_BOUND_ARGS, OI_BOUND_KWARGS, "sanitize_inputs_outputs"})

# CrewAI's tool span under OpenInference (`<tool>._use`): `input.value` is the bound `_use(tool_string, tool, calling)`
# call, the arguments only in `calling` (a dict, or the repr `tool_name='x' arguments={...}`) and in the ReAct text
# `tool_string` (`Action Input: {json}`).
CREWAI_USE_KEYS = frozenset({"tool_string", "tool", "calling"})
CREWAI_CALLING = "calling"

# Vercel AI SDK (npm `ai`) spans of its own (ai <= 6 built in; ai 7 `LegacyOpenTelemetry` of `@ai-sdk/otel`):
# `ai.operationId` names what a span is. ai 7's `OpenTelemetry` writes the GenAI conventions instead.
AI_OPERATION_ID = "ai.operationId"
AI_TOOL_CALL = "ai.toolCall"
AI_TOOL_CALL_NAME = "ai.toolCall.name"
AI_TOOL_CALL_ARGS = "ai.toolCall.args"
AI_TOOL_CALL_RESULT = "ai.toolCall.result"
AI_TOOL_CALL_ID = "ai.toolCall.id"
AI_FUNCTION_ID = "ai.telemetry.functionId"  # the app's `telemetry.functionId`: the only name a run gets
AI_RUN_OPERATIONS = frozenset({"ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject"})
AI_MODEL_CALL_SUFFIXES = (".doGenerate", ".doStream")  # one provider call; its parent repeats the summed usage
AI_MODEL_ID = "ai.model.id"
AI_RESPONSE_MODEL = "ai.response.model"
AI_USAGE_INPUT_TOKENS = tuple(name for name in _t.INPUT_NAMES if name.startswith("ai."))  # ai 5+ / ai <= 4 spelling
AI_USAGE_OUTPUT_TOKENS = tuple(name for name in _t.OUTPUT_NAMES if name.startswith("ai."))

# OpenLLMetry (Traceloop)
TRACELOOP_SPAN_KIND = "traceloop.span.kind"
TL_KIND_TOOL = "tool"
TL_KIND_AGENT = "agent"
TL_KIND_WORKFLOW = "workflow"
TL_KIND_LLM = "llm"
TRACELOOP_ENTITY_NAME = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT = "traceloop.entity.output"
TL_USAGE_CACHE_READ_INPUT_TOKENS = _t.BY_NAME["gen_ai.usage.cache_read_input_tokens"].name  # OpenLLMetry <= 0.54
# What OpenLLMetry's client instrumentations (openai, anthropic, ...) mark their model-call spans with (`openai.chat`):
# no `gen_ai.operation.name` before 0.48, and no `traceloop.span.kind` (that marks the SDK's decorated functions).
TL_LLM_REQUEST_TYPE = "llm.request.type"
TL_LLM_REQUEST_TYPES = frozenset({"chat", "completion"})  # LLMRequestTypeValues; rerank and embedding are no model call

# Span names that carry an agent's or workflow's name with a fixed suffix: smolagents names its
# AGENT span `<agent name>.run`, llama-index its workflow root `<Workflow class>.run`.
AGENT_SPAN_NAME_SUFFIXES = (".run",)
# llama-index's agent workflows (FunctionAgent, ReActAgent, AgentWorkflow) name the agent nowhere but in their
# events: each step span `<Workflow>.setup_agent` (an OpenInference CHAIN) holds `current_agent_name='<name>'`
# in the repr of its input event
LLAMA_INDEX_SETUP_AGENT_SUFFIX = ".setup_agent"

# Names of the conventions, as reported on a ToolCallRecord.
GENAI = "gen_ai"
OPENINFERENCE = "openinference"
OPENLLMETRY = "openllmetry"
VERCEL_AI = "vercel_ai"
CUSTOM = "custom"

# What this project writes on enriched spans.
AGENT_EVAL_PREFIX = "agent_eval."

REDACTED = "[REDACTED]"  # what redaction leaves in place of a value: ours, and strands-agents' opt-in one

# LLM prices: the provider of a model call, and a cost the span reports itself (USD). See docs/llm-prices.md.
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # the older spelling of gen_ai.provider.name (Vercel AI SDK, OpenLLMetry, aws-sdk)
OI_LLM_PROVIDER = "llm.provider"
OI_LLM_SYSTEM = "llm.system"
# google-adk's legacy `call_llm` span (trace_call_llm) names its system so and carries no operation name: a model call.
ADK_SYSTEM = "gcp.vertex.agent"
PROVIDER_KEYS = (GEN_AI_PROVIDER_NAME, GEN_AI_SYSTEM, OI_LLM_PROVIDER, OI_LLM_SYSTEM)
# Proposed GenAI cost attributes (semantic-conventions-genai PR #443, open): an amount in the currency named beside it.
GEN_AI_USAGE_COST_AMOUNT = "gen_ai.usage.cost.amount"
GEN_AI_USAGE_COST_CURRENCY = "gen_ai.usage.cost.currency"
OI_LLM_COST_TOTAL = "llm.cost.total"  # OpenInference: USD, prompt + completion
OI_LLM_COST_PROMPT = "llm.cost.prompt"
OI_LLM_COST_COMPLETION = "llm.cost.completion"
ANY_AGENT_INPUT_COST = "gen_ai.usage.input_cost"  # any-agent (mozilla-ai): USD of the input and of the output
ANY_AGENT_OUTPUT_COST = "gen_ai.usage.output_cost"

# The keys whose presence makes a span one the core recognises by kind (`Pipeline.is_typed`): the conventions' kind
# keys and OpenLLMetry's client spans (`openai.chat`: `llm.request.type`), model calls of their own.
KIND_KEYS = (GEN_AI_OPERATION_NAME, OPENINFERENCE_SPAN_KIND, TRACELOOP_SPAN_KIND, AI_OPERATION_ID, TL_LLM_REQUEST_TYPE)
