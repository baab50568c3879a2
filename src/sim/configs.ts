// The configurations a run compares: kvctl and its peers, each with the same admission budget
// (`perWorker` requests, or programs under program admission, per worker), in the form its own
// stack offers it (bench/agent/configs.ts is the real-server twin of this table).
export type FrontKind = "gateway" | "round_robin" | "dynamo_kv";

export interface SimConfigSpec {
  name: string;
  front: FrontKind;
  /** The gateway's admission per worker (dynamo_kv: its router queue instead). */
  admission: "request" | "program";
  policy: "noop" | "agent";
  /** Workers run SGLang's session radix cache with priority eviction; turns name their session
   * and a session's end closes it (the gateway's RadixSessions). */
  sessionRadix: boolean;
  /** Workers run kvctl's command layer (the agent policy's commands need it). */
  kvctl: boolean;
  /** What it is, for the docs and the report. */
  about: string;
}

const gateway = (name: string, about: string, o: Partial<SimConfigSpec> = {}): SimConfigSpec => ({
  name,
  front: "gateway",
  admission: "request",
  policy: "noop",
  sessionRadix: false,
  kvctl: false,
  about,
  ...o,
});

export const CONFIGS: readonly SimConfigSpec[] = [
  gateway(
    "kvctl",
    "kvctl gateway, agent policy (its defaults), program admission with the policy's retention; " +
      "workers run SGLang's session radix cache with priority eviction beside kvctl's command " +
      "layer, turns name their session, a session's end or move closes it",
    { admission: "program", policy: "agent", kvctl: true, sessionRadix: true },
  ),
  gateway(
    "session_radix",
    "kvctl gateway, no-op policy, request admission; workers run SGLang's session radix cache with priority eviction, turns name their session, a session's end closes it",
    { sessionRadix: true },
  ),
  gateway(
    "thunder",
    "kvctl gateway, no-op policy, program admission (ThunderAgent's program scheduler), no cache command",
    { admission: "program" },
  ),
  gateway(
    "cache_aware",
    "kvctl gateway, no-op policy (KV-overlap and session routing), request admission",
  ),
  gateway("lru", "round robin, request admission, SGLang's own LRU eviction", {
    front: "round_robin",
  }),
  gateway(
    "dynamo_kv",
    "NVIDIA Dynamo's KV-router cost function (its defaults) over the same index, its router queue as admission",
    { front: "dynamo_kv" },
  ),
];

export const CONFIG_NAMES = CONFIGS.map((c) => c.name);

export function configNamed(name: string): SimConfigSpec {
  const c = CONFIGS.find((x) => x.name === name);
  if (!c)
    throw new RangeError(
      `configs: unknown configuration ${JSON.stringify(name)}; known: ${CONFIG_NAMES.join(", ")}`,
    );
  return c;
}
