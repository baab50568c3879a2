// A KV-event publisher for the oversized-message test (run as a child: `node --import tsx
// test/helpers/oversize-publisher.ts`), a real ZMQ PUB in SGLang's framing [topic, seq, payload].
// It prints `READY <endpoint>` and sends an empty batch every 50 ms; on `big <MiB>` on stdin it
// sends one message whose payload is that large (untouched memory, so this process stays small
// while ZMQ reads it out) and prints `SENT <seq>`; the probes go on until stdin closes.
import { createInterface } from "node:readline";
import { Publisher } from "zeromq";
import { encodeSeq } from "../../src/events/decode.js";
import { encodeBatch } from "../../src/events/encode.js";

const pub = new Publisher({ linger: 0 });
await pub.bind("tcp://127.0.0.1:0");
const topic = Buffer.alloc(0);
let seq = 0n;
const probe = encodeBatch({ ts: 1.5, dpRank: 0, events: [] });
const probing = setInterval(() => void pub.send([topic, encodeSeq(seq++), probe]), 50);
console.log(`READY ${pub.lastEndpoint}`);

for await (const line of createInterface({ input: process.stdin })) {
  const m = /^big (\d+)$/.exec(line.trim());
  if (!m) continue;
  const at = seq++;
  await pub.send([topic, encodeSeq(at), Buffer.allocUnsafeSlow(Number(m[1]) * 1024 * 1024)]);
  console.log(`SENT ${at}`);
}
clearInterval(probing);
pub.close();
