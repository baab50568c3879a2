// The gateway's driving of SGLang's session radix cache (radix-sessions.ts): the body it sends a
// session-radix worker names the session, and a session is closed on the workers where kvctl lets
// it go (its end, a move to another worker, program admission's let-go). The workers here are
// node:http stand-ins that record the /close_session calls they get (what SGLang does with them is
// tested on a real server in session-radix.test.ts).
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Registry } from "prom-client";
import { Pool } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import type { TurnStarted } from "../src/contract/observations.js";
import {
  RadixSessions,
  type RadixWorker,
  runsSessionRadix,
  withSessionId,
} from "../src/gateway/workers/radix-sessions.js";
import { until } from "./helpers/poll.js";
import { readJsonBody, sendJson } from "./helpers/stand-in-http.js";

interface Stand {
  worker: RadixWorker;
  closes: unknown[];
  server: Server;
}

const stands: Stand[] = [];

/** A worker that records each /close_session body and answers `status`. */
async function stand(id: string, sessionRadix: boolean, status = 200): Promise<Stand> {
  const closes: unknown[] = [];
  const server = createServer(async (req, res) => {
    const body = await readJsonBody(req);
    if (req.url === "/close_session") closes.push(body);
    sendJson(res, req.url === "/close_session" ? status : 404, {});
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const s = {
    worker: {
      id,
      pool: new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
      sessionRadix,
    },
    closes,
    server,
  };
  stands.push(s);
  return s;
}

afterEach(async () => {
  for (const s of stands.splice(0)) {
    await (s.worker.pool as Pool).close();
    s.server.close();
  }
});

function radix(workers: RadixWorker[], logs: string[] = []) {
  const registry = new Registry();
  const quiet = () => undefined;
  const log = { debug: quiet, info: quiet, warn: (l: string) => void logs.push(l), error: quiet };
  const r = new RadixSessions({ workers: () => workers, registry, log, timeoutMs: 5000 });
  const count = async (labels: Record<string, string>) => {
    const v =
      (await registry.getSingleMetric("kvctl_gateway_radix_session_releases_total")?.get())
        ?.values ?? [];
    return v
      .filter((x) => Object.entries(labels).every(([k, val]) => x.labels[k] === val))
      .reduce((a, x) => a + x.value, 0);
  };
  return { r, count };
}

function started(sessionId: string, worker: string, storedWorker: string | null): TurnStarted {
  const stored = storedWorker ? { worker: storedWorker, pins: [], leases: [], tool: null } : null;
  return {
    type: "TurnStarted",
    at: 0,
    requestId: "r1",
    sessionId,
    route: "chat",
    stream: false,
    worker,
    reason: "session",
    promptBlocks: null,
    overlap: null,
    stored,
  };
}

describe("the body a session-radix worker gets", () => {
  it("names the session after the client's fields, and is still the same JSON otherwise", () => {
    const raw = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi }"}]}\n');
    const out = JSON.parse(withSessionId(raw, 'a"b').toString());
    expect(out).toEqual({
      model: "m",
      messages: [{ role: "user", content: "hi }" }],
      session_id: 'a"b',
    });
    expect(JSON.parse(withSessionId(Buffer.from(" { } "), "s").toString())).toEqual({
      session_id: "s",
    });
  });

  it("is sent only to workers whose /server_info says the session radix cache is on", () => {
    expect(runsSessionRadix({ enable_session_radix_cache: true })).toBe(true);
    expect(runsSessionRadix({ enable_session_radix_cache: false })).toBe(false);
    expect(runsSessionRadix({})).toBe(false);
  });
});

describe("RadixSessions", () => {
  it("closes an ended session on every session-radix worker, and a moved one on the worker it left", async () => {
    const a = await stand("a", true);
    const b = await stand("b", true);
    const plain = await stand("c", false);
    const { r, count } = radix([a.worker, b.worker, plain.worker]);
    r.observe({
      type: "SessionHint",
      at: 0,
      sessionId: "s1",
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    await until("both closes", () => a.closes.length === 1 && b.closes.length === 1);
    expect(a.closes).toEqual([{ session_id: "s1" }]);
    r.observe(started("s2", "b", "a"));
    r.observe(started("s3", "b", "b")); // stayed: nothing to close
    r.observe(started("s4", "a", null)); // new: nothing to close
    await until("the move's close", () => a.closes.length === 2);
    expect(a.closes[1]).toEqual({ session_id: "s2" });
    expect(b.closes).toHaveLength(1);
    expect(plain.closes).toEqual([]);
    expect(await count({ reason: "ended", outcome: "ok" })).toBe(2);
    expect(await count({ reason: "moved", outcome: "ok" })).toBe(1);
  });

  it("a worker that refuses the close is counted and logged once, and nothing throws", async () => {
    const a = await stand("a", true, 500);
    const logs: string[] = [];
    const { r, count } = radix([a.worker], logs);
    r.release(a.worker, "s1", "let_go");
    r.release(a.worker, "s2", "pressure");
    await until(
      "two failed closes counted",
      async () => (await count({ outcome: "failed" })) === 2,
    );
    expect(logs.filter((l) => l.includes("session radix"))).toHaveLength(1);
    expect(await count({ outcome: "ok" })).toBe(0);
  });
});
