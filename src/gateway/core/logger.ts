// The gateway's log. Every call names its level (GatewayLog's methods are pino's). As text (the
// default) a line goes out as it was written, with its fields appended as key=value. As JSON each
// line is one pino object with a level, a time, the service and its fields; every request gets
// one line with its request id (request-log.ts), and a line written while serving a request
// carries the same request_id, so a request can be followed across the log, the decision log
// (--json-log) and the worker's own log.
import pino from "pino";
import type { LoggingConfig } from "../config/ops.js";

/** Fields of a log line (request_id on lines written while serving a request). */
export type LogFields = Record<string, string | number | boolean | null>;

type LogMethod = (msg: string, fields?: LogFields) => void;

/** The operational log, one method per level. */
export interface GatewayLog {
  debug: LogMethod;
  info: LogMethod;
  warn: LogMethod;
  error: LogMethod;
}

export interface RequestLogLine {
  request_id: string;
  method: string;
  path: string;
  /** The inference route (chat, completions, generate, messages), or null for the other routes. */
  route: string | null;
  worker: string | null;
  tenant: string | null;
  session: string | null;
  /** The status sent, or 0 when the connection closed before one was. */
  status: number;
  duration_ms: number;
  error: string | null;
}

export interface GatewayLogger {
  log: GatewayLog;
  /** One finished request, or null when requests are not logged (text format). */
  request: ((r: RequestLogLine) => void) | null;
}

const LEVELS = ["debug", "info", "warn", "error"] as const;

/** The logger the configuration asks for, writing to `write` (default: stderr). */
export function gatewayLogger(c: LoggingConfig, write?: (l: string) => void): GatewayLogger {
  const out = write ?? ((l: string) => process.stderr.write(`${l}\n`));
  if (c.format === "text") return { log: textLog(c.level, out), request: null };
  const dest = write
    ? { write: (s: string) => write(s.replace(/\n$/, "")) }
    : pino.destination({ fd: 2, sync: false });
  const logger = pino(
    {
      level: c.level,
      base: { service: "kvctl-gateway" },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    dest,
  );
  const method =
    (level: (typeof LEVELS)[number]): LogMethod =>
    (msg, fields) =>
      fields ? logger[level](fields, msg) : logger[level](msg);
  return {
    log: {
      debug: method("debug"),
      info: method("info"),
      warn: method("warn"),
      error: method("error"),
    },
    request: (r) =>
      r.status >= 500 || r.status === 0 ? logger.warn(r, "request") : logger.info(r, "request"),
  };
}

function textLog(level: LoggingConfig["level"], out: (l: string) => void): GatewayLog {
  const min = LEVELS.indexOf(level);
  const method = (l: (typeof LEVELS)[number]): LogMethod => {
    if (LEVELS.indexOf(l) < min) return () => undefined;
    return (msg, fields) =>
      out(
        fields
          ? `${msg}${Object.entries(fields)
              .map(([k, v]) => ` ${k}=${v}`)
              .join("")}`
          : msg,
      );
  };
  return {
    debug: method("debug"),
    info: method("info"),
    warn: method("warn"),
    error: method("error"),
  };
}

/** A log writing every level as plain lines to `write` (library callers that pass a function). */
export function lineLog(write: (line: string) => void): GatewayLog {
  return textLog("debug", write);
}

/** A log as given, or one writing lines to the function given. */
export function asLog(to: GatewayLog | ((line: string) => void)): GatewayLog {
  return typeof to === "function" ? lineLog(to) : to;
}
