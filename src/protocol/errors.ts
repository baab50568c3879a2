// Validation failures that name the offending field, on both sides of the wire: the publisher
// throws them before a command leaves, the responder turns them into a `rejected` ack's reason.
import type { z } from "zod";

export class CommandValidationError extends Error {
  /** Dotted path of the first offending field, e.g. `command.block_hashes[3]` (or `body`). */
  readonly field: string;
  /** Every problem found, each `field: message`. */
  readonly problems: string[];
  constructor(problems: { field: string; message: string }[]) {
    const first = problems[0] ?? { field: "body", message: "invalid" };
    super(problems.map((p) => `${p.field}: ${p.message}`).join("; "));
    this.name = "CommandValidationError";
    this.field = first.field;
    this.problems = problems.map((p) => `${p.field}: ${p.message}`);
  }
}

/** `["command","block_hashes",3]` -> `command.block_hashes[3]`. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += (out ? "." : "") + String(part);
  }
  return out;
}

export function fromZodError(
  error: z.ZodError,
  prefix: readonly PropertyKey[] = [],
): CommandValidationError {
  return new CommandValidationError(
    error.issues.map((issue) => {
      let path = [...prefix, ...issue.path];
      let message = issue.message;
      if (issue.code === "unrecognized_keys") {
        // Name the unknown key itself, which is what a reader of the reason wants to see.
        path = [...path, issue.keys[0] ?? "?"];
        message =
          issue.keys.length > 1 ? `unknown fields ${issue.keys.join(", ")}` : "unknown field";
      }
      return { field: fieldPath(path) || "body", message };
    }),
  );
}
