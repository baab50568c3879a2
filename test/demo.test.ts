// `kvctl demo --json` end to end (nats-server + CPU worker harness + scripted agent session): the
// last line is the machine-readable summary and every step's status is the expected one.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { hasVenv, repoRoot } from "./helpers/python.js";
import { findNatsServer } from "./helpers/nats-server.js";

describe.skipIf(!hasVenv || !findNatsServer().path)("kvctl demo", () => {
  it("runs the agent session and ends with {\"demo\":\"ok\",\"commands\":[...]}", () => {
    const t0 = Date.now();
    const r = spawnSync(process.execPath, ["--import", "tsx", "src/cli/bin.ts", "demo", "--json"], {
      cwd: repoRoot,
      encoding: "utf8",
      timeout: 150_000,
    });
    const lines = r.stdout.trim().split("\n");
    const last = JSON.parse(lines[lines.length - 1]);
    expect(last.commands.map((c: { type: string }) => c.type)).toEqual(
      expect.arrayContaining(["Cache", "Think", "ToolStart", "ToolEnd", "Pause", "RenewLease", "Prune", "RevokeLease"]),
    );
    expect(last.demo, `${r.stdout}\n${r.stderr}`).toBe("ok");
    expect(r.status).toBe(0);
    for (const c of last.commands) expect(["applied", "partial"]).toContain(c.status);
    expect(last.pin_vs_flood[1].fraction).toBeGreaterThanOrEqual(0.9);
    expect(r.stdout).toMatch(/KV rows after restore identical to before offload: yes/);
    expect(Date.now() - t0).toBeLessThan(120_000);
  }, 180_000);
});
