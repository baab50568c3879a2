// Tracing with the OpenTelemetry SDK: one client span per worker call, exported over OTLP/HTTP
// when telemetry.otlpTracesUrl is set. The span is a child of the client's W3C `traceparent` (or
// the root of a new trace), and the worker gets a `traceparent` naming it, so SGLang's own spans
// (--enable-trace) hang under it. Without an endpoint the SDK is never imported (openTracer loads
// it on demand), nothing is built, and the client's traceparent reaches the worker unchanged, as
// every other header does. The provider is the gateway's own, not registered globally, so an
// embedding application's OpenTelemetry setup is left alone.
import type { IncomingHttpHeaders } from "node:http";
import type { SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { TelemetryConfig } from "../config/ops.js";
import type { GatewayLog } from "../core/logger.js";

export interface Span {
  /** The traceparent the worker gets. */
  readonly traceparent: string;
  /** The tracestate the worker gets with it (the client's, when it sent one). */
  readonly tracestate: string | null;
  /** Ends the span with the answer's status (0: none went out) and attributes. */
  end(status: number, attributes: Record<string, string | number>): void;
}

export interface Tracer {
  /** A span for a call named `name`, child of the trace context in the client's headers. */
  start(name: string, headers: IncomingHttpHeaders): Span;
  /** Sends what is batched. */
  flush(): Promise<void>;
  /** Sends what is batched and stops the exporter (the gateway's close). */
  close(): Promise<void>;
  /** Spans the collector refused or never got (counted, not retried). */
  readonly lost: number;
}

const BATCH = 512;
const FLUSH_MS = 1000;
const EXPORT_TIMEOUT_MS = 5000;

/** The tracer the telemetry section asks for, or null (and no SDK loaded) when it names no endpoint. */
export async function openTracer(t: TelemetryConfig, log: GatewayLog): Promise<Tracer | null> {
  if (!t.otlpTracesUrl) return null;
  const url = t.otlpTracesUrl;
  const [api, core, base, otlp, resources] = await Promise.all([
    import("@opentelemetry/api"),
    import("@opentelemetry/core"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/resources"),
  ]);
  const counted = countingExporter(
    new otlp.OTLPTraceExporter({ url, timeoutMillis: EXPORT_TIMEOUT_MS }),
    core.ExportResultCode.SUCCESS,
    (e) =>
      log.warn(
        `gateway: OTLP export to ${url} failed: ${e?.message ?? "unknown error"} (spans dropped; counted)`,
      ),
  );
  const exporter = counted.exporter;
  const provider = new base.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ "service.name": t.serviceName }),
    spanProcessors: [
      new base.BatchSpanProcessor(exporter, {
        maxExportBatchSize: BATCH,
        scheduledDelayMillis: FLUSH_MS,
        exportTimeoutMillis: EXPORT_TIMEOUT_MS,
      }),
    ],
  });
  const tracer = provider.getTracer("kvctl-gateway");
  const propagator = new core.W3CTraceContextPropagator();
  return {
    start(name, headers) {
      const parent = propagator.extract(api.ROOT_CONTEXT, headers, api.defaultTextMapGetter);
      const span = tracer.startSpan(name, { kind: api.SpanKind.CLIENT }, parent);
      const carrier: Record<string, string> = {};
      propagator.inject(api.trace.setSpan(parent, span), carrier, api.defaultTextMapSetter);
      return {
        traceparent: carrier.traceparent,
        tracestate: carrier.tracestate ?? null,
        end(status, attributes) {
          span.setAttributes({ ...attributes, "http.response.status_code": status });
          span.setStatus({
            code: status >= 500 || status === 0 ? api.SpanStatusCode.ERROR : api.SpanStatusCode.OK,
          });
          span.end();
        },
      };
    },
    flush: () => provider.forceFlush(),
    close: () => provider.shutdown(),
    get lost() {
      return counted.lost();
    },
  };
}

/** The exporter reports a failed batch only to its callback: counted here, the first one told. */
function countingExporter(
  inner: SpanExporter,
  success: number,
  firstFailure: (e: Error | undefined) => void,
): { exporter: SpanExporter; lost: () => number } {
  let lost = 0;
  const exporter: SpanExporter = {
    export(spans, done) {
      inner.export(spans, (r) => {
        if (r.code !== success) {
          if (lost === 0) firstFailure(r.error);
          lost += spans.length;
        }
        done(r);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
  return { exporter, lost: () => lost };
}
