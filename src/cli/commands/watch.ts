// kvctl watch --zmq ...: a live table of per-worker, per-tier block counts and event rates, built
// only from the workers' KV events (consumer -> instrumented in-memory index).
import type { KvEventConsumer } from "../../events/consumer.js";
import { TIERS } from "../../events/types.js";
import type { InstrumentedKvIndex, TierCounts } from "../../index/index.js";
import { type ArgValues, commandArgs, usageError } from "../args.js";
import type { Command } from "../command.js";
import { DYNAMO_HELP, DYNAMO_OPTIONS, type DynamoWatch, startDynamoWatch } from "./watch-dynamo.js";

const HELP = `usage: kvctl watch --zmq [name=]tcp://host:port[,replay=tcp://host:port] [--zmq ...] [options]
  --zmq SPEC       a worker's KV-event endpoint, optionally named and with its replay endpoint
                   (repeatable): w1=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558
  --topic T        topic prefix (default "")
  --interval S     refresh period in seconds (default 1)
  --once           print one table after the first interval and exit
  --duration S     exit after S seconds (prints the final table)
  --json           print each table as one JSON line instead of text
  --log-interval S problems (bad events, drops, restarts) are counted and logged to stderr at
                   most once per worker per S seconds (default 2)
${DYNAMO_HELP}
columns: dropped = batches the workers' seq numbers say never arrived (publisher or socket
queue overflow, network loss); bad = frames, batches and events skipped as malformed`;

export interface WatchSpec {
  worker: string;
  endpoint: string;
  replay?: string;
}

export function parseSpec(s: string): WatchSpec {
  const [first, ...rest] = s.split(",");
  const eq = first.indexOf("=");
  const named = eq > 0 && !first.slice(0, eq).includes("://");
  const endpoint = named ? first.slice(eq + 1) : first;
  const worker = named ? first.slice(0, eq) : endpoint;
  let replay: string | undefined;
  for (const r of rest) if (r.startsWith("replay=")) replay = r.slice(7);
  return { worker, endpoint, replay };
}

const OPTIONS = {
  help: { type: "boolean", short: "h" },
  zmq: { type: "string", multiple: true },
  topic: { type: "string" },
  interval: { type: "string" },
  once: { type: "boolean" },
  duration: { type: "string" },
  json: { type: "boolean" },
  "log-interval": { type: "string" },
  ...DYNAMO_OPTIONS,
} as const;

type Values = ArgValues<typeof OPTIONS>;

interface Row extends TierCounts {
  worker: string;
  events_per_s: number;
  events: number;
  seq: number | null;
  received: number;
  dropped: number;
  gaps: number;
  restarts: number;
  bad: number;
}

/** One table per call: the index's tier counts and each consumer's counters, rates since the last call. */
function tableRenderer(
  consumers: KvEventConsumer[],
  index: InstrumentedKvIndex,
  values: Values,
  zeroTiers: () => TierCounts,
  dynamo: DynamoWatch | null,
): () => void {
  const started = Date.now();
  let last = started;
  const lastEvents = new Map<string, number>();
  const tty = process.stdout.isTTY && !values.json;
  return () => {
    const now = Date.now();
    const dt = Math.max((now - last) / 1000, 1e-3);
    last = now;
    const stats = index.stats();
    const rows = consumers.map((c): Row => {
      const m = c.metrics;
      const prev = lastEvents.get(c.worker) ?? 0;
      lastEvents.set(c.worker, m.events);
      const t = stats.workers[c.worker] ?? zeroTiers();
      return {
        worker: c.worker,
        ...t,
        events_per_s: Math.round(((m.events - prev) / dt) * 10) / 10,
        events: m.events,
        seq: c.seq.expected === null ? null : Number(c.seq.expected - 1n),
        received: m.frames,
        dropped: m.missedBatches,
        gaps: m.gaps,
        restarts: m.restarts,
        bad: m.badFrames + m.badBatches + m.badEvents,
      };
    });
    if (dynamo) rows.push(...dynamoRows(dynamo, stats.workers, zeroTiers));
    if (values.json) {
      console.log(
        JSON.stringify({ t: (now - started) / 1000, blocks: stats.blocks, workers: rows }),
      );
      return;
    }
    if (tty) process.stdout.write("\x1b[H\x1b[2J");
    console.log(textTable(rows, now, stats.blocks));
  };
}

/** Workers seen on Dynamo's event plane (no seq numbers there: Dynamo's own sequence is per publisher). */
function dynamoRows(
  d: DynamoWatch,
  tiers: Record<string, TierCounts>,
  zeroTiers: () => TierCounts,
): Row[] {
  const names = new Set([...d.events.keys(), ...d.bad.keys()]);
  return [...names].sort().map((worker) => ({
    worker: d.adapter.stale.has(worker) ? `${worker} (stale)` : worker,
    ...(tiers[worker] ?? zeroTiers()),
    events_per_s: 0,
    events: d.events.get(worker) ?? 0,
    seq: null,
    received: d.events.get(worker) ?? 0,
    dropped: 0,
    gaps: 0,
    restarts: 0,
    bad: d.bad.get(worker) ?? 0,
  }));
}

function textTable(rows: Row[], now: number, blocks: number): string {
  const head = ["worker", ...TIERS, "ev/s", "events", "seq", "dropped", "restarts", "bad"];
  const body = rows.map((r) => [
    r.worker,
    ...TIERS.map((t) => String(r[t])),
    String(r.events_per_s),
    String(r.events),
    String(r.seq ?? "-"),
    String(r.dropped),
    String(r.restarts),
    String(r.bad),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  return [
    `kvctl watch  ${new Date(now).toISOString()}  blocks=${blocks}`,
    line(head),
    ...body.map(line),
  ].join("\n");
}

/** Renders every interval until --once, --duration or SIGINT (which renders a last table). */
function renderUntilDone(render: () => void, values: Values): Promise<void> {
  const interval = Number(values.interval ?? "1") * 1000;
  const stopAt = values.duration ? Date.now() + Number(values.duration) * 1000 : Infinity;
  return new Promise<void>((resolve) => {
    const timer = setInterval(
      () => {
        render();
        if (values.once || Date.now() >= stopAt) {
          clearInterval(timer);
          resolve();
        }
      },
      values.once
        ? Math.min(interval, values.duration ? Number(values.duration) * 1000 : interval)
        : interval,
    );
    process.once("SIGINT", () => {
      clearInterval(timer);
      render();
      resolve();
    });
  });
}

export const command: Command = {
  summary: "live per-worker, per-tier KV block counts and event rates from ZMQ KV events",
  async run(argv) {
    const parsed = commandArgs(argv, {
      name: "watch",
      options: OPTIONS,
      help: HELP,
      helpOnError: "line",
    });
    if (typeof parsed === "number") return parsed;
    const { values } = parsed;
    if (
      !values.zmq?.length &&
      !values.dynamo?.length &&
      !values["dynamo-discovery"] &&
      !values["dynamo-nats"]
    )
      return usageError("watch", `--zmq or --dynamo is required\n${HELP}`);
    const { KvEventConsumer } = await import("../../events/consumer.js");
    const { InMemoryKvIndex, InstrumentedKvIndex, indexSink, zeroTiers } = await import(
      "../../index/index.js"
    );
    const index = new InstrumentedKvIndex(new InMemoryKvIndex());
    const consumers = (values.zmq ?? []).map((s) => {
      const spec = parseSpec(s);
      return new KvEventConsumer({
        endpoint: spec.endpoint,
        worker: spec.worker,
        replayEndpoint: spec.replay,
        topic: values.topic ?? "",
        sink: indexSink(index),
        log: (l) => console.error(l),
        logIntervalMs: Number(values["log-interval"] ?? "2") * 1000,
      });
    });
    for (const c of consumers) await c.start();
    let dynamo: DynamoWatch | null;
    try {
      dynamo = await startDynamoWatch(values, index);
    } catch (e) {
      for (const c of consumers) await c.close();
      return usageError("watch", (e as Error).message);
    }
    await renderUntilDone(tableRenderer(consumers, index, values, zeroTiers, dynamo), values);
    for (const c of consumers) await c.close();
    await dynamo?.close();
    return 0;
  },
};
