// A KV-event publisher that sends as fast as its ZMQ PUB socket takes messages, for the flood test
// (run as a child: `node --import tsx test/helpers/flood-publisher.ts`). It speaks SGLang's framing
// [topic, seq (8-byte BE), payload] with seq 0, 1, 2, ..., payloads from kvctl's SGLang-exact
// encoder. Protocol on stdio: it prints `READY <endpoint>`, then sends a probe batch every 50 ms
// until stdin says `flood <seconds> <nils>`; it then sends one batch of <nils> nil events (the
// issue's allocation bomb was 1 048 576 of them in 1 MiB) and floods for that long (each batch: a BlockStored and a BlockRemoved of the same block, plus one
// nil event, so the index stays small while every batch carries a bad event), and prints
// `DONE {"sent":N,...}` with the number of messages it sent so far, probes included; then it
// probes again until stdin closes.
import { createInterface } from "node:readline";
import { Publisher } from "zeromq";
import { encodeSeq } from "../../src/events/decode.js";
import { encodeBatch } from "../../src/events/encode.js";
import { blockStored } from "./kv-events.js";

/** A batch payload with one nil event put in front of its events (the array header bumped). */
function withNilEvent(payload: Buffer): Buffer {
  // [fixarray 3][float64 ts: 9 bytes][fixarray n events]...
  const at = 1 + 9;
  if (
    payload[0] !== 0x93 ||
    payload[1] !== 0xcb ||
    (payload[at] & 0xf0) !== 0x90 ||
    (payload[at] & 0x0f) === 15
  ) {
    throw new Error("unexpected batch layout");
  }
  return Buffer.concat([
    payload.subarray(0, at),
    Buffer.from([payload[at] + 1, 0xc0]),
    payload.subarray(at + 1),
  ]);
}

/** [ts, [nil x count], 0]: the allocation-bomb batch (1 MiB of nil events). */
function nilBomb(count: number): Buffer {
  const head = Buffer.alloc(1 + 9 + 5);
  head[0] = 0x93;
  head[1] = 0xcb;
  head.writeDoubleBE(1.5, 2);
  head[10] = 0xdd;
  head.writeUInt32BE(count, 11);
  return Buffer.concat([head, Buffer.alloc(count, 0xc0), Buffer.from([0x00])]);
}

const pub = new Publisher({ linger: 0 });
await pub.bind("tcp://127.0.0.1:0");
const topic = Buffer.alloc(0);
let seq = 0n;
const send = (payload: Buffer) => pub.send([topic, encodeSeq(seq++), payload]);

const hash = 0x1234_5678_9abcn;
const flood = withNilEvent(
  encodeBatch({
    ts: 1.5,
    dpRank: 0,
    events: [
      blockStored({
        blockHashes: [hash],
        tokenIds: Array.from({ length: 16 }, (_, i) => i + 1),
        blockSize: 16,
      }),
      { type: "BlockRemoved", blockHashes: [hash], medium: "GPU", tier: "GPU" },
    ],
  }),
);
const probe = encodeBatch({ ts: 1.5, dpRank: 0, events: [] });

let probing: NodeJS.Timeout | null = setInterval(() => void send(probe), 50);
console.log(`READY ${pub.lastEndpoint}`);

for await (const line of createInterface({ input: process.stdin })) {
  const m = /^flood (\d+(?:\.\d+)?) (\d+)$/.exec(line.trim());
  if (!m) continue;
  if (probing) clearInterval(probing);
  probing = null;
  const firstFloodSeq = seq;
  await send(nilBomb(Number(m[2])));
  const end = Date.now() + Number(m[1]) * 1000;
  let n = 0;
  for (;;) {
    await send(flood);
    // Date.now() every message would cost more than the send itself.
    if (++n % 256 === 0 && Date.now() >= end) break;
  }
  console.log(
    `DONE ${JSON.stringify({ sent: Number(seq), firstFloodSeq: Number(firstFloodSeq), floodSent: Number(seq - firstFloodSeq), bytesPerBatch: flood.length })}`,
  );
  // Probing again lets the consumer see the end of the flood even if its last batches were dropped.
  probing = setInterval(() => void send(probe), 50);
}
if (probing) clearInterval(probing);
pub.close();
