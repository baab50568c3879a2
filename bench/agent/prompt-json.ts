// JSON as the agent model's chat template spells it (its json() macro): keys sorted (case-
// insensitively, as Jinja's dictsort), Python's separators, and only backslash, quote and newline
// escaped. Tool-call arguments go out spelled this way: Dynamo's preprocessor parses them and
// renders the object with that macro, SGLang renders the string as sent, and both then read the
// same text.
export function promptJson(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "string")
    return `"${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v)) return `[${v.map(promptJson).join(", ")}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort((a, b) => {
    const x = a.toLowerCase();
    const y = b.toLowerCase();
    return x < y ? -1 : x > y ? 1 : 0;
  });
  return `{${keys.map((k) => `${promptJson(k)}: ${promptJson(o[k])}`).join(", ")}}`;
}
