// Dynamo's KV events onto kvctl's: maps each Dynamo worker id to a kvctl worker id, checks each
// stored block's tokens_hash against kvctl's Dynamo hashing of its tokens where the tokens are
// known, and hands engine-neutral events (keyed by the engine's block hash) to a sink, the index
// among them. Bad input is reported by name, counted, and marks the worker stale; the event it
// came in is skipped whole and nothing else stops:
//   unmapped_worker     a Dynamo worker id with no kvctl mapping
//   unknown_block_size  a mapped worker whose block size kvctl does not know
//   tokens_hash         a block whose tokens_hash is not Dynamo's hash of its tokens
//   decode              a message that does not decode (the field is named)
import { EventEmitter } from "node:events";
import { dynamoBlockHashes } from "../../hash/dynamo.js";
import type { EventSink } from "../consumer.js";
import type { KvEvent } from "../types.js";
import {
  DynamoDecodeError,
  type DynamoFrame,
  type DynamoRecord,
  decodeDynamoMessage,
} from "./decode.js";

export type DynamoProblemKind = "unmapped_worker" | "unknown_block_size" | "tokens_hash" | "decode";

export interface DynamoProblem {
  kind: DynamoProblemKind;
  /** Dynamo's worker id (decimal), when the message got that far. */
  dynamoWorker: string | null;
  /** The kvctl worker id it maps to, when it does. */
  worker: string | null;
  message: string;
}

export interface DynamoWorkerMapping {
  /** kvctl worker id. */
  worker: string;
  /** Tokens per block (SGLang page size x DCP size). */
  blockSize?: number;
}

export interface DynamoAdapterOptions {
  /**
   * Dynamo worker id (decimal) -> kvctl worker. Ids not listed are unmapped unless `identity`
   * is set, which maps them to the same id (what `python -m kvctl_worker.dynamo` does when no
   * kvctl worker id is given).
   */
  workers?: Record<string, DynamoWorkerMapping>;
  identity?: boolean;
  /**
   * What a record of an unmapped worker is: a problem (the default: on one worker's own stream it
   * means the mapping is wrong), or skipped and counted (`ignoredRecords`, an "ignored" event with
   * the Dynamo id) on a plane every worker of the deployment publishes to, where the workers this
   * side does not front are expected.
   */
  unmapped?: "problem" | "ignore";
  /** Block size of workers whose mapping gives none; unknown when unset. */
  blockSize?: number;
  /** Token ids of a block by its engine hash, where the caller knows them (for the tokens_hash check). */
  tokensOf?: (worker: string, blockHash: bigint) => readonly number[] | undefined;
  sink?: EventSink;
}

export interface DynamoAdapterMetrics {
  messages: number;
  records: number;
  storedBlocks: number;
  removedBlocks: number;
  /** Records of unmapped workers skipped (`unmapped: "ignore"`). */
  ignoredRecords: number;
  /** Blocks whose tokens_hash was checked against their tokens, and how many matched. */
  tokensChecked: number;
  tokensMatched: number;
  problems: Record<DynamoProblemKind, number>;
}

/** Emits "problem" (DynamoProblem), "stale" ({worker, reason}), "record" (DynamoRecord, kvctl worker)
 * and "ignored" (Dynamo worker id, with `unmapped: "ignore"`). */
export class DynamoEventAdapter extends EventEmitter {
  readonly metrics: DynamoAdapterMetrics = {
    messages: 0,
    records: 0,
    storedBlocks: 0,
    removedBlocks: 0,
    ignoredRecords: 0,
    tokensChecked: 0,
    tokensMatched: 0,
    problems: { unmapped_worker: 0, unknown_block_size: 0, tokens_hash: 0, decode: 0 },
  };
  /** Workers (kvctl ids, or Dynamo ids when unmapped) whose view is not trusted. */
  readonly stale = new Map<string, string>();
  private readonly workers: Map<string, DynamoWorkerMapping>;

  constructor(private readonly o: DynamoAdapterOptions = {}) {
    super();
    this.workers = new Map(Object.entries(o.workers ?? {}));
  }

  /** Adds or replaces one mapping (a worker that joined). */
  map(dynamoWorker: string, m: DynamoWorkerMapping): void {
    this.workers.set(dynamoWorker, m);
  }

  /** Drops one mapping (a worker that left); its records are unmapped from now on. */
  unmap(dynamoWorker: string): void {
    const m = this.workers.get(dynamoWorker);
    this.workers.delete(dynamoWorker);
    if (m) this.stale.delete(m.worker);
  }

  mapping(dynamoWorker: string): DynamoWorkerMapping | undefined {
    return (
      this.workers.get(dynamoWorker) ?? (this.o.identity ? { worker: dynamoWorker } : undefined)
    );
  }

  private problem(
    kind: DynamoProblemKind,
    dynamoWorker: string | null,
    worker: string | null,
    message: string,
  ): void {
    this.metrics.problems[kind]++;
    const p: DynamoProblem = { kind, dynamoWorker, worker, message };
    this.emit("problem", p);
    const who = worker ?? dynamoWorker;
    if (who !== null && !this.stale.has(who)) {
      this.stale.set(who, kind);
      this.emit("stale", { worker: who, reason: kind });
    }
  }

  /** One ZMQ message of the kv-events topic; returns the decoded frame, or null when it did not decode. */
  applyMessage(frames: Uint8Array[]): DynamoFrame | null {
    this.metrics.messages++;
    let f: DynamoFrame;
    try {
      f = decodeDynamoMessage(frames);
    } catch (e) {
      if (!(e instanceof DynamoDecodeError)) throw e;
      this.problem("decode", null, null, `undecodable Dynamo KV-event message: ${e.message}`);
      return null;
    }
    for (const r of f.records) this.applyRecord(r, f.sequence);
    return f;
  }

  /** One router event; false when it was refused. */
  applyRecord(r: DynamoRecord, seq = 0n): boolean {
    this.metrics.records++;
    const target = this.targetOf(r);
    if (!target) return false;
    const { worker, blockSize } = target;
    let ev: KvEvent;
    if (r.data.kind === "stored") {
      if (!this.tokensMatch(r, r.data.blocks, worker, blockSize)) return false;
      this.metrics.storedBlocks += r.data.blocks.length;
      ev = {
        type: "BlockStored",
        blockHashes: r.data.blocks.map((b) => b.blockHash),
        parentBlockHash: r.data.parentHash,
        tokenIds: [],
        blockSize,
        loraId: null,
        medium: r.storageTier,
        tier: r.tier,
        cacheSalt: null,
        sessionId: null,
        loraName: null,
        bigram: false,
      };
    } else if (r.data.kind === "removed") {
      this.metrics.removedBlocks += r.data.blockHashes.length;
      ev = {
        type: "BlockRemoved",
        blockHashes: r.data.blockHashes,
        medium: r.storageTier,
        tier: r.tier,
      };
    } else ev = { type: "AllBlocksCleared" };
    this.emit("record", r, worker, ev);
    this.o.sink?.applyBatch?.(
      worker,
      { ts: Date.now() / 1000, events: [ev], dpRank: r.dpRank },
      seq,
    );
    return true;
  }

  /** The kvctl worker a record's Dynamo worker maps to, with its block size; null (reported) when unknown. */
  private targetOf(r: DynamoRecord): { worker: string; blockSize: number } | null {
    const m = this.mapping(r.dynamoWorker);
    if (!m) {
      if (this.o.unmapped === "ignore") {
        this.metrics.ignoredRecords++;
        this.emit("ignored", r.dynamoWorker);
        return null;
      }
      this.problem(
        "unmapped_worker",
        r.dynamoWorker,
        null,
        `Dynamo worker ${r.dynamoWorker} has no kvctl worker mapping`,
      );
      return null;
    }
    const blockSize = m.blockSize ?? this.o.blockSize;
    if (blockSize === undefined || !Number.isInteger(blockSize) || blockSize < 1) {
      this.problem(
        "unknown_block_size",
        r.dynamoWorker,
        m.worker,
        `Dynamo worker ${r.dynamoWorker} (kvctl ${m.worker}): block size unknown`,
      );
      return null;
    }
    return { worker: m.worker, blockSize };
  }

  /** Every stored block whose tokens are known hashes to its tokens_hash; the first that does not is reported. */
  private tokensMatch(
    r: DynamoRecord,
    blocks: readonly { blockHash: bigint; tokensHash: bigint }[],
    worker: string,
    blockSize: number,
  ): boolean {
    for (const b of blocks) {
      const tokens = this.o.tokensOf?.(worker, b.blockHash);
      if (!tokens) continue;
      this.metrics.tokensChecked++;
      const want =
        tokens.length === blockSize
          ? dynamoBlockHashes(tokens as number[], { blockSize })[0]
          : undefined;
      if (want !== b.tokensHash) {
        this.problem(
          "tokens_hash",
          r.dynamoWorker,
          worker,
          `Dynamo worker ${r.dynamoWorker} (kvctl ${worker}) block ${b.blockHash}: tokens_hash ${b.tokensHash}, its ${tokens.length} token(s) hash to ${want ?? "nothing (not one block)"}`,
        );
        return false;
      }
      this.metrics.tokensMatched++;
    }
    return true;
  }
}
