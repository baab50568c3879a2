// The test bed's nats-server takes a port that was free a moment ago, from the ephemeral range,
// where any outgoing connection can take it before nats-server binds it: the first launch then
// moves to another port.
import { createServer, type Server } from "node:net";
import { afterEach, expect, test, vi } from "vitest";

const picks: number[] = [];
vi.mock("../src/util/net.js", async (importOriginal) => {
  const real = await importOriginal<typeof import("../src/util/net.js")>();
  return { ...real, freePort: async () => picks.shift() ?? real.freePort() };
});
const { startNatsServer } = await import("../src/testing/nats-server.js");

let holder: Server | null = null;
afterEach(() => {
  holder?.close();
  holder = null;
});

test("a launch whose port was taken meanwhile moves to another port; a restart keeps its own", async () => {
  const h = createServer();
  holder = h;
  const held = await new Promise<number>((resolve) =>
    h.listen(0, "127.0.0.1", () => resolve((h.address() as { port: number }).port)),
  );
  picks.push(held);
  const nats = await startNatsServer();
  try {
    expect(picks).toEqual([]); // the held port was offered first
    expect(nats.port).not.toBe(held);
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);
    await nats.restart();
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);
  } finally {
    await nats.stop();
  }
});
