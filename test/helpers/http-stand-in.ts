// Stand-in for an SGLang worker's HTTP surface (node:http), for the gateway's pure-HTTP behaviour
// tests (drain, admission, membership, listener bounds, telemetry): they need answers held on cue,
// streams of an exact length and workers that are down and come up, which the real server on CPU
// cannot be made to do; the real server's answers are tested in gateway-real-server.test.ts. It
// answers /health, /server_info and chat: streamed as `events` SSE chunks `gapMs` apart, or whole
// (held while `hold` is set). It keeps the headers of every chat request it got.
import { once } from "node:events";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { readJsonBody, sendJson, STAND_IN_SERVER_INFO } from "./stand-in-http.js";

export interface HttpStandIn {
  url: string;
  port: number;
  server: Server;
  /** Headers of each chat request, in arrival order. */
  chats: IncomingHttpHeaders[];
  /** Streamed answers: this many chunks, this far apart. */
  events: number;
  gapMs: number;
  /** Non-streamed answers wait for this while it is set. */
  hold: Promise<void> | null;
  close(): Promise<void>;
}

export async function startHttpStandIn(port = 0): Promise<HttpStandIn> {
  const s = {
    chats: [] as IncomingHttpHeaders[],
    events: 30,
    gapMs: 20,
    hold: null as Promise<void> | null,
  } as HttpStandIn;
  s.server = createServer(async (req, res) => {
    const body = await readJsonBody(req);
    const json = (status: number, v: unknown) => sendJson(res, status, v);
    if (req.url === "/health") return json(200, {});
    if (req.url === "/server_info") return json(200, STAND_IN_SERVER_INFO);
    if (req.url !== "/v1/chat/completions") return json(404, {});
    s.chats.push(req.headers);
    if (body.stream) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < s.events; i++) {
        res.write(
          `data: {"choices":[{"index":0,"delta":{"content":"t${i}"},"finish_reason":null}]}\n\n`,
        );
        await new Promise((r) => setTimeout(r, s.gapMs));
      }
      res.end(
        `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n`,
      );
      return;
    }
    if (s.hold) await s.hold;
    json(200, {
      id: "c1",
      choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 5, completion_tokens: 1 },
    });
  });
  s.server.listen(port, "127.0.0.1");
  await once(s.server, "listening");
  s.port = (s.server.address() as AddressInfo).port;
  s.url = `http://127.0.0.1:${s.port}`;
  s.close = async () => {
    s.server.closeAllConnections();
    s.server.close();
    await once(s.server, "close").catch(() => undefined);
  };
  return s;
}
