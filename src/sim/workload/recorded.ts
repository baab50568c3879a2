// bench:agent's recorded runs as workloads (`<prefix>.<regime>.<config>.run<n>.requests.jsonl`,
// bench/agent/README.md): every request with the token ids the real worker saw and generated, its
// session, the wait before it and why, its reasoning span and cache marker, so the sim replays the
// same tokens after the same waits. The ids become segments of a radix tree over every sequence
// (prompt, then output) of the run: a run of tokens several requests share is one segment with one
// seed, as a generated workload's shared prefixes are.
import { readFileSync } from "node:fs";
import type { GapKind, Segment, SimProgram, SimRequestSpec, SimWorkload } from "../types.js";
import { MAX_VOCAB } from "./tokens.js";
import { Fields, isObject, type Json } from "./trace/check.js";
import { TraceError } from "./trace/format.js";

/** The fields of one recorded request a replay reads (the file carries more). */
export interface RecordedRequest {
  line: number;
  session: string;
  sentMs: number;
  gapKind: GapKind;
  gapMs: number;
  tool?: string;
  rewrite: boolean;
  promptIds: number[];
  outputIds: number[];
  promptTokens: number;
  reasoningTokens?: number;
  cacheMarker?: { tokens: number; ttlS: number };
}

const GAP_KINDS: readonly GapKind[] = ["start", "tool", "human"];

function ids(f: Fields, field: string, v: unknown, vocab: number, why: string): number[] {
  if (v === undefined) f.fail(field, `absent: ${why}`);
  return f.arr(field, v).map((x, j) => f.int(`${field}[${j}]`, x, 0, vocab - 1));
}

function readRecord(f: Fields, j: Json, vocab: number): RecordedRequest {
  if (j.ok !== true) f.fail("ok", "a request that failed in the run cannot be replayed exactly");
  const gapKind = j.gapKind as GapKind;
  if (!GAP_KINDS.includes(gapKind))
    f.fail(
      "gapKind",
      "absent or unknown: the run was traced before bench:agent recorded its waits",
    );
  const marker = j.cacheMarker === undefined ? undefined : f.obj("cacheMarker", j.cacheMarker);
  return {
    line: f.line,
    session: f.str("session", j.session),
    sentMs: f.num("sentMs", j.sentMs, 0),
    gapKind,
    gapMs: f.num("gapMs", j.gapMs, 0),
    ...(j.tool !== undefined ? { tool: f.str("tool", j.tool) } : {}),
    rewrite: j.rewrite === true,
    promptIds: ids(f, "promptIds", j.promptIds, vocab, "traced before bench:agent kept prompt ids"),
    outputIds: ids(f, "outputIds", j.outputIds, vocab, "the front returned no generated ids"),
    promptTokens: f.int("promptTokens", j.promptTokens, 0),
    ...(j.reasoningTokens !== undefined
      ? { reasoningTokens: f.int("reasoningTokens", j.reasoningTokens, 0) }
      : {}),
    ...(marker
      ? {
          cacheMarker: {
            tokens: f.int("cacheMarker.tokens", marker.tokens, 0),
            ttlS: f.num("cacheMarker.ttlS", marker.ttlS, 0),
          },
        }
      : {}),
  };
}

/** The recorded requests of one run's trace file, every line checked before any is returned. */
export function parseRecordedRun(text: string, vocab: number): RecordedRequest[] {
  if (!Number.isSafeInteger(vocab) || vocab < 2 || vocab > MAX_VOCAB)
    throw new RangeError(`vocab: expected an integer in [2, ${MAX_VOCAB}], got ${vocab}`);
  const out: RecordedRequest[] = [];
  text.split("\n").forEach((raw, i) => {
    if (raw.trim() === "") return;
    const f: Fields = new Fields(i + 1);
    let j: unknown;
    try {
      j = JSON.parse(raw);
    } catch (e) {
      f.fail("json", (e as Error).message);
    }
    if (!isObject(j)) f.fail("json", "a record is a JSON object");
    out.push(readRecord(f, j, vocab));
  });
  if (out.length === 0) throw new TraceError(1, "records", "the file has no records");
  return out;
}

/** A node of the radix tree over the run's sequences: the ids on the edge from its parent. */
interface Node {
  ids: number[];
  parent: Node | null;
  children: Map<number, Node>;
  seed: number;
}

class RadixTree {
  readonly root: Node = { ids: [], parent: null, children: new Map(), seed: -1 };

  /** The node where `seq` ends, splitting an edge there if it ends inside one. */
  insert(seq: readonly number[]): Node {
    let cur = this.root;
    let pos = 0;
    while (pos < seq.length) {
      const child = cur.children.get(seq[pos]);
      if (!child) {
        const leaf = { ids: seq.slice(pos), parent: cur, children: new Map(), seed: -1 };
        cur.children.set(seq[pos], leaf);
        return leaf;
      }
      let k = 0;
      while (k < child.ids.length && pos + k < seq.length && child.ids[k] === seq[pos + k]) k++;
      cur = k < child.ids.length ? this.split(child, k) : child;
      pos += k;
    }
    return cur;
  }

  private split(n: Node, k: number): Node {
    const parent = n.parent as Node;
    const mid: Node = { ids: n.ids.slice(0, k), parent, children: new Map(), seed: -1 };
    parent.children.set(mid.ids[0], mid);
    n.ids = n.ids.slice(k);
    n.parent = mid;
    mid.children.set(n.ids[0], n);
    return mid;
  }

  /** The edges from `from` (exclusive) down to `to`, as segments, numbering unseen ones. */
  segments(from: Node, to: Node, next: () => number): Segment[] {
    const path: Node[] = [];
    for (let n: Node | null = to; n && n !== from; n = n.parent) path.push(n);
    return path.reverse().map((n) => {
      if (n.seed < 0) n.seed = next();
      return { seed: n.seed, len: n.ids.length, ids: n.ids };
    });
  }
}

export interface RecordedOptions {
  /** The served model's vocabulary (ids must lie below it). */
  vocab: number;
  /** The workload's name (default "recorded"). */
  name?: string;
  /** The programs' family (default "recorded") and tenant (default "default"). */
  family?: string;
  tenant?: string;
}

/** One request, its ids cut into the tree's segments (the output after the prompt's end). */
function requestOf(
  r: RecordedRequest,
  tree: RadixTree,
  ends: { prompt: Node; seq: Node },
  next: () => number,
  first: boolean,
): SimRequestSpec {
  const output = tree.segments(ends.prompt, ends.seq, next);
  const outLen = r.outputIds.length;
  return {
    prompt: tree.segments(tree.root, ends.prompt, next),
    output,
    reasoningTokens: Math.min(r.reasoningTokens ?? 0, outLen),
    gapS: first ? 0 : r.gapMs / 1000,
    gapKind: r.gapKind,
    ...(r.tool !== undefined ? { tool: r.tool } : {}),
    ...(r.cacheMarker
      ? {
          cacheMarker: {
            tokens: Math.min(r.cacheMarker.tokens, r.promptIds.length),
            ttlS: r.cacheMarker.ttlS,
          },
        }
      : {}),
    ...(r.rewrite ? { rewrite: true } : {}),
  };
}

/**
 * The workload of one recorded run: a program per session, its requests in the order they were
 * sent, each after the wait the run planned (its start offset, a tool's run, a human gap).
 */
export function recordedWorkload(records: RecordedRequest[], o: RecordedOptions): SimWorkload {
  const sent = [...records].sort((a, b) => a.sentMs - b.sentMs || a.line - b.line);
  const tree = new RadixTree();
  // Every prompt end is a node before any sequence is cut: the prompt's segments end there.
  const ends = sent.map((r) => ({ prompt: tree.insert(r.promptIds), seq: tree.root }));
  sent.forEach((r, i) => {
    ends[i].seq = tree.insert([...r.promptIds, ...r.outputIds]);
    ends[i].prompt = tree.insert(r.promptIds);
  });
  let seed = 0;
  const next = () => seed++;
  const bySession = new Map<string, SimProgram>();
  sent.forEach((r, i) => {
    let p = bySession.get(r.session);
    if (!p) {
      if (r.gapKind !== "start")
        throw new TraceError(
          r.line,
          "gapKind",
          `the session's first request waited for ${r.gapKind}, not its start`,
        );
      p = {
        id: r.session,
        tenant: o.tenant ?? "default",
        family: o.family ?? "recorded",
        startS: r.gapMs / 1000,
        requests: [],
      };
      bySession.set(r.session, p);
    }
    p.requests.push(requestOf(r, tree, ends[i], next, p.requests.length === 0));
  });
  const programs = [...bySession.values()].sort(
    (a, b) => a.startS - b.startS || (a.id < b.id ? -1 : 1),
  );
  return {
    name: o.name ?? "recorded",
    vocab: o.vocab,
    programs,
    meta: {
      format: "bench-agent-requests",
      requests: sent.length,
      prompt_ids_mismatched: sent.filter((r) => r.promptIds.length !== r.promptTokens).length,
      reasoning_recorded: sent.some((r) => r.reasoningTokens !== undefined),
      markers_recorded: sent.some((r) => r.cacheMarker !== undefined),
    },
  };
}

/** A recorded run's trace file as a workload. */
export function readRecordedRun(path: string, o: RecordedOptions): SimWorkload {
  const name =
    o.name ??
    path
      .split("/")
      .pop()
      ?.replace(/\.requests\.jsonl$/, "") ??
    "recorded";
  return recordedWorkload(parseRecordedRun(readFileSync(path, "utf8"), o.vocab), { ...o, name });
}
