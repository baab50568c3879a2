// Prefetch, then admit: the command that brings a parked program's blocks back to its worker's
// device before program admission lets its returning request through (program-admission.ts waits
// on what this resolves with, bounded by its own deadline). It goes straight to the worker, not
// through the hold ledger: it takes no hold a session record would have to release (the worker's
// device hold on what it loaded ends by itself).
import type { ControlPublisher } from "../control/publisher.js";
import type { GatewayPolicy, PrefetchOutcome, ProgramRetention } from "../contract/policy.js";
import type { KvIndex } from "../index/index.js";
import { type Ack, MAX_PREFETCH_DEADLINE_MS } from "../protocol/index.js";
import type { AdmissionConfig } from "./config/admission.js";
import type { GatewayLog } from "./core/logger.js";
import type { CommandCounts } from "./telemetry/metric-parts.js";

export interface PrefetchSenderOptions {
  /** The publisher while NATS is up, else null. */
  publisher: () => ControlPublisher | null;
  worker: string;
  /** How long the worker may spend loading (the gate admits at the same deadline whatever it did). */
  deadlineMs: number;
  metrics: CommandCounts;
  log: GatewayLog;
  /**
   * How many of a chain's leading blocks the worker holds on device or host, as its KV events
   * say (heldPrefix): the chain is cut there before it is sent, since the worker refuses one
   * that names a block it lacks. Absent: the chain goes whole, cut only by a refusal.
   */
  held?: (blocks: readonly bigint[]) => number;
}

/** The leading blocks of `blocks` the index holds on `worker`'s device, then host, unbroken. */
export function heldPrefix(index: KvIndex, worker: string, blocks: readonly bigint[]): number {
  const t = index.overlap(blocks).workers.get(worker)?.tiered;
  return t ? t.GPU + t.CPU_PINNED : 0;
}

/** What an ack says of the blocks asked for. */
export function prefetchOutcome(ack: Ack): PrefetchOutcome {
  if (ack.status === "applied" || ack.status === "noop") return "resident";
  if (ack.status === "partial") return "partial";
  // A repeat of an id the worker already applied answers with the first outcome's counts.
  if (ack.status === "duplicate") return ack.skipped > 0 ? "partial" : "resident";
  return "failed";
}

/** The worker names the first block it does not hold (`command.block_hashes[i]: ...`): its index. */
function firstUnknown(ack: Ack): number | null {
  const m =
    ack.status === "rejected" && ack.reason
      ? /^command\.block_hashes\[(\d+)\]:/.exec(ack.reason)
      : null;
  return m ? Number(m[1]) : null;
}

/**
 * Sends Prefetch for `blocks` (a session's chain, first block first) and resolves with its outcome.
 * A chain the worker holds only part of (its last page never cached, the tail pruned, a lease's
 * blocks let go) is cut where the index says the worker's copy ends, and a request matches a
 * prefix only up to that gap anyway; a chain the worker still refuses (its events not yet read)
 * names the first block it lacks, and the prefix before it is asked for once more.
 */
export function prefetchSender(
  o: PrefetchSenderOptions,
): (blocks: readonly bigint[]) => Promise<PrefetchOutcome> {
  const deadline = Math.max(1, Math.min(o.deadlineMs, MAX_PREFETCH_DEADLINE_MS));
  const send = async (chain: readonly bigint[], retry: boolean): Promise<PrefetchOutcome> => {
    const publisher = o.publisher();
    const known = o.held ? o.held(chain) : chain.length;
    const blocks = known < chain.length ? chain.slice(0, known) : chain;
    if (!publisher || blocks.length === 0) return "failed";
    o.metrics.commandsSent.inc({ type: "Prefetch" });
    let ack: Ack;
    try {
      ack = await publisher.send(
        o.worker,
        { type: "Prefetch", block_hashes: [...blocks], deadline_ms: deadline },
        { timeoutMs: deadline + 1000, retries: 0 },
      );
    } catch (e) {
      o.metrics.commandsFailed.inc({ type: "Prefetch", error: (e as Error).name || "Error" });
      o.log.warn(`gateway: Prefetch to ${o.worker} failed: ${(e as Error).message}`);
      return "failed";
    }
    o.metrics.commandsAcked.inc({ type: "Prefetch", status: ack.status });
    const gap = firstUnknown(ack);
    if (retry && gap !== null && gap > 0) return send(blocks.slice(0, gap), false);
    if (ack.status === "rejected" || ack.status === "error")
      o.log.warn(`gateway: Prefetch to ${o.worker} came back ${ack.status}: ${ack.reason ?? ""}`);
    return prefetchOutcome(ack);
  };
  return (blocks) => send(blocks, true);
}

/** The policy's retention per worker, each able to send its worker a Prefetch (null: the policy decides none). */
export function programRetention(
  policy: GatewayPolicy,
  config: { readonly admission: AdmissionConfig },
  publisher: () => ControlPublisher | null,
  metrics: CommandCounts,
  log: GatewayLog,
  index: KvIndex,
): ((worker: string, pageSize: () => number) => ProgramRetention) | null {
  if (!policy.programRetention) return null;
  const deadlineMs = config.admission.prefetchDeadlineMs;
  return (worker, pageSize) =>
    policy.programRetention?.(
      worker,
      pageSize,
      prefetchSender({
        publisher,
        worker,
        deadlineMs,
        metrics,
        log,
        held: (blocks) => heldPrefix(index, worker, blocks),
      }),
    ) as ProgramRetention;
}
