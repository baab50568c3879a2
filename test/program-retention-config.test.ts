// The agent policy's admission default and when retention is on (config.ts, program-retention-setup.ts).
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../src/gateway/config.js";
import { retentionFor } from "../src/gateway/program-retention-setup.js";

const WORKERS = [{ id: "w0", url: "http://127.0.0.1:1" }];
const LIMITS = { maxRequestsPerWorker: 4, capacityTokensPerWorker: 100_000 };

describe("agent policy defaults", () => {
  it("turns on program admission, with retention, when the admission limits are given and no mode is named", () => {
    const c = parseGatewayConfig({ workers: WORKERS, policy: "agent", admission: LIMITS });
    expect(c.admission.mode).toBe("program");
    expect(retentionFor(c, new Registry(), null)).not.toBeNull();
  });

  it("keeps a named mode, and per-request admission without a capacity to hold programs to", () => {
    expect(parseGatewayConfig({ workers: WORKERS, policy: "agent", admission: { ...LIMITS, mode: "request" } }).admission.mode).toBe("request");
    expect(parseGatewayConfig({ workers: WORKERS, policy: "agent", admission: { maxRequestsPerWorker: 4 } }).admission.mode).toBe("request");
    expect(parseGatewayConfig({ workers: WORKERS, policy: "noop", admission: LIMITS }).admission.mode).toBe("request");
  });

  it("retention is off outside the agent policy unless asked for, and can be switched off under it", () => {
    const noop = parseGatewayConfig({ workers: WORKERS, admission: { ...LIMITS, mode: "program" } });
    expect(retentionFor(noop, new Registry(), null)).toBeNull();
    const asked = parseGatewayConfig({ workers: WORKERS, admission: { ...LIMITS, mode: "program", retention: true } });
    expect(retentionFor(asked, new Registry(), null)).not.toBeNull();
    const off = parseGatewayConfig({ workers: WORKERS, policy: "agent", admission: { ...LIMITS, retention: false } });
    expect(off.admission.mode).toBe("program");
    expect(retentionFor(off, new Registry(), null)).toBeNull();
  });

  it("names a bad retention setting", () => {
    expect(() => parseGatewayConfig({ workers: WORKERS, admission: { ...LIMITS, mode: "program", restoreTokensPerSecond: 0 } })).toThrow(/admission\.restoreTokensPerSecond/);
    expect(() => parseGatewayConfig({ workers: WORKERS, admission: { ...LIMITS, mode: "program", retention: "yes" } })).toThrow(/admission\.retention/);
  });
});
