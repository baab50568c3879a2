// Loading the gateway's configuration: a file read (YAML or JSON), validated against schema.ts
// with every bad field named, and the --worker flag; CLI flags are folded in on top of the file.
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { type GatewayConfig, gatewayConfigSchema } from "./schema.js";

export class GatewayConfigError extends Error {
  override name = "GatewayConfigError";
}

const isRecord = (x: unknown): x is Record<string, unknown> =>
  x !== null && typeof x === "object" && !Array.isArray(x);

/**
 * The agent policy's defaults, where the configuration does not name them:
 * - program admission (its retention decisions and restores need a program's tool loop) when the
 *   admission limits it needs are given. Without a capacity there is nothing to hold programs
 *   to, and admission stays per request;
 * - `routing.sessionYieldsWhenFull`: a session's turn does not queue behind the requests on its
 *   worker when the worker's device pool cannot hold it beside them (docs/agent-defaults.md).
 */
export function withAgentDefaults(input: unknown): unknown {
  if (!isRecord(input) || input.policy !== "agent") return input;
  let c = input;
  const r = c.routing ?? {};
  if (isRecord(r) && r.sessionYieldsWhenFull === undefined)
    c = { ...c, routing: { ...r, sessionYieldsWhenFull: true } };
  const adm = c.admission;
  if (
    !isRecord(adm) ||
    adm.mode !== undefined ||
    adm.maxRequestsPerWorker === undefined ||
    adm.capacityTokensPerWorker === undefined
  )
    return c;
  return { ...c, admission: { ...adm, mode: "program" } };
}

/** Validates a configuration object; the error names every bad field by its path. */
export function parseGatewayConfig(input: unknown, source = "config"): GatewayConfig {
  const r = gatewayConfigSchema.safeParse(withAgentDefaults(input));
  if (!r.success) {
    const lines = r.error.issues.map(
      (i) => `  ${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`,
    );
    throw new GatewayConfigError(`${source} is invalid:\n${lines.join("\n")}`);
  }
  const ids = new Set<string>();
  for (const w of r.data.workers) {
    if (ids.has(w.id))
      throw new GatewayConfigError(
        `${source} is invalid:\n  workers: duplicate worker id '${w.id}'`,
      );
    ids.add(w.id);
  }
  const i = r.data.workers.findIndex((w) => w.dynamo?.events === "nats");
  if (i >= 0 && !r.data.nats)
    throw new GatewayConfigError(
      `${source} is invalid:\n  workers.${i}.dynamo.events: "nats" reads Dynamo's NATS event ` +
        "plane on the gateway's NATS connection, and no nats is configured",
    );
  return r.data;
}

/** Reads a YAML or JSON file (JSON is YAML, so one parser reads both) as an unvalidated object. */
export function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new GatewayConfigError(`cannot read config file ${path}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new GatewayConfigError(
      `config file ${path} is not valid YAML/JSON: ${(e as Error).message}`,
    );
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    throw new GatewayConfigError(`config file ${path} must hold a mapping at the top level`);
  }
  return doc as Record<string, unknown>;
}

/** `id=http://host:port[,events=tcp://..][,replay=tcp://..]` (the --worker flag). */
export function parseWorkerFlag(spec: string): Record<string, string> {
  const [first, ...rest] = spec.split(",");
  const eq = first.indexOf("=");
  if (eq <= 0)
    throw new GatewayConfigError(
      `--worker ${spec}: expected id=http://host:port[,events=tcp://host:port][,replay=tcp://host:port]`,
    );
  const out: Record<string, string> = { id: first.slice(0, eq), url: first.slice(eq + 1) };
  for (const part of rest) {
    const e = part.indexOf("=");
    const k = e > 0 ? part.slice(0, e) : part;
    if (k !== "events" && k !== "replay")
      throw new GatewayConfigError(`--worker ${spec}: unknown key '${k}' (events, replay)`);
    out[k] = part.slice(e + 1);
  }
  return out;
}
