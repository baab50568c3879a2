// `kvctl send <worker|--broadcast> <Command> [--field value ...]`: build one command from flags,
// validate it with the protocol schemas, send it over NATS and print the ack(s).
import {
  connectOptionsFromFlags,
  joinNegativeValues,
  NATS_FLAGS,
  NATS_FLAGS_HELP,
} from "../../control/connection-flags.js";
import { connectControlPlane, ControlError, ControlPublisher } from "../../control/index.js";
import {
  type Ack,
  COMMAND_FIELDS,
  COMMAND_TYPES,
  type Command,
  type CommandType,
  CommandValidationError,
  checkSubjectPrefix,
  checkWorkerId,
  encodeAck,
  parseFieldText,
  stringifyJson,
  validateCommand,
} from "../../protocol/index.js";
import { commandArgs, usageError } from "../args.js";
import type { Command as CliCommand } from "../command.js";

const kebab = (f: string) => f.replace(/_/g, "-");
const FIELD_FLAGS = new Set(
  Object.values(COMMAND_FIELDS).flatMap((fields) => Object.keys(fields).map(kebab)),
);

const OPTIONS = {
  ...NATS_FLAGS,
  broadcast: { type: "boolean" },
  workers: { type: "string" },
  "deadline-ms": { type: "string" },
  "timeout-ms": { type: "string" },
  retries: { type: "string" },
  id: { type: "string" },
  "no-ack": { type: "boolean" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  ...Object.fromEntries([...FIELD_FLAGS].map((f) => [f, { type: "string" as const }])),
} as const;

const HELP = `usage: kvctl send <worker-id|--broadcast> <Command> [--field value ...] [options]

Commands and their fields (lists comma-separated; hashes are signed 64-bit decimals):
${COMMAND_TYPES.map(
  (t) =>
    `  ${t.padEnd(12)} ${Object.entries(COMMAND_FIELDS[t])
      .map(([f, k]) => `--${kebab(f)} <${k}>`)
      .join(" ")}`,
).join("\n")}

Options:
  --broadcast              send on the broadcast subject instead of one worker
  --workers w0,w1          workers a broadcast expects (names the silent ones)
  --deadline-ms N          how long a broadcast collects acks (default 1000)
  --timeout-ms N           per-attempt ack timeout (default 1000)
  --retries N              re-sends after a timeout/no-responders, same id (default 2)
  --id ID                  idempotency id to use (default: a fresh UUIDv7)
  --no-ack                 fire-and-forget (no reply subject)
  --json                   print acks as JSON (exact int64), one line
${NATS_FLAGS_HELP}

Example: kvctl send w0 Cache --block-hashes 111,-222 --pin true --ttl-seconds 300`;

const usage = (msg: string): number => usageError("kvctl send", msg);

function intFlag(v: string | undefined, name: string): number | undefined | Error {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v))
    return new Error(`--${name}: expected a non-negative integer, got ${JSON.stringify(v)}`);
  return Number(v);
}

const OK: ReadonlySet<Ack["status"]> = new Set(["applied", "partial", "noop", "duplicate"]);

function describeAck(a: Ack): string {
  const parts = [
    `${a.worker_id} ${a.type ?? "?"} ${a.status}`,
    `requested=${a.requested} affected=${a.affected} skipped=${a.skipped}`,
  ];
  if (a.missing.length) parts.push(`missing=[${a.missing.join(",")}]`);
  if (Object.keys(a.tiers).length) parts.push(`tiers=${stringifyJson(a.tiers)}`);
  if (a.lease) parts.push(`lease=${stringifyJson(a.lease)}`);
  if (a.epoch !== null) parts.push(`epoch=${a.epoch}`);
  parts.push(`elapsed_us=${a.elapsed_us}`);
  if (a.reason) parts.push(`reason: ${a.reason}`);
  return parts.join("  ");
}

type Flags = Record<string, string | boolean | undefined>;

/** The command's body from its field flags, or exit code 2 naming the bad flag. */
function commandBody(v: Flags, type: CommandType): Record<string, unknown> | number {
  const fields = COMMAND_FIELDS[type];
  const body: Record<string, unknown> = { type };
  for (const flag of FIELD_FLAGS) {
    const text = v[flag];
    if (text === undefined) continue;
    const field = flag.replace(/-/g, "_");
    const kind = fields[field];
    if (!kind)
      return usage(
        `--${flag} is not a field of ${type} (fields: ${
          Object.keys(fields)
            .map((f) => `--${kebab(f)}`)
            .join(" ") || "none"
        })`,
      );
    try {
      body[field] = parseFieldText(kind, text as string);
    } catch (e) {
      return usage(`--${flag}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return body;
}

/** Validated before connecting: a bad command fails fast and names its field. */
function validated(
  v: Flags,
  target: string | null,
  type: string,
  body: Record<string, unknown>,
): Command | number {
  try {
    if (target !== null) checkWorkerId(target);
    if (v["subject-prefix"] !== undefined) checkSubjectPrefix(v["subject-prefix"] as string);
  } catch (e) {
    return usage(e instanceof Error ? e.message : String(e));
  }
  try {
    return validateCommand(body);
  } catch (e) {
    if (e instanceof CommandValidationError)
      return usage(`invalid ${type}: --${kebab(e.field.replace(/\[\d+\]$/, ""))}: ${e.message}`);
    throw e;
  }
}

interface Timing {
  timeoutMs: number | undefined;
  deadlineMs: number | undefined;
  retries: number | undefined;
}

/** Sends cmd and prints what came back; the exit code (1 unless every ack is a success). */
async function deliver(
  pub: ControlPublisher,
  nc: { flush(): Promise<void> },
  v: Flags,
  target: string | null,
  cmd: Command,
  t: Timing,
): Promise<number> {
  const id = v.id as string | undefined;
  if (v["no-ack"]) {
    const sent = pub.publish(target === null ? { broadcast: true } : target, cmd, { id });
    await nc.flush();
    console.log(
      v.json
        ? stringifyJson({ id: sent, published: true })
        : `published ${cmd.type} id=${sent} (no ack requested)`,
    );
    return 0;
  }
  if (target === null) {
    const workers = v.workers
      ? (v.workers as string)
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean)
      : undefined;
    const res = await pub.broadcast(cmd, { deadlineMs: t.deadlineMs ?? 1000, workers, id });
    if (v.json) {
      console.log(
        `{"id":${JSON.stringify(res.id)},"acks":[${res.acks.map(encodeAck).join(",")}],"silent":${JSON.stringify(res.silent)},"unexpected":${JSON.stringify(res.unexpected)},"no_responders":${res.noResponders}}`,
      );
    } else {
      console.log(`broadcast ${cmd.type} id=${res.id}: ${res.acks.length} ack(s)`);
      for (const a of res.acks) console.log(`  ${describeAck(a)}`);
      if (res.noResponders) console.log("  no responders on the broadcast subject");
      if (res.silent.length) console.log(`  silent: ${res.silent.join(", ")}`);
    }
    return res.noResponders || res.silent.length || res.acks.some((a) => !OK.has(a.status)) ? 1 : 0;
  }
  const ack = await pub.send(target, cmd, { id });
  console.log(v.json ? encodeAck(ack) : describeAck(ack));
  return OK.has(ack.status) ? 0 : 1;
}

/** Connects as the flags say, delivers the command and closes. */
async function connectAndDeliver(
  v: Flags,
  target: string | null,
  cmd: Command,
  t: Timing,
): Promise<number> {
  const connectOptions = connectOptionsFromFlags(v, "kvctl send");
  const nc = await connectControlPlane({ ...connectOptions, maxReconnectAttempts: 0 });
  try {
    const pub = new ControlPublisher(nc, {
      inboxPrefix: connectOptions.inboxPrefix,
      subjectPrefix: (v["subject-prefix"] as string | undefined) ?? undefined,
      timeoutMs: t.timeoutMs ?? 1000,
      retries: t.retries ?? 2,
    });
    return await deliver(pub, nc, v, target, cmd, t);
  } catch (e) {
    if (e instanceof ControlError) {
      console.error(`kvctl send: ${e.name}: ${e.message}`);
      return 1;
    }
    throw e;
  } finally {
    await nc.close();
  }
}

export const command: CliCommand = {
  summary: "send one control command to a worker (or broadcast) and print the ack",
  async run(argv) {
    const stringFlags = new Set(
      Object.entries(OPTIONS)
        .filter(([, o]) => o.type === "string")
        .map(([k]) => k),
    );
    const parsed = commandArgs(argv, {
      name: "kvctl send",
      options: OPTIONS,
      help: HELP,
      positionals: true,
      prepare: (a) => joinNegativeValues(a, stringFlags),
    });
    if (typeof parsed === "number") return parsed;
    const v = parsed.values as Flags;
    const pos = parsed.positionals;
    const broadcast = v.broadcast === true;
    const [target, type] = broadcast ? [null, pos[0]] : [pos[0], pos[1]];
    if (pos.length !== (broadcast ? 1 : 2))
      return usage(
        broadcast
          ? "expected: --broadcast <Command>"
          : "expected: <worker-id> <Command> (or --broadcast <Command>)",
      );
    if (!(COMMAND_TYPES as readonly string[]).includes(type!))
      return usage(
        `unknown command type ${JSON.stringify(type)} (expected one of ${COMMAND_TYPES.join(", ")})`,
      );
    const body = commandBody(v, type as CommandType);
    if (typeof body === "number") return body;
    const timeoutMs = intFlag(v["timeout-ms"] as string | undefined, "timeout-ms");
    const deadlineMs = intFlag(v["deadline-ms"] as string | undefined, "deadline-ms");
    const retries = intFlag(v.retries as string | undefined, "retries");
    for (const n of [timeoutMs, deadlineMs, retries])
      if (n instanceof Error) return usage(n.message);
    if (!broadcast && v.workers) return usage("--workers only applies with --broadcast");
    const cmd = validated(v, target, type as string, body);
    if (typeof cmd === "number") return cmd;
    return connectAndDeliver(v, target, cmd, {
      timeoutMs: timeoutMs as number | undefined,
      deadlineMs: deadlineMs as number | undefined,
      retries: retries as number | undefined,
    });
  },
};
