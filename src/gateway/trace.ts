// Tracing: W3C trace context on every worker call, and spans exported over OTLP/HTTP (JSON) when
// telemetry.otlpTracesUrl is set. The gateway's span is a child of the client's `traceparent`
// (or the root of a new trace), and the worker gets a `traceparent` naming the gateway's span, so
// SGLang's own spans (--enable-trace) hang under it. Without an endpoint nothing is built and the
// client's traceparent reaches the worker unchanged, as every other header does. This is a small
// exporter of its own rather than the OpenTelemetry SDK: one span per worker call, batched.
import { randomBytes } from "node:crypto";

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);
const BATCH = 512;
const FLUSH_MS = 1000;

export interface Span {
  /** The traceparent the worker gets. */
  readonly traceparent: string;
  /** Ends the span with the answer's status (0: none went out) and attributes. */
  end(status: number, attributes: Record<string, string | number>): void;
}

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: { key: string; value: { stringValue?: string; intValue?: string } }[];
  status: { code: number };
}

/** The trace and parent span of an incoming traceparent, or null when it is absent or malformed. */
export function parseTraceparent(v: string | string[] | undefined): { traceId: string; parentId: string; flags: string } | null {
  const m = typeof v === "string" ? TRACEPARENT.exec(v.trim()) : null;
  if (!m || m[1] === ZERO_TRACE || m[2] === ZERO_SPAN) return null;
  return { traceId: m[1], parentId: m[2], flags: m[3] };
}

const nowNanos = (): bigint => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;

export class Tracer {
  private spans: OtlpSpan[] = [];
  private timer: NodeJS.Timeout | null = null;
  private sending: Promise<void> = Promise.resolve();
  /** Spans the collector refused or never got (counted, not retried). */
  lost = 0;

  constructor(
    private readonly url: string,
    private readonly serviceName: string,
    private readonly log: (line: string) => void,
  ) {}

  start(name: string, incoming: string | string[] | undefined): Span {
    const parent = parseTraceparent(incoming);
    const traceId = parent?.traceId ?? randomBytes(16).toString("hex");
    const spanId = randomBytes(8).toString("hex");
    const startTimeUnixNano = nowNanos().toString();
    return {
      traceparent: `00-${traceId}-${spanId}-${parent?.flags ?? "01"}`,
      end: (status, attributes) => {
        const attrs = Object.entries({ ...attributes, "http.response.status_code": status }).map(([key, v]) => ({ key, value: typeof v === "number" ? { intValue: String(v) } : { stringValue: v } }));
        this.push({ traceId, spanId, parentSpanId: parent?.parentId, name, kind: 3, startTimeUnixNano, endTimeUnixNano: nowNanos().toString(), attributes: attrs, status: { code: status >= 500 || status === 0 ? 2 : 1 } });
      },
    };
  }

  private push(s: OtlpSpan): void {
    this.spans.push(s);
    if (this.spans.length >= BATCH) void this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => void this.flush(), FLUSH_MS);
      this.timer.unref();
    }
  }

  /** Sends what is batched (the gateway's close waits for it). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const spans = this.spans;
    this.spans = [];
    if (spans.length === 0) return this.sending;
    const body = JSON.stringify({
      resourceSpans: [{ resource: { attributes: [{ key: "service.name", value: { stringValue: this.serviceName } }] }, scopeSpans: [{ scope: { name: "kvctl-gateway" }, spans }] }],
    });
    this.sending = this.sending.then(async () => {
      try {
        const r = await fetch(this.url, { method: "POST", headers: { "content-type": "application/json" }, body, signal: AbortSignal.timeout(5000) });
        if (!r.ok) throw new Error(`answered ${r.status}`);
        await r.arrayBuffer();
      } catch (e) {
        if (this.lost === 0) this.log(`gateway: OTLP export to ${this.url} failed: ${(e as Error).message} (spans dropped; counted)`);
        this.lost += spans.length;
      }
    });
    return this.sending;
  }
}
