// `kvctl listen`: print every message on the control subjects (and, with --acks, every ack going
// back), for debugging. Read-only: it never answers, so it cannot be mistaken for a worker.
import type { Msg } from "@nats-io/transport-node";
import {
  connectOptionsFromFlags,
  NATS_FLAGS,
  NATS_FLAGS_HELP,
} from "../../control/connection-flags.js";
import { connectControlPlane } from "../../control/index.js";
import {
  broadcastSubject,
  checkSubjectPrefix,
  checkWorkerId,
  DEFAULT_SUBJECT_PREFIX,
  decodeAck,
  decodeBody,
  parseControlSubject,
  stringifyJson,
  workerSubject,
} from "../../protocol/index.js";
import { type ArgValues, commandArgs, usageError } from "../args.js";
import type { Command as CliCommand } from "../command.js";

const OPTIONS = {
  ...NATS_FLAGS,
  workers: { type: "string" },
  acks: { type: "boolean" },
  count: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

const HELP = `usage: kvctl listen [--workers w0,w1] [--acks] [--count N] [--json]

Prints every command on the control subjects. Without --workers it subscribes to '>' and keeps
the subjects that start with the prefix (needs subscribe permission on '>'); with --workers it
subscribes to those workers' subjects and the broadcast subject only.
  --acks      also print acks (replies on _INBOX.> that parse as Acks; needs the '>' subscription)
  --count N   exit after N messages
  --json      one JSON object per line: {"subject","reply","valid","reason","message"}
${NATS_FLAGS_HELP}`;

type Values = ArgValues<typeof OPTIONS>;

/** What to listen to: the subject prefix, how many messages, which subjects; or exit code 2. */
function plan(v: Values): { prefix: string; limit: number; subjects: string[] } | number {
  const prefix = v["subject-prefix"] ?? DEFAULT_SUBJECT_PREFIX;
  let limit = Number.POSITIVE_INFINITY;
  try {
    checkSubjectPrefix(prefix);
    if (v.count !== undefined) {
      if (!/^\d+$/.test(v.count))
        throw new Error(`--count: expected a positive integer, got ${JSON.stringify(v.count)}`);
      limit = Number(v.count);
    }
    if (v.workers && v.acks) throw new Error("--acks needs the '>' subscription: drop --workers");
  } catch (e) {
    return usageError("kvctl listen", e instanceof Error ? e.message : String(e));
  }
  try {
    const subjects = v.workers
      ? [
          ...v.workers.split(",").map((w) => workerSubject(checkWorkerId(w.trim()), prefix)),
          broadcastSubject(prefix),
        ]
      : [">"];
    return { prefix, limit, subjects };
  } catch (e) {
    return usageError("kvctl listen", `--workers: ${e instanceof Error ? e.message : String(e)}`);
  }
}

const text = new TextDecoder();

/** Prints one message seen on the subjects; false when it is none of ours (not printed). */
function printMessage(msg: Msg, v: Values, prefix: string): boolean {
  const isControl = parseControlSubject(msg.subject, prefix) !== null;
  const isAck = !isControl && v.acks && msg.subject.startsWith("_INBOX.");
  if (!isControl && !isAck) return false;
  let valid = true;
  let reason: string | null = null;
  let summary = "";
  if (isControl) {
    const d = decodeBody(msg.data);
    valid = d.ok;
    if (d.ok) summary = `${d.command.type} id=${d.id ?? "(bare)"} ${stringifyJson(d.command)}`;
    else reason = d.error.message;
  } else {
    try {
      const a = decodeAck(msg.data);
      summary = `ack ${a.worker_id} ${a.type ?? "?"} ${a.status} id=${a.id ?? "-"}`;
    } catch {
      return false; // some other request's reply: not ours
    }
  }
  const body = text.decode(msg.data);
  if (v.json) {
    // The body is printed verbatim: re-encoding it could only lose information.
    const message = valid ? body : JSON.stringify(body);
    console.log(
      `{"subject":${JSON.stringify(msg.subject)},"reply":${msg.reply ? JSON.stringify(msg.reply) : "null"},"valid":${valid},"reason":${reason === null ? "null" : JSON.stringify(reason)},"message":${message}}`,
    );
  } else {
    const when = new Date().toISOString();
    console.log(
      `${when} ${msg.subject}${msg.reply ? " (request)" : ""} ${valid ? summary : `INVALID: ${reason}`}`,
    );
  }
  return true;
}

export const command: CliCommand = {
  summary: "print every command on the control subjects (debugging)",
  async run(argv) {
    const parsed = commandArgs(argv, { name: "kvctl listen", options: OPTIONS, help: HELP });
    if (typeof parsed === "number") return parsed;
    const v = parsed.values;
    const p = plan(v);
    if (typeof p === "number") return p;
    const nc = await connectControlPlane(connectOptionsFromFlags(v, "kvctl listen"));
    let seen = 0;
    const done = new Promise<void>((resolve) => {
      const onMsg = (msg: Msg) => {
        if (printMessage(msg, v, p.prefix) && ++seen >= p.limit) resolve();
      };
      for (const s of p.subjects)
        nc.subscribe(s, { callback: (err, msg) => void (err ? undefined : onMsg(msg)) });
      const stop = () => resolve();
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
    });
    await nc.flush();
    console.error(`kvctl listen: listening on ${p.subjects.join(", ")} (prefix ${p.prefix})`);
    await done;
    await nc.close();
    return 0;
  },
};
