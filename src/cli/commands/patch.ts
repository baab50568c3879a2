// `kvctl patch apply|check|revert|status <path>`: the SGLang patch kit (see src/patch/README.md).
import { type ArgValues, commandArgs } from "../args.js";
import type { Command } from "../command.js";
import {
  applySeries,
  checkSeries,
  exitCodeFor,
  PatchError,
  revertSeries,
  seriesStatus,
} from "../../patch/index.js";

const USAGE = `usage: kvctl patch <apply|check|revert|status> <path> [options]

  <path>   an SGLang git checkout (with python/sglang/), its python/ dir, a site-packages dir
           (with sglang/), or the sglang/ package dir itself

subcommands:
  apply    apply the series for the tree's SGLang version and place our Python files, all or
           nothing; a second apply is a no-op, an apply after the series or python/ changed
           brings the tree up to date from the backed-up originals
  check    dry run: per patch, applied / would apply / conflict (file, hunk, first mismatching line)
  revert   restore every original file byte for byte and remove placed files and state
  status   applied patches, hand edits, placed files out of date with python/, and which sglang
           the interpreter imports

options:
  --series <dir>          a series dir (sglang-<version>/) or a patches/ root (default: kvctl's patches/)
  --sglang-version <v>    override the detected SGLang version
  --force                 apply/revert over hand edits of the patched tree (they are discarded)
  --python <interp>       status: interpreter to ask (default: the project .venv, else python3)
  --no-python             status: skip the interpreter check
  --server <url>          status: ask a running server's /server_info whether kvctl is active there
  --json                  machine-readable output on stdout
  -h, --help              this text

exit status: 0 ok; 1 conflict, drift, refused or failed write (nothing changed); 2 usage,
path or version error (nothing changed). status exits 1 when the tree is not cleanly applied.`;

const SUBCOMMANDS = ["apply", "check", "revert", "status"] as const;
type Sub = (typeof SUBCOMMANDS)[number];

function out(json: boolean, obj: unknown, lines: string[]): void {
  if (json) process.stdout.write(`${JSON.stringify(obj, null, 2)}\n`);
  else if (lines.length) process.stdout.write(`${lines.join("\n")}\n`);
}

function header(tree: {
  pkg: string;
  version: string | null;
  versionSource: string | null;
  layout: string;
  warnings: string[];
}): string[] {
  return [
    `SGLang ${tree.version} at ${tree.pkg} (${tree.layout}, version from ${tree.versionSource})`,
    ...tree.warnings.map((w) => `warning: ${w}`),
  ];
}

const OPTIONS = {
  series: { type: "string" },
  "sglang-version": { type: "string" },
  force: { type: "boolean", default: false },
  python: { type: "string" },
  "no-python": { type: "boolean", default: false },
  server: { type: "string" },
  json: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
  "fail-after-writes": { type: "string" }, // test hook, undocumented
} as const;

type Values = ArgValues<typeof OPTIONS>;

async function run(argv: string[]): Promise<number> {
  const parsed = commandArgs(argv, {
    name: "kvctl patch",
    options: OPTIONS,
    help: USAGE,
    positionals: true,
    helpOnError: "blank",
  });
  if (typeof parsed === "number") return parsed;
  const { values, positionals } = parsed;
  const json = values.json ?? false;
  const [sub, path, ...extra] = positionals;
  const usage = (msg: string) => {
    if (json) out(true, { ok: false, error: { code: "usage", message: msg } }, []);
    console.error(`kvctl patch: ${msg}\n\n${USAGE}`);
    return 2;
  };
  if (!sub) return usage("missing subcommand");
  if (!SUBCOMMANDS.includes(sub as Sub))
    return usage(`unknown subcommand '${sub}' (expected ${SUBCOMMANDS.join(", ")})`);
  if (!path) return usage(`missing <path> (the SGLang tree to ${sub})`);
  if (extra.length) return usage(`unexpected arguments: ${extra.join(" ")}`);
  if (values.force && sub !== "apply" && sub !== "revert")
    return usage(`--force applies to apply and revert only`);
  if ((values.python !== undefined || values["no-python"]) && sub !== "status")
    return usage(`--python applies to status only`);
  try {
    return await runSub(sub as Sub, path, values, json, usage);
  } catch (err) {
    if (err instanceof PatchError) {
      if (json) out(true, { ok: false, error: { code: err.code, message: err.message } }, []);
      console.error(`kvctl patch ${sub}: ${err.message}`);
      return exitCodeFor(err.code);
    }
    throw err;
  }
}

async function runSub(
  sub: Sub,
  path: string,
  values: Values,
  json: boolean,
  usage: (msg: string) => number,
): Promise<number> {
  const common = { series: values.series, sglangVersion: values["sglang-version"] };
  const failAfterWrites =
    values["fail-after-writes"] !== undefined ? Number(values["fail-after-writes"]) : undefined;
  switch (sub) {
    case "apply": {
      const r = applySeries(path, { ...common, force: values.force, failAfterWrites });
      out(json, r, [...header(r.tree), `series ${r.series.name} (${r.series.dir})`, ...r.messages]);
      return r.ok ? 0 : 1;
    }
    case "check": {
      const r = checkSeries(path, common);
      out(json, r, [...header(r.tree), `series ${r.series.name} (${r.series.dir})`, ...r.messages]);
      return r.ok ? 0 : 1;
    }
    case "revert": {
      const r = revertSeries(path, {
        force: values.force,
        sglangVersion: values["sglang-version"],
        failAfterWrites,
      });
      out(json, r, r.messages);
      return r.ok ? 0 : 1;
    }
    case "status": {
      let serverArgs: Record<string, unknown> | undefined;
      if (values.server !== undefined) {
        const res = await fetch(new URL("/server_info", values.server));
        if (!res.ok) return usage(`--server ${values.server}: /server_info answered ${res.status}`);
        serverArgs = (await res.json()) as Record<string, unknown>;
      }
      const r = seriesStatus(path, {
        ...common,
        python: values["no-python"] ? false : values.python,
        serverArgs,
      });
      out(json, r, r.messages);
      return r.clean ? 0 : 1;
    }
  }
  return 2;
}

export const command: Command = {
  summary: "apply, check, revert or inspect the SGLang patch series (patches/sglang-<version>/)",
  run,
};
