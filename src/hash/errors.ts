// Errors of the hash API: every one names the argument at fault.
import type { z } from "zod";

/** Bad input to a hash function; `argument` is the offending argument's path. */
export class HashInputError extends TypeError {
  constructor(
    readonly fn: string,
    readonly argument: string,
    detail: string,
  ) {
    super(`${fn}: ${argument}: ${detail}`);
    this.name = "HashInputError";
  }
}

/** Parses `value` with a zod schema, turning the first issue into a HashInputError. */
export function parseOptions<T extends z.ZodType>(
  fn: string,
  argument: string,
  schema: T,
  value: unknown,
): z.output<T> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const path = [argument, ...issue.path.map(String)].join(".");
  const got = issue.path.reduce<unknown>(
    (v, k) => (v && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[k] : undefined),
    value,
  );
  throw new HashInputError(fn, path, `${issue.message} (got ${describe(got)})`);
}

export function describe(v: unknown): string {
  if (typeof v === "bigint") return `${v}n`;
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v);
  if (v === null || typeof v !== "object") return String(v);
  return Array.isArray(v) ? `array(${v.length})` : (v.constructor?.name ?? "object");
}
