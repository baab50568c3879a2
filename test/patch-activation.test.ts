// `kvctl patch status` says whether the patches do anything: a patched SGLang with no kvctl
// setting is "applied, inactive" (it serves like unpatched SGLang: python/tests/test_off_is_pristine.py
// proves that), --kv-control-nats-url / --kv-control-config make it "active".
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { applySeries, loadSeries, seriesStatus } from "../src/patch/index.js";
import { repoRoot } from "./helpers/python.js";
import {
  copySglang,
  hasInstalledSglang,
  installedSglang,
  removeTempDirs,
  tempDir,
} from "./fixtures/patch-series/trees.js";

afterAll(removeTempDirs);

const repoSeries = join(repoRoot, "patches", "sglang-0.5.23");

describe.skipIf(!hasInstalledSglang)("patch status: kvctl active or not", () => {
  it("not applied, then applied and inactive, active only with a kvctl setting", () => {
    const series = loadSeries(repoSeries, repoRoot);
    const touched = new Set<string>(["__init__.py", "_version.py"]);
    for (const p of series.patches)
      for (const f of p.parsed.files)
        if (f.kind !== "create") touched.add(f.path.replace(/^sglang\//, ""));
    for (const f of touched) expect(existsSync(join(installedSglang, f))).toBe(true);
    const tree = copySglang(tempDir(), [...touched]);
    const env = { PATH: process.env.PATH };
    expect(seriesStatus(tree, { python: false, env }).kvctl).toBe("not applied");
    expect(applySeries(tree).ok).toBe(true);
    const idle = seriesStatus(tree, { python: false, env });
    expect(idle.kvctl).toBe("applied, inactive");
    expect(idle.messages.at(-1)).toMatch(/^kvctl: applied, inactive \(/);
    expect(
      seriesStatus(tree, {
        python: false,
        env,
        serverArgs: { kv_control_nats_url: null, kv_control_config: null },
      }).kvctl,
    ).toBe("applied, inactive");
    expect(
      seriesStatus(tree, {
        python: false,
        env,
        serverArgs: { kv_control_nats_url: "nats://127.0.0.1:4222" },
      }).kvctl,
    ).toBe("active");
    expect(
      seriesStatus(tree, { python: false, env, serverArgs: { kv_control_config: "{}" } }).kvctl,
    ).toBe("active");
    expect(
      seriesStatus(tree, { python: false, env: { ...env, KVCTL_NATS_URL: "nats://x:4222" } }).kvctl,
    ).toBe("active");
  });
});
