// kvctl verify-hashes: do the router's hashes name blocks exactly as the worker does?
//   offline (default): SGLang's own hashing from the pinned release (python/oracles/
//     sglang_hash_vectors.py) against the addon over a corpus; exit 0 when every page matches.
//   --zmq tcp://host:port: subscribe to a live worker, recompute every BlockStored from its token
//     ids with the addon, print each match/mismatch; exit 0 all matched, 1 a mismatch, 2 nothing
//     received (or nothing verifiable).
//   --dynamo tcp://host:port (with --zmq on the same worker's SGLang stream): also read Dynamo's
//     KV-event plane, which relays the worker's blocks without their tokens; each relayed block's
//     tokens_hash is checked against the addon's Dynamo hash of the tokens SGLang published for
//     the same block hash (block_hash itself is SGLang's chain, checked from --zmq).
import type { ConsumerMetrics } from "../../events/consumer.js";
import type { BlockStoredEvent, KvEvent } from "../../events/types.js";
import type { RecomputeOptions } from "../../events/verify.js";
import { venvPython } from "../../paths.js";
import { commandArgs } from "../args.js";
import type { Command } from "../command.js";

const HELP = `usage: kvctl verify-hashes [--zmq tcp://host:port] [options]

offline (no --zmq): run SGLang's own hashing (pinned release, python) and the addon over a
corpus and diff them.
  --python PATH        python with the pinned sglang (default .venv/bin/python or $KVCTL_PYTHON)
  --seed N             corpus seed (default 0)

live (--zmq): recompute every BlockStored's hashes from its token ids.
  --zmq ENDPOINT       the worker's KV-event PUB endpoint
  --topic T            topic prefix (default "")
  --page-size N        page size (default: each event's block_size)
  --cache-salt S       salt of the traffic (default: each event's cache_salt)
  --extra-key K        RadixKey.extra_key (needed to verify LoRA-namespaced hashes)
  --extra-key-is-lora  the worker has a LoRA name for --extra-key (sglang format)
  --event-format F     sglang (default) | dynamo
  --dynamo ENDPOINT    also Dynamo's KV-event plane (topic kv-events) of the same worker: every
                       relayed block's tokens_hash against the addon's Dynamo hash of its tokens
  --events N           stop after N BlockStored events
  --duration S         stop after S seconds
  --quiet              print only mismatches and the verdict
  --interval S         progress line every S seconds (counts, dropped batches); per-event lines
                       beyond 200 per interval and problems beyond one line per interval are
                       only counted (default 2)
exit: 0 all matched, 1 a mismatch, 2 nothing received / nothing verifiable`;

/** Per-event lines printed per progress interval at most. */
const MAX_LINES_PER_INTERVAL = 200;

async function offline(python: string, seed: string): Promise<number> {
  const { blockHashes, storageKeys } = await import("../../hash/index.js");
  const { runSglangOracle, SGLANG_ORACLE_SCRIPT } = await import("../../hash/sglang-oracle.js");
  console.log(`running SGLang's own hashing: ${python} ${SGLANG_ORACLE_SCRIPT} --seed ${seed}`);
  let doc;
  try {
    doc = runSglangOracle({ python, seed, inherit: true });
  } catch (err) {
    console.error(
      `verify-hashes: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`,
    );
    return 2;
  }
  let pages = 0;
  let bad = 0;
  for (const c of doc.cases) {
    const base = {
      pageSize: c.page_size,
      bigram: c.bigram,
      extraKey: c.extra_key,
      cacheSalt: c.cache_salt,
    };
    c.nodes.forEach((node, i) => {
      const tokens = c.nodes.length === 1 ? c.tokens : node.tokens;
      const parent = i > 0 ? c.nodes[i - 1] : undefined;
      const keys = storageKeys(tokens, { ...base, prior: parent?.storage_keys.at(-1) });
      const hs = Array.from(
        blockHashes(tokens, {
          ...base,
          prior: parent?.event_digests.at(-1),
          eventFormat: c.event_format,
          extraKeyIsLora: c.lora_registered,
        }),
        String,
      );
      pages += node.storage_keys.length;
      const k = node.storage_keys.findIndex((x, j) => keys[j] !== x);
      const h = node.block_hashes.findIndex((x, j) => hs[j] !== x);
      if (
        k >= 0 ||
        h >= 0 ||
        keys.length !== node.storage_keys.length ||
        hs.length !== node.block_hashes.length
      ) {
        bad++;
        console.log(`MISMATCH ${c.name} node ${i}: storage key page ${k}, block hash page ${h}`);
      }
    });
  }
  console.log(
    `SGLang ${doc.sglang_version} vs addon: ${doc.cases.length} cases, ${pages} pages, ${bad} mismatching node(s)`,
  );
  console.log(bad === 0 ? "verdict: MATCH" : "verdict: MISMATCH");
  return bad === 0 ? 0 : 1;
}

type Flags = Record<string, string | boolean | undefined>;
type Recompute = typeof import("../../events/verify.js").recomputeStored;

/** Checks each BlockStored of a live stream against the addon and keeps the counts. */
class LiveCheck {
  readonly n = {
    batches: 0,
    stored: 0,
    pages: 0,
    matched: 0,
    mismatched: 0,
    unverifiable: 0,
    notShown: 0,
  };
  /** Page digests by published hash: a child event chains from its parent's. */
  readonly digests = new Map<bigint, Buffer>();
  /** Each page's token ids by published hash (for Dynamo's tokens_hash check). */
  readonly pageTokens = new Map<bigint, number[]>();
  /** Per-event lines printed this interval. */
  shown = 0;

  constructor(
    private readonly recompute: Recompute,
    private readonly opts: RecomputeOptions,
    private readonly quiet: boolean,
  ) {}

  /**
   * Per-event lines are capped per interval (the progress line counts the rest), so a flood of
   * events cannot hold the periodic output back.
   */
  private say(line: string): void {
    if (this.shown < MAX_LINES_PER_INTERVAL) {
      this.shown++;
      console.log(line);
    } else this.n.notShown++;
  }

  /** One batch; false once maxEvents BlockStored events were checked. */
  batch(seq: bigint | number, events: readonly KvEvent[], maxEvents: number): boolean {
    this.n.batches++;
    for (const e of events) {
      if (e.type === "BlockRemoved") {
        for (const h of e.blockHashes) {
          this.digests.delete(h); // keep the maps bounded like the cache
          this.pageTokens.delete(h);
        }
        continue;
      }
      if (e.type !== "BlockStored") continue;
      this.stored(seq, e);
      if (this.n.stored >= maxEvents) return false;
    }
    return true;
  }

  private stored(seq: bigint | number, e: BlockStoredEvent): void {
    const n = this.n;
    n.stored++;
    n.pages += e.blockHashes.length;
    if (!e.bigram && e.tokenIds.length === e.blockHashes.length * e.blockSize) {
      // the first store of a page names its tokens (a host write-back repeats them)
      e.blockHashes.forEach((h, i) => {
        if (!this.pageTokens.has(h))
          this.pageTokens.set(h, e.tokenIds.slice(i * e.blockSize, (i + 1) * e.blockSize));
      });
    }
    const parent =
      e.parentBlockHash === null ? null : (this.digests.get(e.parentBlockHash) ?? null);
    const r = this.recompute(e, parent, this.opts);
    const head = `seq ${seq} BlockStored ${e.blockHashes.length} page(s) [${e.blockHashes[0]}${e.blockHashes.length > 1 ? ", ..." : ""}] ${e.medium ?? "GPU"}`;
    if (r.kind === "unverifiable") {
      n.unverifiable++;
      if (!this.quiet) this.say(`${head}: unverifiable (${r.reason})`);
      return;
    }
    // Remember every page digest (even of a mismatching event: its children chain from what
    // the worker published, so key them by the published hash).
    e.blockHashes.forEach((h, i) => {
      this.digests.set(h, r.digests.subarray(i * 32, i * 32 + 32));
    });
    if (r.firstMismatch === null) {
      n.matched++;
      if (!this.quiet) this.say(`${head}: match`);
    } else {
      n.mismatched++;
      const i = r.firstMismatch;
      this.say(
        `${head}: MISMATCH at page ${i}: worker ${e.blockHashes[i]}, tokens give ${r.hashes[i]}`,
      );
    }
  }

  counts(m: { missedBatches: number; badFrames: number; badBatches: number }): string {
    const n = this.n;
    return (
      `${n.batches} batch(es) received, ${m.missedBatches} dropped, ${n.stored} BlockStored (${n.pages} pages): ` +
      `${n.matched} matched, ${n.mismatched} mismatched, ${n.unverifiable} unverifiable, ${m.badFrames + m.badBatches} undecodable`
    );
  }

  /** Prints the verdict; the exit code (0 all matched, 1 a mismatch, 2 nothing verifiable). */
  verdict(): number {
    if (this.n.mismatched > 0) {
      console.log("verdict: MISMATCH");
      return 1;
    }
    if (this.n.matched === 0) {
      console.log(
        this.n.stored === 0 ? "verdict: NOTHING RECEIVED" : "verdict: NOTHING VERIFIABLE",
      );
      return 2;
    }
    console.log("verdict: MATCH");
    return 0;
  }
}

function recomputeOptions(v: Flags): RecomputeOptions {
  return {
    pageSize: v["page-size"] ? Number(v["page-size"]) : undefined,
    cacheSalt: v["cache-salt"] as string | undefined,
    extraKey: (v["extra-key"] as string | undefined) ?? null,
    extraKeyIsLora: Boolean(v["extra-key-is-lora"]),
    eventFormat: (v["event-format"] as "sglang" | "dynamo" | undefined) ?? "sglang",
  };
}

async function live(v: Flags): Promise<number> {
  const { KvEventConsumer } = await import("../../events/consumer.js");
  const { recomputeStored } = await import("../../events/verify.js");
  const endpoint = v.zmq as string;
  const maxEvents = v.events ? Number(v.events) : Infinity;
  const duration = v.duration ? Number(v.duration) : Infinity;
  const intervalMs = Number(v.interval ?? "2") * 1000;
  const check = new LiveCheck(recomputeStored, recomputeOptions(v), Boolean(v.quiet));
  // The consumer brings the receive high-water mark, seq tracking (dropped batches) and
  // rate-limited problem logging; its batch events carry every event's token ids.
  const consumer = new KvEventConsumer({
    endpoint,
    worker: endpoint,
    topic: (v.topic as string | undefined) ?? "",
    log: (l) => console.error(l),
    logIntervalMs: intervalMs,
  });
  let resolveEnd!: () => void;
  const ended = new Promise<void>((r) => (resolveEnd = r));
  let stopped = false;
  const end = () => {
    stopped = true;
    resolveEnd();
  };
  consumer.on("restart", () => check.digests.clear());
  consumer.on("batch", ({ seq, batch }) => {
    if (!stopped && !check.batch(seq, batch.events, maxEvents)) end();
  });
  const m = consumer.metrics;
  const progress = startProgress(check, m, intervalMs);
  const dynamo = v.dynamo ? await dynamoCheck(v.dynamo as string, check, Boolean(v.quiet)) : null;
  if (dynamo) consumer.on("batch", () => dynamo.retry());
  await consumer.start();
  console.log(
    `verify-hashes: listening on ${endpoint}${dynamo ? ` and Dynamo's event plane ${v.dynamo}` : ""}`,
  );
  const timer = Number.isFinite(duration) ? setTimeout(end, duration * 1000) : null;
  process.once("SIGINT", end);
  const failed = new Promise<never>((_, reject) => consumer.once("error", reject));
  try {
    await Promise.race([ended, failed]);
  } finally {
    if (timer) clearTimeout(timer);
    clearInterval(progress);
    process.removeListener("SIGINT", end);
    await consumer.close();
    await dynamo?.close();
  }
  console.log(`verify-hashes: ${check.counts(m)}`);
  const code = check.verdict();
  return dynamo ? dynamoVerdict(code, dynamo.counts()) : code;
}

/** A progress line every interval while anything arrives. */
function startProgress(check: LiveCheck, m: ConsumerMetrics, intervalMs: number): NodeJS.Timeout {
  const started = Date.now();
  return setInterval(() => {
    if (check.n.notShown > 0 || m.frames > 0) {
      const hidden = check.n.notShown > 0 ? ` (${check.n.notShown} event line(s) not shown)` : "";
      console.log(
        `verify-hashes: ${((Date.now() - started) / 1000).toFixed(1)} s: ${check.counts(m)}${hidden}`,
      );
    }
    check.shown = 0;
    check.n.notShown = 0;
  }, intervalMs);
}

/** Dynamo's counts and verdict, folded into SGLang's exit code. */
function dynamoVerdict(code: number, d: DynamoCounts): number {
  console.log(
    `verify-hashes: Dynamo: ${d.blocks} relayed block(s): ${d.matched} tokens_hash matched, ${d.mismatched} mismatched, ${d.pending} without tokens, ${d.problems} other problem(s)`,
  );
  if (d.mismatched > 0) {
    console.log("verdict (Dynamo): MISMATCH");
    return 1;
  }
  console.log(d.matched > 0 ? "verdict (Dynamo): MATCH" : "verdict (Dynamo): NOTHING VERIFIABLE");
  return code !== 0 ? code : d.matched > 0 ? 0 : 2;
}

interface DynamoCounts {
  blocks: number;
  matched: number;
  mismatched: number;
  pending: number;
  problems: number;
}

/**
 * Dynamo's relay of the same worker: its blocks carry no tokens, so each record waits until
 * SGLang's stream has given the tokens of every block it names, then goes through the adapter's
 * tokens_hash check. The worker is whatever Dynamo calls it (one worker per run).
 */
async function dynamoCheck(endpoint: string, check: LiveCheck, quiet: boolean) {
  const { DynamoEventAdapter } = await import("../../events/dynamo/adapter.js");
  const { DynamoEventSubscriber } = await import("../../events/dynamo/subscriber.js");
  const { decodeDynamoMessage, DynamoDecodeError } = await import("../../events/dynamo/decode.js");
  const n = { blocks: 0, problems: 0 };
  const adapter = new DynamoEventAdapter({
    identity: true,
    tokensOf: (_w, h) => check.pageTokens.get(h),
  });
  adapter.on("problem", (p: { kind: string; message: string }) => {
    if (p.kind !== "tokens_hash") n.problems++;
    console.log(`Dynamo ${p.kind}: ${p.message}`);
  });
  const held = heldForTokens(adapter, check, quiet);
  const sub = new DynamoEventSubscriber(adapter, [endpoint]);
  // the subscriber's adapter call is replaced: records wait for their tokens first
  adapter.applyMessage = (frames: Uint8Array[]) => {
    try {
      const f = decodeDynamoMessage(frames);
      for (const r of f.records) {
        if (r.data.kind === "stored") n.blocks += r.data.blocks.length;
        held.offer(r);
      }
      return f;
    } catch (e) {
      if (!(e instanceof DynamoDecodeError)) throw e;
      n.problems++;
      console.log(`Dynamo decode: ${e.message}`);
      return null;
    }
  };
  sub.start();
  return {
    retry: () => held.retry(),
    counts: (): DynamoCounts => ({
      blocks: n.blocks,
      matched: adapter.metrics.tokensMatched,
      mismatched: adapter.metrics.problems.tokens_hash,
      pending: held.pendingBlocks(),
      problems: n.problems,
    }),
    close: () => sub.close(),
  };
}

type DynamoRecord = import("../../events/dynamo/decode.js").DynamoRecord;
type DynamoAdapter = import("../../events/dynamo/adapter.js").DynamoEventAdapter;

/** Dynamo records held until SGLang's stream has given the tokens of every block they name. */
function heldForTokens(adapter: DynamoAdapter, check: LiveCheck, quiet: boolean) {
  const pending: DynamoRecord[] = [];
  const known = (r: DynamoRecord) =>
    r.data.kind !== "stored" || r.data.blocks.every((b) => check.pageTokens.has(b.blockHash));
  const apply = (r: DynamoRecord) => {
    if (r.data.kind !== "stored") return;
    const size = check.pageTokens.get(r.data.blocks[0]?.blockHash ?? 0n)?.length;
    adapter.map(r.dynamoWorker, { worker: r.dynamoWorker, blockSize: size });
    const before = adapter.metrics.problems.tokens_hash;
    adapter.applyRecord(r);
    if (!quiet && adapter.metrics.problems.tokens_hash === before) {
      console.log(
        `Dynamo worker ${r.dynamoWorker} ${r.storageTier} ${r.data.blocks.length} block(s) [${r.data.blocks[0]?.blockHash}]: tokens_hash match`,
      );
    }
  };
  return {
    offer(r: DynamoRecord): void {
      if (known(r)) apply(r);
      else pending.push(r);
    },
    retry(): void {
      for (let i = pending.length - 1; i >= 0; i--) {
        if (known(pending[i])) apply(pending.splice(i, 1)[0]);
      }
    },
    pendingBlocks: () =>
      pending.reduce((n, r) => n + (r.data.kind === "stored" ? r.data.blocks.length : 0), 0),
  };
}

const OPTIONS = {
  help: { type: "boolean", short: "h" },
  zmq: { type: "string" },
  dynamo: { type: "string" },
  topic: { type: "string" },
  "page-size": { type: "string" },
  "cache-salt": { type: "string" },
  "extra-key": { type: "string" },
  "extra-key-is-lora": { type: "boolean" },
  "event-format": { type: "string" },
  events: { type: "string" },
  duration: { type: "string" },
  quiet: { type: "boolean" },
  interval: { type: "string" },
  python: { type: "string" },
  seed: { type: "string" },
} as const;

export const command: Command = {
  summary: "diff SGLang's hashing against the addon (offline corpus, or a live worker's KV events)",
  async run(argv) {
    const parsed = commandArgs(argv, {
      name: "verify-hashes",
      options: OPTIONS,
      help: HELP,
      helpOnError: "line",
    });
    if (typeof parsed === "number") return parsed;
    const { values } = parsed;
    if (values["event-format"] && !["sglang", "dynamo"].includes(values["event-format"])) {
      console.error("verify-hashes: --event-format must be sglang or dynamo");
      return 2;
    }
    if (values.dynamo && !values.zmq) {
      console.error(
        "verify-hashes: --dynamo needs --zmq (the same worker's SGLang stream, which carries the tokens)",
      );
      return 2;
    }
    if (values.zmq) return live(values);
    const python = values.python ?? venvPython;
    return offline(python, values.seed ?? "0");
  },
};
