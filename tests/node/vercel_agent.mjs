// A Vercel AI SDK (npm `ai`) tool loop, traced by the SDK's own telemetry, for tests/test_frameworks_vercel_ai.py.
//
//   node tests/node/vercel_agent.mjs --endpoint http://127.0.0.1:4318/v1/traces --file spans.otlp.jsonl
//
// `generateText` runs against the SDK's own mock model (`MockLanguageModelV3` from `ai/test`, no network)
// with `experimental_telemetry: { isEnabled: true, functionId: 'support_agent' }`: the model asks for
// `local_index`, then `web_search` (whose execute throws: a failed call), then answers. Step n reports
// INPUT_TOKENS + (n - 1) * STEP_TOKENS input tokens (the context grows by the last step's output and
// the tool result it fed back) and OUTPUT_TOKENS. A second run has no functionId (no agent name in the trace).
// The spans (`ai.generateText`, `ai.generateText.doGenerate`, `ai.toolCall`) go through the JS SDK's
// BatchSpanProcessor and OTLP/HTTP protobuf exporter to --endpoint, and as OTLP/JSON lines to --file
// (the JS SDK's own JSON serializer), which `otel-agent-eval score` reads.
//
// Exit code 0 only when every export succeeded.
import { appendFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { context, diag, DiagConsoleLogger, DiagLogLevel } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { JsonTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';

const { values: options } = parseArgs({
  options: { endpoint: { type: 'string' }, file: { type: 'string' } },
});
if (!options.endpoint || !options.file) {
  console.error('vercel_agent.mjs: give --endpoint URL and --file PATH');
  process.exit(2);
}
diag.setLogger(new DiagConsoleLogger(), DiagLogLevel.WARN);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()); // the SDK's spans nest through it

export const INPUT_TOKENS = 50;
export const OUTPUT_TOKENS = 10;
export const STEP_TOKENS = 30; // each step's input over the last: its output (10) and the tool's result (20)

/** Writes each span as one OTLP/JSON ExportTraceServiceRequest line (the JS SDK's serializer). */
class FileExporter {
  constructor(path) {
    this.path = path;
    writeFileSync(path, '');
  }

  export(spans, done) {
    appendFileSync(this.path, Buffer.from(JsonTraceSerializer.serializeRequest(spans)).toString('utf8') + '\n');
    done({ code: 0 });
  }

  forceFlush() { return Promise.resolve(); }

  shutdown() { return Promise.resolve(); }
}

/** The OTLP exporter, remembering whether any export failed (the SDK would only log it). */
class CheckedExporter {
  constructor(inner) {
    this.inner = inner;
    this.failures = [];
  }

  export(spans, done) {
    this.inner.export(spans, (result) => {
      if (result.code !== 0) this.failures.push(`${spans.length} spans: ${result.error?.message ?? 'export failed'}`);
      done(result);
    });
  }

  forceFlush() { return this.inner.forceFlush(); }

  shutdown() { return this.inner.shutdown(); }
}

const exporter = new CheckedExporter(new OTLPTraceExporter({ url: options.endpoint, timeoutMillis: 10_000 }));
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'vercel-support-agent' }),
  spanProcessors: [new SimpleSpanProcessor(new FileExporter(options.file)), new BatchSpanProcessor(exporter)],
});
const tracer = provider.getTracer('ai');

/** The usage step `n` (1, 2, ...) reports: a context that grew by each earlier step's output and tool result. */
function usage(n) {
  const input = INPUT_TOKENS + (n - 1) * STEP_TOKENS;
  return {
    inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: OUTPUT_TOKENS, text: OUTPUT_TOKENS, reasoning: 0 },
  };
}

/** The mock model's replies, in order: a tool call per step, then the answer. */
function scriptedModel(steps) {
  let step = 0;
  return new MockLanguageModelV3({
    modelId: 'gpt-4.1-mini',
    doGenerate: async () => {
      const next = steps[step++];
      const content = next
        ? [{ type: 'tool-call', toolCallId: `call_${step}`, toolName: next[0], input: JSON.stringify(next[1]) }]
        : [{ type: 'text', text: 'Returns are accepted within 30 days.' }];
      return {
        content, usage: usage(step), warnings: [],
        finishReason: { unified: next ? 'tool-calls' : 'stop', raw: undefined },
        response: { id: `resp_${step}`, modelId: 'gpt-4.1-mini', timestamp: new Date(0) },
      };
    },
  });
}

const tools = {
  local_index: tool({
    description: 'Search the local FAQ index.',
    inputSchema: z.object({ query: z.string() }),
    execute: async ({ query }) => `Policy doc for ${query}: returns within 30 days.`,
  }),
  web_search: tool({
    description: 'Search the web.',
    inputSchema: z.object({ query: z.string() }),
    execute: async () => { throw new Error('search backend unavailable'); },
  }),
};

await generateText({
  model: scriptedModel([['local_index', { query: 'return policy' }], ['web_search', { query: 'refund window' }]]),
  tools,
  stopWhen: stepCountIs(5),
  prompt: 'What is your return policy?',
  experimental_telemetry: { isEnabled: true, functionId: 'support_agent', tracer },
});
await generateText({
  model: scriptedModel([['local_index', { query: 'shipping' }]]),
  tools,
  stopWhen: stepCountIs(5),
  prompt: 'How long does shipping take?',
  experimental_telemetry: { isEnabled: true, tracer },
});

await provider.forceFlush();
await provider.shutdown();
if (exporter.failures.length) {
  console.error(`vercel_agent.mjs: exports failed: ${exporter.failures.join('; ')}`);
  process.exit(1);
}
