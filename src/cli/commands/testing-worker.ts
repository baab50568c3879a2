// `kvctl testing-worker --worker-id w0`: runs the ReferenceResponder, the in-memory TEST STAND-IN
// for a worker's control subscriber, so `kvctl send` can be demonstrated without SGLang. It is not
// the worker: it holds no KV cache and says so when it starts.
import {
  connectOptionsFromFlags,
  NATS_FLAGS,
  NATS_FLAGS_HELP,
} from "../../control/connection-flags.js";
import { connectControlPlane } from "../../control/index.js";
import { ReferenceResponder } from "../../testing/index.js";
import { checkSubjectPrefix, checkWorkerId, parseFieldText } from "../../protocol/index.js";
import { commandArgs, usageError } from "../args.js";
import type { Command as CliCommand } from "../command.js";

const OPTIONS = {
  ...NATS_FLAGS,
  "worker-id": { type: "string" },
  "known-blocks": { type: "string" },
  "storage-keys": { type: "string" },
  "pin-budget-blocks": { type: "string" },
  "delay-ms": { type: "string" },
  silent: { type: "boolean" },
  quiet: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

const HELP = `usage: kvctl testing-worker --worker-id ID [options]

Runs the reference responder: a TEST STAND-IN for the worker's control subscriber (not the SGLang
worker; no KV cache). It validates commands with the protocol schemas and acks them from an
in-memory model of pins, leases and epochs.
  --known-blocks 1,2,3        block hashes it pretends to hold, as one prefix chain
  --storage-keys k1,k2        storage keys its pretend storage backend holds (for Warm)
  --pin-budget-blocks N       pins past this ack 'partial' (default 1000000)
  --delay-ms N                answer late (demo a timeout)
  --silent                    subscribe but never answer (demo a silent worker)
  --quiet                     do not log each command
${NATS_FLAGS_HELP}`;

const fail = (msg: string): number => usageError("kvctl testing-worker", msg);

export const command: CliCommand = {
  summary: "run the reference responder (a test stand-in for a worker, not the worker)",
  async run(argv) {
    const parsed = commandArgs(argv, {
      name: "kvctl testing-worker",
      options: OPTIONS,
      help: HELP,
    });
    if (typeof parsed === "number") return parsed;
    const v = parsed.values;
    if (!v["worker-id"]) return fail("--worker-id is required");
    let known: bigint[] = [];
    let keys: string[] = [];
    const num = (name: string, s: string | undefined) => {
      if (s === undefined) return undefined;
      if (!/^\d+$/.test(s))
        throw new Error(`--${name}: expected a non-negative integer, got ${JSON.stringify(s)}`);
      return Number(s);
    };
    let budget: number | undefined;
    let delay: number | undefined;
    try {
      checkWorkerId(v["worker-id"]);
      if (v["subject-prefix"]) checkSubjectPrefix(v["subject-prefix"]);
      if (v["known-blocks"]) known = parseFieldText("int64[]", v["known-blocks"]) as bigint[];
      if (v["storage-keys"]) keys = parseFieldText("string[]", v["storage-keys"]) as string[];
      budget = num("pin-budget-blocks", v["pin-budget-blocks"]);
      delay = num("delay-ms", v["delay-ms"]);
    } catch (e) {
      return fail(e instanceof Error ? e.message : String(e));
    }
    const nc = await connectControlPlane(
      connectOptionsFromFlags(v, `kvctl testing-worker ${v["worker-id"]}`),
    );
    const log = (l: string) => console.error(l);
    const responder = await ReferenceResponder.start(nc, {
      workerId: v["worker-id"],
      subjectPrefix: v["subject-prefix"],
      knownBlocks: known,
      storageKeys: keys,
      pinBudgetBlocks: budget,
      delayMs: delay,
      silent: v.silent,
      verbose: !v.quiet,
      log,
    });
    await new Promise<void>((resolve) => {
      process.once("SIGINT", () => resolve());
      process.once("SIGTERM", () => resolve());
    });
    responder.stop();
    await nc.drain();
    return 0;
  },
};
