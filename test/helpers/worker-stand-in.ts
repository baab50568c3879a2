// Stand-in for an SGLang worker, for gateway tests that need a worker to hang a request on cue,
// restart in a blink or be read back exactly, which the real server on CPU cannot be made to do
// quickly: its HTTP surface (health, /server_info, tokenize, chat) and its control subscriber on
// real NATS (Cache pin/unpin counted per block like the worker's pin_count, Pause/RenewLease/
// RevokeLease, ToolStart/ToolEnd, and Inspect with the process incarnation). The real worker's
// control semantics are tested in python/tests and against the real server.
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { readJsonBody, sendJson, STAND_IN_SERVER_INFO, standInTokenize } from "./stand-in-http.js";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { type Ack, blankAck, encodeAck } from "../../src/protocol/index.js";
import { parseJson } from "../../src/protocol/json.js";

export interface WorkerStandIn {
  id: string;
  url: string;
  /** pin_count by block, as the worker keeps it. */
  pins: Map<bigint, number>;
  leases: Map<string, bigint[]>;
  offloads: Map<string, number>;
  incarnation: string;
  /** Chat requests wait while this is set (resolve it to let them answer). */
  hold: Promise<void> | null;
  /** Chat requests that arrived. */
  arrived: number;
  /** A new process: pins, leases and offloads gone, a new incarnation. */
  restart(): void;
  close(): Promise<void>;
}

type Cmd = {
  type: string;
  block_hashes?: (number | bigint)[];
  pin?: boolean;
  lease_id?: string;
  session_id?: string;
  epoch?: number;
};

function apply(w: WorkerStandIn, id: string, c: Cmd, epochs: { n: number }): Ack {
  const ack = blankAck(w.id, id, c.type as Ack["type"] & string, "applied") as Ack & {
    detail?: unknown;
  };
  const hs = (c.block_hashes ?? []).map((h) => BigInt(h));
  ack.requested = hs.length;
  if (c.type === "Cache") {
    let done = 0;
    for (const h of hs) {
      const n = w.pins.get(h) ?? 0;
      if (c.pin) w.pins.set(h, n + 1);
      else if (n > 0) n === 1 ? w.pins.delete(h) : w.pins.set(h, n - 1);
      else continue;
      done++;
    }
    ack.affected = done;
    ack.status = done === hs.length ? "applied" : done === 0 ? "noop" : "partial";
  } else if (c.type === "Pause") w.leases.set(c.lease_id as string, hs);
  else if (c.type === "RenewLease")
    ack.status = w.leases.has(c.lease_id as string) ? "applied" : "rejected";
  else if (c.type === "RevokeLease")
    ack.status = w.leases.delete(c.lease_id as string) ? "applied" : "rejected";
  else if (c.type === "ToolStart") {
    ack.epoch = ++epochs.n;
    w.offloads.set(c.session_id as string, ack.epoch);
  } else if (c.type === "ToolEnd")
    ack.status =
      w.offloads.get(c.session_id as string) === c.epoch &&
      w.offloads.delete(c.session_id as string)
        ? "applied"
        : "rejected";
  else if (c.type === "Inspect") {
    ack.detail = {
      incarnation: w.incarnation,
      blocks: hs
        .filter((h) => w.pins.has(h))
        .map((h) => ({ block_hash: h, pin_count: w.pins.get(h) })),
    };
  }
  return ack;
}

async function serveControl(w: WorkerStandIn, nc: NatsConnection): Promise<void> {
  const epochs = { n: 0 };
  const sub = nc.subscribe(`kv-control-${w.id}`);
  for await (const m of sub) {
    const env = parseJson(m.string()) as { id: string; command: Cmd };
    m.respond(encodeAck(apply(w, env.id, env.command, epochs)));
  }
}

function handler(w: WorkerStandIn) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readJsonBody(req);
    const json = (status: number, v: unknown) => sendJson(res, status, v);
    if (req.url === "/health") return json(200, {});
    if (req.url === "/server_info") return json(200, STAND_IN_SERVER_INFO);
    if (req.url === "/v1/tokenize") return json(200, standInTokenize(body));
    if (req.method === "GET") return json(404, {});
    w.arrived++;
    while (w.hold) await w.hold;
    json(200, {
      id: "c1",
      choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 5, completion_tokens: 1 },
    });
  };
}

export async function startWorkerStandIn(id: string, natsUrl: string): Promise<WorkerStandIn> {
  let gen = 0;
  const w: WorkerStandIn = {
    id,
    url: "",
    pins: new Map(),
    leases: new Map(),
    offloads: new Map(),
    incarnation: `${id}-p${gen}`,
    hold: null,
    arrived: 0,
    restart() {
      this.pins.clear();
      this.leases.clear();
      this.offloads.clear();
      this.incarnation = `${id}-p${++gen}`;
    },
    close: async () => undefined,
  };
  const server: Server = createServer(handler(w));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  w.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const nc = await connect({ servers: natsUrl });
  void serveControl(w, nc);
  await nc.flush();
  w.close = async () => {
    server.closeAllConnections();
    server.close();
    await nc.close();
  };
  return w;
}
