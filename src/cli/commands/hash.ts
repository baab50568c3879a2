// `kvctl hash`: the block hashes a worker would publish for a token sequence, one per full page.
import { readFileSync } from "node:fs";
import {
  HashInputError,
  blockHashes,
  dynamoBlockHashes,
  dynamoSequenceHashes,
  storageKeys,
} from "../../hash/index.js";
import { type ArgValues, commandArgs, usageError } from "../args.js";
import type { Command as CliCommand } from "../command.js";

const OPTIONS = {
  scheme: { type: "string" },
  "page-size": { type: "string" },
  tokens: { type: "string" },
  file: { type: "string" },
  json: { type: "boolean" },
  salt: { type: "string" },
  "extra-key": { type: "string" },
  "extra-key-is-lora": { type: "boolean" },
  "event-format": { type: "string" },
  lora: { type: "string" },
  bigram: { type: "boolean" },
  prior: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

const SCHEMES = ["sglang", "storage-key", "dynamo-local", "dynamo-seq"] as const;
type Scheme = (typeof SCHEMES)[number];

const HELP = `usage: kvctl hash --scheme sglang|storage-key|dynamo-local|dynamo-seq --page-size N
                  (--tokens '[1,2,3]' | --file tokens.json) [--json] [options]

Prints one entry per full page (a partial trailing page is not hashed, as on the worker).
  sglang        int64 block hash of SGLang's KV events (BlockStored.block_hashes)
  storage-key   SGLang HiCache storage key (64 hex chars: the page's chained SHA-256)
  dynamo-local  Dynamo LocalBlockHash (u64)
  dynamo-seq    Dynamo SequenceHash (u64)
options:
  --file F            a JSON array of token ids, or {"tokens": [...]}
  --json              print a JSON array (decimal strings, or hex keys)
  --salt S            cache_salt (SGLang) / cache_namespace (Dynamo)
  --extra-key K       SGLang RadixKey.extra_key (LoRA id or caller namespace)
  --extra-key-is-lora the worker knows a LoRA name for --extra-key (namespaces sglang events)
  --event-format F    sglang (default) or dynamo: which publisher format the worker runs
  --lora NAME         Dynamo LoRA adapter name
  --bigram            EAGLE bigram keys (SGLang) / eagle windows (Dynamo)
  --prior HEX         continue an SGLang chain from this parent digest (64 hex chars)`;

class FlagError extends Error {}

function readTokens(v: { tokens?: string; file?: string }): unknown {
  if ((v.tokens === undefined) === (v.file === undefined))
    throw new FlagError("--tokens / --file: give exactly one of them");
  const [flag, text] =
    v.tokens !== undefined
      ? ["--tokens", v.tokens]
      : [
          "--file",
          (() => {
            try {
              return readFileSync(v.file as string, "utf8");
            } catch (e) {
              throw new FlagError(
                `--file: cannot read ${v.file}: ${e instanceof Error ? e.message : String(e)}`,
              );
            }
          })(),
        ];
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new FlagError(`${flag}: not valid JSON (expected an array of token ids like [1,2,3])`);
  }
  if (parsed && typeof parsed === "object" && !Array.isArray(parsed) && "tokens" in parsed)
    parsed = (parsed as { tokens: unknown }).tokens;
  if (!Array.isArray(parsed)) throw new FlagError(`${flag}: expected a JSON array of token ids`);
  return parsed;
}

function compute(
  scheme: Scheme,
  tokens: number[],
  pageSize: number,
  v: Record<string, string | boolean | undefined>,
): string[] {
  const salt = v.salt as string | undefined;
  if (scheme === "storage-key" || scheme === "sglang") {
    const opts = {
      pageSize,
      bigram: Boolean(v.bigram),
      extraKey: v["extra-key"] as string | undefined,
      cacheSalt: salt,
      prior: v.prior as string | undefined,
    };
    if (scheme === "storage-key") return storageKeys(tokens, opts);
    const eventFormat = (v["event-format"] as "sglang" | "dynamo" | undefined) ?? "sglang";
    return Array.from(
      blockHashes(tokens, {
        ...opts,
        eventFormat,
        extraKeyIsLora: Boolean(v["extra-key-is-lora"]),
      }),
      String,
    );
  }
  const opts = {
    blockSize: pageSize,
    loraName: v.lora as string | undefined,
    cacheNamespace: salt,
    eagle: Boolean(v.bigram),
  };
  const out =
    scheme === "dynamo-local"
      ? dynamoBlockHashes(tokens, opts)
      : dynamoSequenceHashes(tokens, opts);
  return Array.from(out, String);
}

type Values = ArgValues<typeof OPTIONS>;

/** The flags checked: the scheme and page size, or a FlagError naming the bad one. */
function checkedFlags(v: Values): { scheme: Scheme; pageSize: number } {
  const scheme = v.scheme as Scheme | undefined;
  if (!scheme || !SCHEMES.includes(scheme))
    throw new FlagError(
      `--scheme: expected one of ${SCHEMES.join(", ")}, got ${JSON.stringify(v.scheme ?? null)}`,
    );
  if (v["page-size"] === undefined || !/^[1-9]\d*$/.test(v["page-size"])) {
    throw new FlagError(
      `--page-size: expected a positive integer, got ${JSON.stringify(v["page-size"] ?? null)}`,
    );
  }
  if (v["event-format"] !== undefined && !["sglang", "dynamo"].includes(v["event-format"])) {
    throw new FlagError(
      `--event-format: expected sglang or dynamo, got ${JSON.stringify(v["event-format"])}`,
    );
  }
  if (v.prior !== undefined && !/^[0-9a-fA-F]{64}$/.test(v.prior))
    throw new FlagError("--prior: expected 64 hex chars");
  return { scheme, pageSize: Number(v["page-size"]) };
}

/** The hashes of the tokens the flags name; bad hash input is a FlagError naming its flag. */
function hashesOf(v: Values): { values: string[]; pageSize: number; tokens: number[] } {
  const { scheme, pageSize } = checkedFlags(v);
  const tokens = readTokens(v) as number[];
  try {
    return { values: compute(scheme, tokens, pageSize, v), pageSize, tokens };
  } catch (e) {
    if (!(e instanceof HashInputError)) throw e;
    const flag = e.argument.startsWith("tokens")
      ? v.tokens !== undefined
        ? "--tokens"
        : "--file"
      : e.argument === "options.pageSize" || e.argument === "options.blockSize"
        ? "--page-size"
        : "--options";
    throw new FlagError(
      `${flag}: ${e.argument}: ${e.message.slice(e.message.indexOf(e.argument) + e.argument.length + 2)}`,
    );
  }
}

export const command: CliCommand = {
  summary: "print the block hashes / storage keys of a token sequence",
  async run(argv) {
    const parsed = commandArgs(argv, { name: "kvctl hash", options: OPTIONS, help: HELP });
    if (typeof parsed === "number") return parsed;
    const v = parsed.values;
    let hashed: ReturnType<typeof hashesOf>;
    try {
      hashed = hashesOf(v);
    } catch (e) {
      if (e instanceof FlagError) return usageError("kvctl hash", e.message);
      throw e;
    }
    const { values, pageSize, tokens } = hashed;
    if (v.json) {
      console.log(JSON.stringify(values));
      return 0;
    }
    const rows = values.map((h, i) => [String(i), `${i * pageSize}..${(i + 1) * pageSize - 1}`, h]);
    const head = ["page", "tokens", v.scheme === "storage-key" ? "storage key" : "hash"];
    const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
    const line = (r: string[]) => r.map((x, c) => (c === 2 ? x : x.padStart(widths[c]))).join("  ");
    console.log(line(head));
    for (const r of rows) console.log(line(r));
    if (rows.length === 0)
      console.log(`(no full page: ${tokens.length} tokens, page size ${pageSize})`);
    return 0;
  },
};
