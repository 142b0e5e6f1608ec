// A small Node.js agent traced with the OpenTelemetry JS SDK, for tests/test_serve_node.py.
//
//   node tests/node/agent.mjs --endpoint http://127.0.0.1:4318/v1/traces [--record spans.json] [--compression gzip|none]
//
// It runs a few whole agent runs in the GenAI semantic conventions: an `invoke_agent <name>`
// root with `chat` (LLM, token usage) and `execute_tool <tool>` children (arguments, call id,
// result; some failing with an error status and an `exception` event), and one tool call
// outside any agent. Spans go through a BatchSpanProcessor and the OTLP/HTTP protobuf
// exporter (gzip unless --compression none) to --endpoint (default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
//
// Span times are simulated (one clock that advances by each step's duration from the real
// start), so scores do not depend on how fast this machine is. With --record the script also
// writes what the SDK itself saw, in order: every span's start (name, ids, parent, kind,
// scope, time, attributes at start) and end (final attributes, events, status, time), plus
// the resource. The Python test rebuilds the very same spans from it with the Python SDK.
//
// Exit code 0 only when every export succeeded; export errors are printed on stderr.
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { context, diag, DiagConsoleLogger, DiagLogLevel, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import {
  ATTR_GEN_AI_AGENT_NAME,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_RESPONSE_MODEL,
  ATTR_GEN_AI_TOOL_CALL_ARGUMENTS,
  ATTR_GEN_AI_TOOL_CALL_ID,
  ATTR_GEN_AI_TOOL_CALL_RESULT,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_GEN_AI_TOOL_TYPE,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS,
  GEN_AI_OPERATION_NAME_VALUE_CHAT,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
  GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT,
} from '@opentelemetry/semantic-conventions/incubating';

const { values: options } = parseArgs({
  options: {
    endpoint: { type: 'string', default: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT },
    record: { type: 'string' },
    compression: { type: 'string', default: 'gzip' },
  },
});
if (!options.endpoint) {
  console.error('agent.mjs: give --endpoint URL (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), e.g. http://127.0.0.1:4318/v1/traces');
  process.exit(2);
}
if (!['gzip', 'none'].includes(options.compression)) {
  console.error(`agent.mjs: --compression is gzip or none, not ${options.compression}`);
  process.exit(2);
}
diag.setLogger(new DiagConsoleLogger(), DiagLogLevel.WARN); // exporter problems on stderr, not swallowed

// -- what the SDK saw, for the Python side ------------------------------------------------------------

const nanos = ([seconds, nanoseconds]) => (BigInt(seconds) * 1_000_000_000n + BigInt(nanoseconds)).toString();

function scopeOf(span) {
  const { name, version } = span.instrumentationScope;
  return { name, version: version ?? null };
}

/** Records every span start and end in order, as a SpanProcessor (it exports nothing). */
class RecordingSpanProcessor {
  constructor() {
    this.log = [];
    this.resource = null;
  }

  onStart(span) {
    this.resource ??= { ...span.resource.attributes };
    const ctx = span.spanContext();
    this.log.push({
      op: 'start', name: span.name, kind: span.kind, trace_id: ctx.traceId, span_id: ctx.spanId,
      parent_span_id: span.parentSpanContext?.spanId ?? null, scope: scopeOf(span),
      start_time_unix_nano: nanos(span.startTime), attributes: { ...span.attributes },
    });
  }

  onEnd(span) {
    this.log.push({
      op: 'end', span_id: span.spanContext().spanId, end_time_unix_nano: nanos(span.endTime),
      attributes: { ...span.attributes },
      events: span.events.map((e) => ({ name: e.name, attributes: { ...(e.attributes ?? {}) }, time_unix_nano: nanos(e.time) })),
      status: { code: span.status.code, message: span.status.message ?? null },
    });
  }

  forceFlush() { return Promise.resolve(); }

  shutdown() { return Promise.resolve(); }
}

/** The OTLP exporter, remembering whether any export failed (the SDK would only log it). */
class CheckedExporter {
  constructor(inner) {
    this.inner = inner;
    this.exported = 0;
    this.failures = [];
  }

  export(spans, done) {
    this.inner.export(spans, (result) => {
      if (result.code === 0) this.exported += spans.length;
      else this.failures.push(`${spans.length} spans: ${result.error?.message ?? 'export failed'}`);
      done(result);
    });
  }

  forceFlush() { return this.inner.forceFlush(); }

  shutdown() { return this.inner.shutdown(); }
}

// -- the tracer ------------------------------------------------------------------------------------------

const resource = defaultResource().merge(resourceFromAttributes({
  [ATTR_SERVICE_NAME]: 'node-support-agent',
  [ATTR_SERVICE_VERSION]: '1.4.2',
  'deployment.environment.name': 'test',
}));
const recorder = new RecordingSpanProcessor();
const exporter = new CheckedExporter(new OTLPTraceExporter({ url: options.endpoint, compression: options.compression, timeoutMillis: 10_000 }));
const provider = new BasicTracerProvider({
  resource,
  spanProcessors: [recorder, new BatchSpanProcessor(exporter, { scheduledDelayMillis: 200 })],
});
const tracer = provider.getTracer('node-agent', '0.3.0');

/** Simulated time: starts now (to the millisecond, plus a sub-millisecond part) and moves by each step's
 * duration. One clock for the whole script: the runs follow one another, as requests to one agent would. */
class Clock {
  constructor() {
    this.ns = BigInt(Date.now()) * 1_000_000n + 123_456n;
  }

  now() {
    return [Number(this.ns / 1_000_000_000n), Number(this.ns % 1_000_000_000n)];
  }

  advance(ms) {
    this.ns += BigInt(Math.round(ms * 1_000_000));
    return this.now();
  }
}

const clock = new Clock();

// -- the agent's tools: tiny local implementations ---------------------------------------------------------

const TOOLS = {
  local_index: ({ query }) => `FAQ: ${query}: refunds within 30 days with a receipt.`,
  web_search: ({ query }) => `3 results for ${query}`,
  calculator: ({ expression }) => String(expression.split('*').reduce((a, b) => a * Number(b), 1)),
  wolfram_alpha: ({ query }) => `result of ${query}`,
  ml_pipeline: () => 'forecast ready',
  mystery_tool: () => 'ok',
  final_answer: ({ answer }) => answer,
};

let callNumber = 0;

/** One `execute_tool` span: arguments and call id at start, the result (or an error) at the end. */
function callTool(parent, tool, args, { ms, fails = null }) {
  callNumber += 1;
  const span = tracer.startSpan(`execute_tool ${tool}`, {
    kind: SpanKind.INTERNAL,
    startTime: clock.advance(1),
    attributes: {
      [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
      [ATTR_GEN_AI_TOOL_NAME]: tool,
      [ATTR_GEN_AI_TOOL_TYPE]: 'function',
      [ATTR_GEN_AI_TOOL_CALL_ID]: `call_${String(callNumber).padStart(3, '0')}`,
      [ATTR_GEN_AI_TOOL_CALL_ARGUMENTS]: JSON.stringify(args),
    },
  }, parent);
  if (fails) {
    span.recordException({ name: 'ToolError', message: fails }, clock.advance(ms));
    span.setStatus({ code: SpanStatusCode.ERROR, message: fails });
    span.setAttribute('error.type', 'ToolError');
  } else {
    span.setAttribute(ATTR_GEN_AI_TOOL_CALL_RESULT, TOOLS[tool](args));
    clock.advance(ms);
  }
  span.end(clock.now());
}

/** One `chat` span of the model deciding what to do next, with token usage. */
function chat(parent, model, inputTokens, outputTokens, ms) {
  const span = tracer.startSpan(`chat ${model}`, {
    kind: SpanKind.CLIENT,
    startTime: clock.advance(1),
    attributes: {
      [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_CHAT,
      [ATTR_GEN_AI_PROVIDER_NAME]: 'openai',
      [ATTR_GEN_AI_REQUEST_MODEL]: model,
      'gen_ai.request.temperature': 0.2,
    },
  }, parent);
  span.setAttributes({
    [ATTR_GEN_AI_RESPONSE_MODEL]: `${model}-2024-07-18`,
    [ATTR_GEN_AI_USAGE_INPUT_TOKENS]: inputTokens,
    [ATTR_GEN_AI_USAGE_OUTPUT_TOKENS]: outputTokens,
    'gen_ai.response.finish_reasons': ['tool_calls'],
  });
  span.end(clock.advance(ms));
}

/** One whole agent run: an `invoke_agent` root around `steps(context)`. */
function runAgent(name, steps, { fails = null } = {}) {
  const root = tracer.startSpan(`invoke_agent ${name}`, {
    kind: SpanKind.INTERNAL,
    startTime: clock.advance(5),
    attributes: {
      [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT,
      [ATTR_GEN_AI_AGENT_NAME]: name,
      [ATTR_GEN_AI_PROVIDER_NAME]: 'openai',
    },
  });
  steps(trace.setSpan(context.active(), root));
  if (fails) root.setStatus({ code: SpanStatusCode.ERROR, message: fails });
  root.end(clock.advance(2));
}

// -- the runs ----------------------------------------------------------------------------------------------------

runAgent('support_agent', (ctx) => {
  chat(ctx, 'gpt-4o-mini', 1200, 300, 850);
  callTool(ctx, 'local_index', { query: 'refund policy' }, { ms: 18 });
  callTool(ctx, 'web_search', { query: 'refund policy uk', max_results: 3 }, { ms: 480 });
  callTool(ctx, 'web_search', { query: 'refund policy uk 2024' }, { ms: 2500, fails: 'upstream timed out' });
  chat(ctx, 'gpt-4o-mini', 2100, 180, 640);
});

runAgent('math_agent', (ctx) => {
  callTool(ctx, 'calculator', { expression: '17*23' }, { ms: 3 });
  callTool(ctx, 'wolfram_alpha', { query: 'integrate x^2' }, { ms: 950 });
  chat(ctx, 'gpt-4o', 400, 60, 300);
});

runAgent('analytics_bot', (ctx) => {
  callTool(ctx, 'ml_pipeline', { horizon: '30d' }, { ms: 7200 }); // no `dataset`: breaks the tool's schema
  callTool(ctx, 'mystery_tool', { x: 1 }, { ms: 40, fails: 'not implemented' });
  callTool(ctx, 'final_answer', { answer: '42 orders' }, { ms: 1 });
}, { fails: 'gave up' });

// a tool call outside any agent run
callTool(context.active(), 'web_search', { query: 'status page' }, { ms: 300 });

// -- flush, record, shut down ----------------------------------------------------------------------------

let exitCode = 0;
try {
  await provider.forceFlush();
} catch (error) {
  console.error(`agent.mjs: flushing failed: ${error?.message ?? error}`);
  exitCode = 1;
}
if (options.record) {
  const record = { resource: recorder.resource, spans: recorder.log };
  writeFileSync(options.record, JSON.stringify(record, null, 1));
}
await provider.shutdown();
if (exporter.failures.length) {
  console.error(`agent.mjs: exports failed: ${exporter.failures.join('; ')}`);
  exitCode = 1;
}
const spans = recorder.log.filter((entry) => entry.op === 'end').length;
console.log(`agent.mjs: ${spans} spans, ${exporter.exported} exported to ${options.endpoint}`);
process.exit(exitCode);
