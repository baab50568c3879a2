// `kvctl doctor`: every check reports, --json is one object, and a missing nats-server or a bad
// --sglang path are reported (not thrown).
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../src/addon.js";
import { doctor } from "../src/cli/commands/doctor.js";
import { buildInfo } from "../src/copy/index.js";
import { findNatsServer } from "../src/testing/index.js";

const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(process.execPath, ["--import", "tsx", join(packageRoot, "src/cli/bin.ts"), ...args], {
    cwd: packageRoot,
    encoding: "utf8",
    env: { ...process.env, ...env },
    timeout: 60_000,
  });

describe("kvctl doctor", () => {
  it("reports the addon, CUDA, nats-server and python checks", async () => {
    const r = await doctor();
    expect(r.checks.map((c) => c.name)).toEqual(["addon", "cuda", "nats", "python"]);
    const addon = r.checks[0];
    expect(addon.state).toBe("ok");
    expect(addon.summary).toMatch(/SHA-256 (sha-ni|portable)/);
    expect(addon.details).toHaveProperty("cudaBuilt");
    // The state this host calls for, from the addon's own build and runtime facts.
    const facts = buildInfo().cuda;
    const cuda = r.checks[1];
    if (!facts.built) {
      expect(cuda.state).toBe("warn");
      expect(cuda.summary).toMatch(/not built/);
    } else if (!facts.available) {
      expect(cuda.state).toBe("warn");
      expect(cuda.summary).toMatch(/no usable device/);
    } else {
      expect(cuda.state).toBe("ok");
      expect(cuda.summary).toMatch(/driver \d+\.\d+; \d+ device/);
    }
  });

  it("--json prints one JSON object and exits 0 when nothing failed", () => {
    const r = cli(["doctor", "--json"]);
    const lines = r.stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    const j = JSON.parse(lines[0]);
    expect(j.ok).toBe(true);
    expect(r.status).toBe(0);
    const nats = j.checks.find((c: { name: string }) => c.name === "nats");
    const found = findNatsServer();
    if (found.path) {
      expect(nats.state).toBe("ok");
      expect(nats.details.version).toMatch(/^\d+\.\d+\.\d+/);
    } else expect(nats.state).toBe("warn");
  });

  it("KVCTL_NATS_SERVER pointing nowhere is a warning naming it", () => {
    const r = cli(["doctor", "--json"], { KVCTL_NATS_SERVER: "/nonexistent/nats-server" });
    const nats = JSON.parse(r.stdout.trim()).checks.find(
      (c: { name: string }) => c.name === "nats",
    );
    expect(nats.state).toBe("warn");
    expect(nats.summary).toContain("KVCTL_NATS_SERVER=/nonexistent/nats-server");
  });

  it("--sglang reports the patch status of a tree, and a bad path as a failure", async () => {
    const bad = await doctor({ sglang: "/nonexistent/sglang-tree" });
    const p = bad.checks.find((c) => c.name === "patches");
    expect(p?.state).toBe("fail");
    expect(p?.summary).toMatch(/not found/);
    expect(bad.ok).toBe(false);
    const site = join(packageRoot, ".venv", "lib", "python3.11", "site-packages");
    const good = await doctor({ sglang: site });
    // The venv's SGLang is the pristine release (the tests patch a copy of it): nothing applied.
    const q = good.checks.find((c) => c.name === "patches");
    expect(q?.state).toBe("warn");
    expect(q?.summary).toMatch(
      /^SGLang 0\.5\.23 at .*: series sglang-0\.5\.23 0\/[1-9]\d* applied, not clean$/,
    );
    expect(q?.details?.clean).toBe(false);
  });

  it("a python that is not there is a warning, not a crash", async () => {
    const r = await doctor({ python: "/nonexistent/python" });
    const py = r.checks.find((c) => c.name === "python");
    expect(py?.state).toBe("warn");
  });
});
