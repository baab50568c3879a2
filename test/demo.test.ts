// `kvctl demo --json` end to end: by default against a REAL patched SGLang server on CPU (tiny local
// model), with --harness against the CPU worker harness. The last line is the machine-readable
// summary and every step's status is the expected one.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { repoRoot } from "./helpers/python.js";

function demo(args: string[], timeoutMs: number) {
  const r = spawnSync(
    process.execPath,
    ["--import", "tsx", "src/cli/bin.ts", "demo", "--json", ...args],
    {
      cwd: repoRoot,
      encoding: "utf8",
      timeout: timeoutMs,
    },
  );
  const lines = r.stdout.trim().split("\n");
  let last: Record<string, unknown> & {
    commands: { type: string; status: string }[];
    pin_vs_flood: { fraction: number }[];
  };
  try {
    last = JSON.parse(lines[lines.length - 1]);
  } catch {
    throw new Error(
      `kvctl demo printed no JSON last line (exit ${r.status}, signal ${r.signal}):\n${r.stdout}\n${r.stderr}`,
    );
  }
  return { r, lines, last };
}

function expectSession(last: ReturnType<typeof demo>["last"], out: string, refused: string[] = []) {
  expect(last.demo, out).toBe("ok");
  expect(last.commands.map((c) => c.type)).toEqual(
    expect.arrayContaining([
      "Cache",
      "Think",
      "ToolStart",
      "ToolEnd",
      "Pause",
      "RenewLease",
      "Prune",
      "RevokeLease",
      "Warm",
    ]),
  );
  for (const c of last.commands)
    expect(refused.includes(c.type) ? ["rejected"] : ["applied", "partial"], c.type).toContain(
      c.status,
    );
  expect(last.pin_vs_flood[0].fraction).toBeLessThanOrEqual(0.05);
  expect(last.pin_vs_flood[1].fraction).toBeGreaterThanOrEqual(0.9);
}

describe("kvctl demo", () => {
  it("default: a real patched SGLang server on the tiny local model; says so first; ends with server sglang 0.5.23", () => {
    const { r, lines, last } = demo([], 900_000);
    const out = `${r.stdout}\n${r.stderr}`;
    expect(lines[0]).toMatch(/^kvctl demo: model: a tiny random Llama built locally/);
    expectSession(last, out);
    expect(r.stdout).toMatch(/greedy output after restore identical to before offload: yes/);
    expect(Object.keys(last).at(-1)).toBe("server");
    expect(last.server).toBe("sglang 0.5.23");
    expect(last.tree_core).toBe("python"); // every command accepted: Think needs the Python core
    expect(r.status).toBe(0);
  }, 1_000_000);

  it("--rust-core: the same session on SGLang's Rust tree core, Think refused naming command.type", () => {
    const { r, last } = demo(["--rust-core"], 900_000);
    const out = `${r.stdout}\n${r.stderr}`;
    expectSession(last, out, ["Think"]);
    expect(r.stdout).toMatch(/Think -> rejected: .* — command\.type: Think is not accepted/);
    expect(r.stdout).toMatch(/greedy output after restore identical to before offload: yes/);
    expect(last.tree_core).toBe("rust");
    expect(r.status).toBe(0);
  }, 1_000_000);

  it("--harness: the CPU worker harness, KV rows identical after restore", () => {
    const { r, lines, last } = demo(["--harness"], 300_000);
    expect(lines[0]).toMatch(/no model \(--harness\)/);
    expectSession(last, `${r.stdout}\n${r.stderr}`);
    expect(r.stdout).toMatch(/KV rows after restore identical to before offload: yes/);
    expect(last.server).toMatch(/^harness/);
    expect(r.status).toBe(0);
  }, 400_000);
});
