// One replica's writes of one session go to the shared bucket one at a time, in call order: they
// never conflict with each other (a compare-and-set may lose only to another replica's write), so
// none is retried, reordered or left in this replica's copy alone. Real nats-server, JetStream KV.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import { lineLog } from "../src/gateway/core/logger.js";
import { GatewayMetrics } from "../src/gateway/telemetry/metrics.js";
import { SessionStore } from "../src/gateway/sessions/session-store.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";

let nats: NatsServer;
let dir: string;
let nc: NatsConnection;
let kv: KV;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "kvctl-store-"));
  nats = await startNatsServer(["-js", "-sd", dir]);
  nc = await connect({ servers: nats.url });
  kv = await new Kvm(jetstream(nc)).create("store_writes", { history: 1 });
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

it("concurrent updates of one session from one replica land in call order, none lost or retried", async () => {
  const metrics = new GatewayMetrics();
  const lines: string[] = [];
  const store = new SessionStore({
    kv: () => kv,
    configured: true,
    opTimeoutMs: 5000,
    metrics,
    log: lineLog((l) => lines.push(l)),
  });
  const N = 40;
  await Promise.all(
    Array.from({ length: N }, (_, i) =>
      store.update("s", (r) => {
        r.chain.push(String(i));
      }),
    ),
  );
  const stored = (await kv.get("s.cw"))?.json<{ chain: string[] }>();
  expect(stored?.chain).toEqual(Array.from({ length: N }, (_, i) => String(i)));
  expect(lines).toEqual([]);
  expect(await metrics.registry.metrics()).not.toMatch(
    /kvctl_gateway_session_store_errors_total\{[^}]*\} [1-9]/,
  );
});
