// bench:agent's configurations. The fair peers get the same admission budget as kvctl (about
// `admissionRequests` requests in flight per worker), each in the form its own stack offers it;
// the context rows run without admission and stay outside the verdict.
import { policiesConfigSchema } from "../../src/contract/policies-config.js";

export type Role = "kvctl" | "fair" | "context" | "ablation";

export interface ConfigSpec {
  name: string;
  role: Role;
  front: "round_robin" | "gateway" | "smg" | "dynamo_kv" | "dynamo_thunder";
  serverArgs: string[];
  policy: "noop" | "agent";
  /** Agent policy rules switched on (the policy's defaults when unset). */
  rules?: string[];
  /** Rules switched off from the defaults (a leave-one-out row). */
  without?: string[];
  /** The kvctl gateway's admission: none, per request, or per program (a session's tool loop). */
  admission: "none" | "request" | "program";
  /** smg's own flags beyond its cache-aware policy. */
  smgArgs?: string[];
  /** Every request carries the session id in its body and sessions are closed at their end. */
  sessionBody?: boolean;
  /** The prune rule prunes a session's own branch at its end (the policy's default: true). */
  pruneOnClose?: boolean;
}

/** The agent policy's rules; the ablation runs each one alone on top of program admission. */
export const RULES = ["pins", "inflight", "tools", "think", "idle", "prune", "warm"] as const;

/** Whether each rule is on in `kvctl gateway --policy agent` when the config names none. */
const DEFAULT_ON: Record<string, boolean> = Object.fromEntries(
  Object.entries(policiesConfigSchema.parse({})).flatMap(([k, v]) =>
    typeof v === "object" && v !== null && "enabled" in v
      ? [[k, (v as { enabled: boolean }).enabled]]
      : [],
  ),
);

/** Whether `rule` is on in a row: the rules it names, else the defaults less those it leaves out. */
export function ruleOn(spec: Pick<ConfigSpec, "rules" | "without">, rule: string): boolean {
  if (spec.rules) return spec.rules.includes(rule);
  return DEFAULT_ON[rule] === true && !(spec.without ?? []).includes(rule);
}

/** SGLang's session radix cache: open sessions' KV is evicted last. */
const SESSION_RADIX_ARGS = ["--enable-session-radix-cache", "--radix-eviction-policy", "priority"];

/** A row behind `front`, with no server flags, no policy and no admission unless `o` says so. */
const spec = (
  name: string,
  role: Role,
  front: ConfigSpec["front"],
  o: Partial<ConfigSpec> = {},
): ConfigSpec => ({
  name,
  role,
  front,
  serverArgs: [],
  policy: "noop",
  admission: "none",
  ...o,
});

/** A row behind the kvctl gateway. */
const gw = (name: string, role: Role, o: Partial<ConfigSpec> = {}): ConfigSpec =>
  spec(name, role, "gateway", o);

/** Every configuration of a full run. `workers`: worker count; `perWorker`: the admission budget. */
export function configSpecs(workers: number, perWorker: number, ablation: boolean): ConfigSpec[] {
  const specs: ConfigSpec[] = [
    gw("kvctl", "kvctl", { policy: "agent", admission: "program" }),
    gw("cache_aware_adm", "fair", { admission: "request" }),
    // smg's limit is one for the whole router (not per worker): 2 per worker x workers, with a
    // queue long and patient enough that nothing is refused, and no refill rate.
    spec("smg_adm", "fair", "smg", {
      smgArgs: [
        "--max-concurrent-requests",
        String(perWorker * workers),
        "--queue-size",
        "100000",
        "--queue-timeout-secs",
        "86400",
      ],
    }),
    gw("session_radix", "fair", {
      admission: "request",
      serverArgs: SESSION_RADIX_ARGS,
      sessionBody: true,
    }),
    // SGLang's own knob: the worker runs at most that many requests; the rest wait in its queue.
    gw("sglang_mrr", "fair", { serverArgs: ["--max-running-requests", String(perWorker)] }),
    gw("thunder", "fair", { admission: "program" }),
    // NVIDIA Dynamo's own routers over dynamo.sglang workers (agent/dynamo-stack.ts).
    spec("dynamo_kv", "fair", "dynamo_kv"),
    spec("dynamo_thunder", "fair", "dynamo_thunder"),
    spec("lru", "context", "round_robin"),
    gw("cache_aware", "context"),
    // kvctl over workers that also keep each session's KV themselves (session_radix's server side),
    // the gateway naming each turn's session and closing it where it lets the program go.
    gw("kvctl_session_radix", "context", {
      policy: "agent",
      admission: "program",
      serverArgs: SESSION_RADIX_ARGS,
    }),
    // The same under session_radix's own request admission: what kvctl adds to that peer alone.
    gw("kvctl_session_radix_req", "context", {
      policy: "agent",
      admission: "request",
      serverArgs: SESSION_RADIX_ARGS,
    }),
    spec("sgl_router", "context", "smg"),
  ];
  return ablation ? [...specs, ...ablationSpecs()] : specs;
}

/**
 * The question a rule must answer is what it adds to the scheduler, so each runs with kvctl's
 * program admission and is read against thunder (the same admission, no rule). The kvctl_no_*
 * rows are the defaults less one (read against kvctl): what a default rule adds to the others,
 * which a rule alone does not say when the rules share one pin budget.
 */
function ablationSpecs(): ConfigSpec[] {
  return [
    ...RULES.map((r) =>
      gw(`kvctl_${r}`, "ablation", { policy: "agent", rules: [r], admission: "program" }),
    ),
    ...RULES.filter((r) => DEFAULT_ON[r]).map((r) =>
      gw(`kvctl_no_${r}`, "ablation", { policy: "agent", admission: "program", without: [r] }),
    ),
    gw("kvctl_no_end_prune", "ablation", {
      policy: "agent",
      admission: "program",
      pruneOnClose: false,
    }),
  ];
}

export const FAIR_PEERS = (specs: readonly ConfigSpec[]) =>
  specs.filter((s) => s.role === "fair").map((s) => s.name);
