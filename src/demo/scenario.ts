// The scripted agent session of `kvctl demo`: every command goes through the real ControlPublisher
// over NATS to the worker (a real patched SGLang server on CPU, or the harness: workers.ts), and
// after each one the session's tier residency is read back with Inspect. Then the pin-vs-flood table.
import type { ControlPublisher } from "../control/index.js";
import type { Ack, AckStatus, Command } from "../protocol/index.js";
import { type EventRecorder, summarize } from "./harness.js";
import type { DemoWorker } from "./workers.js";
import type { KvEvent } from "../events/index.js";

/** The events since `mark`, once the stream has been quiet for 40 ms (at most 400 ms). */
async function quiet(rec: EventRecorder, mark: number): Promise<KvEvent[]> {
  let n = -1;
  for (let i = 0; i < 10 && rec.mark() !== n; i++) {
    n = rec.mark();
    await new Promise((r) => setTimeout(r, 40));
  }
  return rec.since(mark);
}

export interface StepRecord {
  step: string;
  type: string;
  status: AckStatus;
  expected: AckStatus[];
  ok: boolean;
  ack: Ack;
  residency: Record<string, number> & { missing: number };
  note?: string;
}

export interface FloodRow {
  label: string;
  prompt_tokens: number;
  cached_tokens: number;
  from_host: number;
  fraction: number;
}

export interface DemoResult {
  steps: StepRecord[];
  table: FloodRow[];
  ok: boolean;
}

/** Token ids `start`.. kept inside a small vocabulary (the tiny model's: 1024, specials below 8). */
const range = (start: number, n: number) =>
  Array.from({ length: n }, (_, i) => 8 + ((start + i) % 1000));

type Print = (line: string) => void;
interface SessionOptions {
  print: Print;
  events?: EventRecorder;
  storage: boolean;
}

/** The command types the worker accepts (Inspect's `detail.commands`: on SGLang's Rust tree core,
 * every type but those that need its Python core, python/kvctl_worker/cores.py). */
async function acceptedTypes(pub: ControlPublisher, workerId: string): Promise<Set<string>> {
  const a = await pub.send(workerId, { type: "Inspect", block_hashes: [] });
  const detail = (a as { detail?: { commands?: unknown } }).detail ?? {};
  if (!Array.isArray(detail.commands)) throw new Error("Inspect named no accepted commands");
  return new Set(detail.commands);
}

/** An ack's counts in one line (what a step prints after the status). */
function ackCounts(ack: Ack): string {
  return [
    `requested ${ack.requested}`,
    `affected ${ack.affected}`,
    ack.skipped ? `skipped ${ack.skipped}` : "",
    ack.missing.length ? `missing ${ack.missing.length}` : "",
    ack.epoch !== null ? `epoch ${ack.epoch}` : "",
    ack.lease ? `lease ${ack.lease.lease_id}` : "",
    `${(ack.elapsed_us / 1000).toFixed(2)} ms`,
  ]
    .filter(Boolean)
    .join(", ");
}

/** The session's steps: each sends one command, reads the watched blocks' residency back, prints and records. */
class SessionSteps {
  readonly steps: StepRecord[] = [];
  /** The blocks whose residency each step reads back (the session's current context). */
  watched: bigint[] = [];

  constructor(
    private readonly pub: ControlPublisher,
    private readonly workerId: string,
    private readonly opts: SessionOptions,
    private readonly accepted: Set<string>,
  ) {}

  /** What a step expects: its usual statuses, or a refusal naming `command.type` when the worker
   * does not accept that command type. */
  private expectedOf(
    cmd: Command,
    usual: AckStatus[],
  ): { expected: AckStatus[]; refused: boolean } {
    const refused = !this.accepted.has(cmd.type);
    return { expected: refused ? ["rejected"] : usual, refused };
  }

  private async residency(): Promise<StepRecord["residency"]> {
    const a = await this.pub.send(this.workerId, { type: "Inspect", block_hashes: this.watched });
    return { ...(a.tiers as Record<string, number>), missing: a.missing.length };
  }

  private describe(r: StepRecord["residency"]): string {
    const tiers = Object.entries(r)
      .filter(([k]) => k !== "missing")
      .map(([k, n]) => `${k} ${n}`);
    return `${tiers.join(", ") || "none resident"}${r.missing ? `, not held ${r.missing}` : ""} (of ${this.watched.length} watched blocks)`;
  }

  async step(name: string, cmd: Command, usual: AckStatus[], note?: string): Promise<Ack> {
    const { events, print } = this.opts;
    const { expected, refused } = this.expectedOf(cmd, usual);
    if (events) await quiet(events, events.mark()); // the previous request's events first
    const mark = events?.mark() ?? 0;
    const ack = await this.pub.send(this.workerId, cmd, { timeoutMs: 15_000 });
    const residency = await this.residency();
    const evs = events ? await quiet(events, mark) : null;
    const ok =
      expected.includes(ack.status) && (!refused || (ack.reason ?? "").startsWith("command.type"));
    this.steps.push({
      step: name,
      type: cmd.type,
      status: ack.status,
      expected,
      ok,
      ack,
      residency,
      note,
    });
    print(`${ok ? "✔" : "✘"} ${name}`);
    print(
      `    ${cmd.type} -> ${ack.status}${ok ? "" : ` (expected ${expected.join("|")})`}: ${ackCounts(ack)}${ack.reason ? ` — ${ack.reason}` : ""}`,
    );
    const why = refused
      ? `(${cmd.type} is not accepted by this worker: refused, as expected)`
      : note;
    print(`    residency: ${this.describe(residency)}${why ? `   ${why}` : ""}`);
    if (evs) print(`    KV events: ${summarize(evs)}`);
    return ack;
  }
}

// The agent's context: system prompt, a user turn, the reasoning, the answer (every part a whole
// number of pages, so blocks = tokens / page).
const CONTEXT = {
  system: range(10, 32),
  user1: range(500, 16),
  reasoning: range(700, 16),
  answer1: range(900, 16),
};

/** Turn 1 served, then the system prompt pinned and the reasoning purged; the user turn's last block index. */
async function firstTurn(
  s: SessionSteps,
  worker: DemoWorker,
  print: Print,
): Promise<{ sysHashes: bigint[]; userEnd: number }> {
  const { system, user1, reasoning, answer1 } = CONTEXT;
  const P = worker.pageSize;
  // The system prompt is shared (served before by other sessions); turn 1's prompt is served, then
  // the finished request (prompt + reasoning + answer) is cached, as the scheduler does.
  await worker.serve(system);
  await worker.serve([...system, ...user1]);
  const turn1 = await worker.serve([...system, ...user1, ...reasoning, ...answer1]);
  const b0 = system.length / P;
  const b1 = b0 + user1.length / P;
  const sysHashes = turn1.block_hashes.slice(0, b0);
  const reasonHashes = turn1.block_hashes.slice(b1, b1 + reasoning.length / P);
  s.watched = turn1.block_hashes.slice();
  print(
    `  served turn 1: ${turn1.tokens} tokens, ${turn1.block_hashes.length} blocks of ${P} tokens ` +
      `(system ${b0}, user ${user1.length / P}, reasoning ${reasoning.length / P}, answer ${answer1.length / P})`,
  );
  await s.step(
    "pin the system prompt (TTL 300 s)",
    { type: "Cache", block_hashes: sysHashes, pin: true, ttl_seconds: 300 },
    ["applied"],
  );
  // reasoning purge: the reasoning leaves the context; its KV and what follows it are unusable
  await s.step(
    "purge the reasoning (Think transient=false)",
    { type: "Think", block_hashes: reasonHashes, transient: false },
    ["applied"],
  );
  return { sysHashes, userEnd: b1 };
}

/** The answer re-encoded without the reasoning, then a tool call: offload, other traffic, restore, compared. */
async function toolCall(s: SessionSteps, worker: DemoWorker, print: Print): Promise<void> {
  const { system, user1, answer1 } = CONTEXT;
  const tokens = [...system, ...user1, ...answer1];
  const turn = await worker.serve(tokens);
  s.watched = turn.block_hashes.slice();
  const before = await worker.fingerprint(tokens);
  const ts = await s.step(
    "tool call starts: offload the session (ToolStart)",
    { type: "ToolStart", session_id: "agent-1", block_hashes: turn.block_hashes },
    ["applied"],
  );
  const toolFlood = Math.ceil(worker.bigFlood.n / 4);
  await worker.flood(toolFlood, worker.bigFlood.each, 7); // other users' traffic while the tool runs
  print(`  (tool running: ${toolFlood} other requests served meanwhile)`);
  await s.step(
    "tool call ends: restore (ToolEnd)",
    { type: "ToolEnd", session_id: "agent-1", epoch: ts.epoch ?? 0 },
    ["applied"],
  );
  const after = await worker.fingerprint(tokens);
  const same = before.value === after.value;
  print(`  ${before.what} after restore identical to before offload: ${same ? "yes" : "NO"}`);
  if (!same) s.steps[s.steps.length - 1].ok = false;
}

/** Idle: the session paused to host under a lease, a flood, the user back; returns the paused turn and the resumed one. */
async function idleAndResume(s: SessionSteps, worker: DemoWorker, print: Print) {
  const { system, user1, answer1 } = CONTEXT;
  const pausedTokens = [...system, ...user1, ...answer1, ...range(1100, 16)];
  const paused = await worker.serve(pausedTokens);
  s.watched = paused.block_hashes.slice();
  await s.step(
    "user idle: pause the session to host (Pause, lease 60 s)",
    { type: "Pause", block_hashes: paused.block_hashes, ttl_seconds: 60, lease_id: "agent-1-idle" },
    ["applied"],
  );
  const idle = await worker.flood(worker.bigFlood.n, worker.bigFlood.each, 11);
  const resume = await worker.cached([...pausedTokens, ...range(1300, 8)]);
  print(
    `  (${idle.requests} flood requests, ${idle.tokens} tokens, while idle; the session's next prompt finds ${resume.cached_tokens}/${paused.tokens} tokens cached, ${resume.host_hit} on host)`,
  );
  await s.step(
    "user back: renew the lease for the turn (RenewLease)",
    { type: "RenewLease", lease_id: "agent-1-idle", new_ttl_seconds: 120 },
    ["applied"],
  );
  const resumed = await worker.serve([...pausedTokens, ...range(1300, 8)]);
  print(
    `  resumed turn served: ${resumed.cached_tokens}/${resumed.tokens} tokens from cache (${resumed.loaded_from_host} loaded back from host)`,
  );
  s.watched = resumed.block_hashes.slice();
  return { paused, pausedTokens, resumed };
}

/** Two VIP contexts, one pinned; a flood larger than GPU + host; how much of each the next prompt finds. */
async function pinVsFlood(
  pub: ControlPublisher,
  worker: DemoWorker,
  workerId: string,
  s: SessionSteps,
  print: Print,
) {
  print("");
  print("— pin vs flood —");
  const vipA = range(200, 64);
  const vipB = range(600, 64);
  await worker.serve(vipA);
  const b = await worker.serve(vipB);
  const pinAck = await pub.send(workerId, {
    type: "Cache",
    block_hashes: b.block_hashes,
    pin: true,
    ttl_seconds: 300,
  });
  s.steps.push({
    step: "pin VIP B",
    type: "Cache",
    status: pinAck.status,
    expected: ["applied"],
    ok: pinAck.status === "applied",
    ack: pinAck,
    residency: { missing: 0 },
  });
  const fl = await worker.flood(worker.bigFlood.n, worker.bigFlood.each, 3);
  const rows: FloodRow[] = [];
  for (const [label, toks] of [
    ["VIP A, no pin", vipA],
    ["VIP B, pinned", vipB],
  ] as const) {
    const c = await worker.cached([...toks, ...range(900 + 40, 8)]);
    rows.push({
      label,
      prompt_tokens: toks.length,
      cached_tokens: Math.min(c.cached_tokens, toks.length),
      from_host: c.host_hit,
      fraction: Math.min(c.cached_tokens, toks.length) / toks.length,
    });
  }
  print(`flood: ${fl.requests} requests, ${fl.tokens} tokens through the GPU pool and host tier`);
  print(
    `${"context".padEnd(16)} ${"prior".padStart(6)} ${"cached".padStart(7)} ${"from host".padStart(10)} ${"fraction".padStart(9)}`,
  );
  for (const r of rows)
    print(
      `${r.label.padEnd(16)} ${String(r.prompt_tokens).padStart(6)} ${String(r.cached_tokens).padStart(7)} ${String(r.from_host).padStart(10)} ${(r.fraction * 100).toFixed(1).padStart(8)}%`,
    );
  const ok = rows[1].fraction >= 0.9 && rows[0].fraction <= 0.5;
  if (!ok) print("pin-vs-flood: unexpected (pinned should be >= 90% cached, unpinned <= 50%)");
  await pub.send(workerId, { type: "Cache", block_hashes: b.block_hashes, pin: false });
  return { rows, ok };
}

export async function runAgentSession(
  pub: ControlPublisher,
  worker: DemoWorker,
  workerId: string,
  opts: SessionOptions,
): Promise<DemoResult> {
  const { print } = opts;
  const s = new SessionSteps(pub, workerId, opts, await acceptedTypes(pub, workerId));
  print("— agent session (worker " + workerId + ") —");
  const { sysHashes, userEnd } = await firstTurn(s, worker, print);
  await toolCall(s, worker, print);
  const { paused, pausedTokens, resumed } = await idleAndResume(s, worker, print);
  // context rewrite: everything after the user turn is replaced
  // (force: the old continuation is garbage even though the idle lease still holds it)
  const keepTo = resumed.block_hashes[userEnd - 1]; // the last block of the user turn
  await s.step(
    "context rewrite: prune everything after the user turn (Prune, force)",
    { type: "Prune", after_block_hash: keepTo, force: true },
    ["applied"],
  );
  await s.step(
    "session over: revoke the lease (RevokeLease; the pinned system prompt stays)",
    { type: "RevokeLease", lease_id: "agent-1-idle" },
    ["applied", "partial"],
  );
  if (opts.storage && paused.storage_keys.length) {
    await s.step(
      "warm the paused turn back from storage (Warm -> CPU_TIER1)",
      {
        type: "Warm",
        block_keys: paused.storage_keys,
        token_ids: pausedTokens,
        target_tier: "CPU_TIER1",
      },
      ["applied", "partial"],
    );
  }
  await s.step("unpin the system prompt", { type: "Cache", block_hashes: sysHashes, pin: false }, [
    "applied",
  ]);
  const table = await pinVsFlood(pub, worker, workerId, s, print);
  return { steps: s.steps, table: table.rows, ok: s.steps.every((x) => x.ok) && table.ok };
}
