// The gateway's log. As text (the default) its operational lines go out as they are. As JSON each
// line is one pino object with a level, a time and the service, and every inference request gets
// one line with its request id, route, worker, tenant, status and duration, so a request can be
// followed across the log, the decision log (--json-log) and the worker's own log.
import pino from "pino";
import type { GatewayConfig } from "./config.js";

export interface RequestLogLine {
  request_id: string;
  route: string;
  worker: string;
  tenant: string;
  session: string | null;
  status: number;
  duration_ms: number;
  error: string | null;
}

export interface GatewayLogger {
  /** An operational line. */
  line: (l: string) => void;
  /** One finished request, or null when requests are not logged (text format). */
  request: ((r: RequestLogLine) => void) | null;
}

// Operational lines carry no level of their own: those saying something failed or was refused are
// warnings, the rest information.
const WARNING = /\b(failed|fails|cannot|refused|lost|threw|stopped|unrecovered|timed out|cutting)\b/;

/** The logger the configuration asks for, writing to `write` (default: stderr). */
export function gatewayLogger(c: GatewayConfig["logging"], write?: (l: string) => void): GatewayLogger {
  const out = write ?? ((l: string) => process.stderr.write(`${l}\n`));
  if (c.format === "text") return { line: out, request: null };
  const dest = write ? { write: (s: string) => write(s.replace(/\n$/, "")) } : pino.destination({ fd: 2, sync: false });
  const logger = pino({ level: c.level, base: { service: "kvctl-gateway" }, timestamp: pino.stdTimeFunctions.isoTime }, dest);
  return {
    line: (l) => (WARNING.test(l) ? logger.warn(l) : logger.info(l)),
    request: (r) => (r.status >= 500 || r.status === 0 ? logger.warn(r, "request") : logger.info(r, "request")),
  };
}
