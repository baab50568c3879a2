// Errors the HTTP layer raises before any route (node's parser, fastify's router) answer in the
// client's API dialect, as the gateway's own refusals do: a header past node's size limit, a
// malformed request line, and ids in paths longer than fastify's default parameter length. The
// worker is an address nobody listens on: none of these requests may reach one.
import { createServer, type AddressInfo } from "node:net";
import { connect as netConnect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../src/app/gateway.js";
import { hashKey } from "../src/gateway/auth/keys.js";

const KEY_A = "tenant-a-key-0123456789";
const KEY_B = "tenant-b-key-9876543210";
let g: Gateway;

/** A port nothing listens on (taken, then let go). */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

beforeAll(async () => {
  g = await createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: [{ id: "w0", url: `http://127.0.0.1:${await deadPort()}` }],
      auth: {
        tenants: [
          { id: "a", keys: [hashKey(KEY_A)] },
          { id: "b", keys: [hashKey(KEY_B)] },
        ],
      },
    },
    log: () => undefined,
  });
});
afterAll(async () => {
  await g?.close();
});

/** The raw answer to raw request bytes: status and JSON body. */
function raw(bytes: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const s = netConnect(Number(new URL(g.url).port), "127.0.0.1", () => s.end(bytes));
    let got = "";
    s.on("data", (d) => (got += d.toString()));
    s.on("close", () => {
      const [head, body] = [
        got.slice(0, got.indexOf("\r\n\r\n")),
        got.slice(got.indexOf("\r\n\r\n") + 4),
      ];
      resolve({ status: Number(head.split(" ")[1]), body: body ? JSON.parse(body) : null });
    });
    s.on("error", reject);
  });
}

describe("errors before any route, in the caller's dialect", () => {
  const bigKey = "k".repeat(60_000);
  it.each([
    [
      "a 60,000-character key (past node's header limit), OpenAI client",
      `GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${bigKey}\r\n\r\n`,
      431,
      { error: { type: "invalid_request_error", param: null, code: null } },
    ],
    [
      "a 60,000-character key, Anthropic client",
      `POST /v1/messages HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nx-api-key: ${bigKey}\r\n\r\n`,
      431,
      { type: "error", error: { type: "request_too_large" } },
    ],
    [
      "a malformed request line",
      "GET /v1/models HTTP/9.9 extra\r\nhost: x\r\n\r\n",
      400,
      { error: { type: "invalid_request_error", param: null, code: null } },
    ],
  ])("%s", async (_name, bytes, status, shape) => {
    const res = await raw(bytes);
    expect(res.status).toBe(status);
    expect(res.body).toMatchObject(shape);
    const message = (res.body as { error: { message?: unknown } }).error.message;
    expect(typeof message === "string" && message.length > 0).toBe(true);
  });

  it("a 600-byte response id is answered as any unknown id", async () => {
    const get = async (id: string) => {
      const res = await fetch(`${g.url}/v1/responses/${id}`, {
        headers: { authorization: `Bearer ${KEY_B}` },
      });
      return { status: res.status, body: await res.text() };
    };
    const long = `resp_${"x".repeat(595)}`;
    const short = "resp_unknown";
    const [a, b] = [await get(long), await get(short)];
    expect(a.status).toBe(404);
    expect(a).toEqual({ status: b.status, body: b.body.replace(short, long) });
  });

  it("a 600-byte session id on the hints route is refused naming it", async () => {
    const res = await fetch(`${g.url}/kvctl/v1/sessions/${"s".repeat(600)}/events`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY_A}`, "content-type": "application/json" },
      body: JSON.stringify({ event: "idle" }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: { type: "invalid_request_error", param: "id" },
    });
  });
});
