// Field checks of the trace reader: each names the line and the field it refuses.
import { TraceError } from "./format.js";

export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);

export class Fields {
  constructor(readonly line: number) {}

  fail(field: string, why: string): never {
    throw new TraceError(this.line, field, why);
  }

  int(field: string, v: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
    if (!Number.isSafeInteger(v) || (v as number) < min || (v as number) > max)
      this.fail(field, `expected an integer in [${min}, ${max}], got ${JSON.stringify(v)}`);
    return v as number;
  }

  num(field: string, v: unknown, min: number): number {
    if (typeof v !== "number" || !Number.isFinite(v) || v < min)
      this.fail(field, `expected a number >= ${min}, got ${JSON.stringify(v)}`);
    return v;
  }

  str(field: string, v: unknown): string {
    if (typeof v !== "string" || v === "")
      this.fail(field, `expected a non-empty string, got ${JSON.stringify(v)}`);
    return v;
  }

  obj(field: string, v: unknown): Json {
    if (!isObject(v)) this.fail(field, `expected an object, got ${JSON.stringify(v)}`);
    return v;
  }

  arr(field: string, v: unknown): unknown[] {
    if (!Array.isArray(v)) this.fail(field, `expected an array, got ${JSON.stringify(v)}`);
    return v;
  }

  /** Refuses keys outside `known`, naming the first (under `prefix`). */
  only(o: Json, known: readonly string[], prefix = ""): void {
    for (const k of Object.keys(o))
      if (!known.includes(k))
        this.fail(`${prefix}${k}`, `unknown field (known: ${known.join(", ")})`);
  }

  /** Two renderings of one value (a Mooncake field and its kvctl source) must agree. */
  same(field: string, got: number, want: number, what: string): void {
    if (Math.abs(got - want) > 1e-6 * Math.max(1, Math.abs(want)))
      this.fail(field, `${got} disagrees with ${what} (${want})`);
  }
}

/** Checks that the file's hash ids and the ones recomputed here name the same blocks. */
export class IdMatch {
  private readonly mine = new Map<number, number>();
  private readonly theirs = new Map<number, number>();

  /**
   * `prev` is the session's previous row (its file ids and recomputed ones): the blocks a prompt
   * repeats from it, equal on both sides, were checked there.
   */
  check(
    f: Fields,
    file: readonly unknown[],
    recomputed: readonly number[],
    prev?: { file: readonly unknown[]; mine: readonly number[] },
  ): void {
    if (file.length !== recomputed.length)
      f.fail("hash_ids", `${file.length} ids for ${recomputed.length} blocks of the prompt`);
    let k = 0;
    if (prev)
      while (k < file.length && file[k] === prev.file[k] && recomputed[k] === prev.mine[k]) k++;
    for (; k < recomputed.length; k++) {
      const m = recomputed[k];
      const t = f.int(`hash_ids[${k}]`, file[k], 0);
      const a = this.mine.get(m);
      const b = this.theirs.get(t);
      if ((a !== undefined && a !== t) || (b !== undefined && b !== m))
        f.fail(`hash_ids[${k}]`, `${t} does not name the block the prompt's segments make there`);
      this.mine.set(m, t);
      this.theirs.set(t, m);
    }
  }
}
