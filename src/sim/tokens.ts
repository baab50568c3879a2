// A program's token sequence as the engine tracks it between requests: what the fleet already
// holds of it (the prompt of a request is sent as the length it keeps of the program's last
// sequence plus its new tokens), and the block hashes of its full pages in the workers' scheme,
// computed by the addon (the one hash core) as the gateway computes them: each page once, the
// chain continued from the last shared page's digest.
import { blockHashesWithDigests } from "../hash/index.js";
import type { Segment, SimRequestSpec } from "./types.js";
import { fillSegment, segmentsLength } from "./workload/index.js";

/** A request's tokens as the engine sends and routes them. */
export interface PreparedRequest {
  /** Tokens of the program's last sequence (prompt and output) its prompt starts with. */
  keep: number;
  /** The prompt's tokens after `keep`. */
  promptTail: Int32Array;
  output: Int32Array;
  promptLen: number;
  /** Block hashes of the prompt's full pages. */
  promptHashes: BigInt64Array;
  /** Their digests (32 bytes a page): where the chain goes on. */
  promptDigests: Buffer;
}

/** Tokens [from, to) of a run of segments. */
export function fillRange(segs: readonly Segment[], from: number, to: number, vocab: number) {
  const out = new Int32Array(Math.max(0, to - from));
  let pos = 0;
  let scratch: Int32Array | null = null;
  for (const s of segs) {
    const end = pos + s.len;
    if (end > from && pos < to) {
      const a = Math.max(from, pos);
      const b = Math.min(to, end);
      if (a === pos && b === end) fillSegment(s, vocab, out, a - from);
      else {
        if (!scratch || scratch.length < s.len) scratch = new Int32Array(s.len);
        fillSegment(s, vocab, scratch, 0);
        out.set(scratch.subarray(a - pos, b - pos), a - from);
      }
    }
    pos = end;
    if (pos >= to) break;
  }
  return out;
}

function sameSegment(a: Segment, b: Segment): boolean {
  if (a.seed !== b.seed) return false;
  if (!a.ids && !b.ids) return true;
  if (!a.ids || !b.ids) return false;
  return a.ids === b.ids;
}

/** Tokens two runs of segments surely share from their start (segment by segment: a shorter
 * answer may miss tokens that agree by chance, never claim one that does not). */
export function sharedPrefix(a: readonly Segment[], b: readonly Segment[]): number {
  let n = 0;
  for (let i = 0; i < a.length && i < b.length; i++) {
    if (!sameSegment(a[i], b[i])) break;
    if (a[i].ids && b[i].ids) {
      const x = a[i].ids as readonly number[];
      const y = b[i].ids as readonly number[];
      let k = 0;
      while (k < x.length && k < y.length && x[k] === y[k]) k++;
      n += k;
      if (k < x.length || k < y.length) break;
      continue;
    }
    n += Math.min(a[i].len, b[i].len);
    if (a[i].len !== b[i].len) break;
  }
  return n;
}

export class ProgramTokens {
  private segs: Segment[] = [];
  private hashes: BigInt64Array = new BigInt64Array(0);
  private digests: Buffer = Buffer.alloc(0);

  constructor(
    private readonly vocab: number,
    private readonly pageSize: number,
  ) {}

  /** Hashes of `segs`' full pages, the first `reuse` pages taken from the last sequence. */
  private chain(segs: readonly Segment[], len: number, reuse: number) {
    const page = this.pageSize;
    const pages = Math.floor(len / page);
    const from = Math.min(reuse, pages);
    const hashes = new BigInt64Array(pages);
    const digests = Buffer.alloc(pages * 32);
    hashes.set(this.hashes.subarray(0, from));
    this.digests.copy(digests, 0, 0, from * 32);
    if (pages > from) {
      const tokens = fillRange(segs, from * page, pages * page, this.vocab);
      const prior = from > 0 ? digests.subarray((from - 1) * 32, from * 32) : null;
      const r = blockHashesWithDigests(tokens, { pageSize: page, prior });
      hashes.set(r.hashes, from);
      r.digests.copy(digests, from * 32);
    }
    return { hashes, digests };
  }

  prepare(spec: SimRequestSpec): PreparedRequest {
    const promptLen = segmentsLength(spec.prompt);
    const keep = Math.min(sharedPrefix(this.segs, spec.prompt), promptLen);
    const { hashes, digests } = this.chain(
      spec.prompt,
      promptLen,
      Math.floor(keep / this.pageSize),
    );
    return {
      keep,
      promptTail: fillRange(spec.prompt, keep, promptLen, this.vocab),
      output: fillRange(spec.output, 0, segmentsLength(spec.output), this.vocab),
      promptLen,
      promptHashes: hashes,
      promptDigests: digests,
    };
  }

  /** The request ran: the program's sequence is now its prompt then its output. Returns the
   * sequence's block hashes (the chain a finished turn reports). */
  commit(spec: SimRequestSpec, prepared: PreparedRequest): BigInt64Array {
    const segs = [...spec.prompt, ...spec.output];
    const len = prepared.promptLen + segmentsLength(spec.output);
    // The prompt's pages were hashed by prepare(): the chain goes on from its last full page.
    this.hashes = prepared.promptHashes;
    this.digests = prepared.promptDigests;
    const promptPages = Math.floor(prepared.promptLen / this.pageSize);
    const full = this.chain(segs, len, promptPages);
    this.segs = segs;
    this.hashes = full.hashes;
    this.digests = full.digests;
    return full.hashes;
  }
}
