// `kvctl watch` under a flood: a real ZMQ PUB (test/helpers/flood-publisher.ts, a child process)
// sends for 5 s as fast as its socket takes messages, every batch carrying a bad (nil) event, after
// one batch of thousands of nil events. The real CLI must keep printing its table on time, log
// problems at most once per worker per interval, bound its memory (the receive high-water mark
// lets ZMQ drop what it cannot take) and account for every batch as received or dropped.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { repoRoot } from "./helpers/python.js";

const FLOOD_S = 5;
const INTERVAL_S = 0.5;
const LOG_INTERVAL_S = 2;
const NIL_BOMB = 1 << 20;

const children: ChildProcessWithoutNullStreams[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
});

function tsx(args: string[]): ChildProcessWithoutNullStreams {
  const c = spawn(process.execPath, ["--import", "tsx", ...args], { cwd: repoRoot });
  children.push(c);
  return c;
}

const rssMb = (pid: number) =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN) / 1024;

interface Row {
  worker: string;
  events: number;
  seq: number | null;
  received: number;
  dropped: number;
  bad: number;
}

interface FloodDone {
  sent: number;
  firstFloodSeq: number;
  floodSent: number;
  bytesPerBatch: number;
}

async function startPublisher() {
  const pub = tsx(["test/helpers/flood-publisher.ts"]);
  let pubErr = "";
  pub.stderr.on("data", (d) => (pubErr += d));
  const pubLines = createInterface({ input: pub.stdout });
  const endpoint = await new Promise<string>((resolve, reject) => {
    pubLines.once("line", (l) =>
      l.startsWith("READY ") ? resolve(l.slice(6)) : reject(new Error(l)),
    );
    pub.once("exit", () => reject(new Error(`publisher exited: ${pubErr}`)));
  });
  const done = new Promise<FloodDone>((resolve) =>
    pubLines.on("line", (l) => l.startsWith("DONE ") && resolve(JSON.parse(l.slice(5)))),
  );
  return { pub, endpoint, done };
}

describe("kvctl watch and verify-hashes under a flood from a real ZMQ publisher", () => {
  it("watch keeps its table on time, its stderr quiet and its memory bounded, and counts what was dropped", async () => {
    const { pub, endpoint, done } = await startPublisher();

    const watch = tsx([
      "src/cli/bin.ts",
      "watch",
      "--zmq",
      `w0=${endpoint}`,
      "--interval",
      String(INTERVAL_S),
      "--json",
      "--log-interval",
      String(LOG_INTERVAL_S),
    ]);
    const stderr: string[] = [];
    createInterface({ input: watch.stderr }).on("line", (l) => stderr.push(l));
    const tables: { t: number; row: Row }[] = [];
    const waiters: (() => void)[] = [];
    createInterface({ input: watch.stdout }).on("line", (l) => {
      const j = JSON.parse(l);
      tables.push({ t: j.t, row: j.workers[0] });
      for (const w of waiters.splice(0)) w();
    });
    const nextTable = () => new Promise<void>((r) => waiters.push(r));
    const until = async (cond: (r: Row) => boolean, what: string, ms: number) => {
      const end = Date.now() + ms;
      while (!(tables.length && cond(tables[tables.length - 1].row))) {
        if (Date.now() > end || watch.exitCode !== null)
          throw new Error(`timed out waiting for ${what}: ${stderr.join("\n")}`);
        await nextTable();
      }
    };

    // Subscribed once a probe batch shows up in the table.
    await until((r) => r.seq !== null, "the first probe batch", 60_000);
    const rssBefore = rssMb(watch.pid as number);
    const firstFloodTable = tables.length;
    const stderrBefore = stderr.length;
    let rssMax = rssBefore;
    const sampler = setInterval(() => {
      if (watch.exitCode === null) rssMax = Math.max(rssMax, rssMb(watch.pid as number));
    }, 50);
    pub.stdin.write(`flood ${FLOOD_S} ${NIL_BOMB}\n`);
    const figures = await done;
    const tablesWhileFlooding = tables.length - firstFloodTable;
    // Drained: the table has reached the probes that follow the flood.
    await until(
      (r) => (r.seq ?? 0) >= figures.sent,
      "the consumer to reach the end of the flood",
      60_000,
    );
    clearInterval(sampler);
    watch.kill("SIGINT");
    await new Promise((r) => watch.once("exit", r));
    pub.stdin.end();

    const during = tables.slice(firstFloodTable - 1);
    const gaps = during.slice(1).map((x, i) => x.t - during[i].t);
    const last = tables[tables.length - 1].row;
    const flood = {
      sent: figures.floodSent,
      received: last.received,
      dropped: last.dropped,
      badEvents: last.bad,
      rssBeforeMb: Math.round(rssBefore),
      rssMaxMb: Math.round(rssMax),
      maxTableGapS: Math.max(...gaps),
      tablesWhileFlooding,
      tablesSinceFlood: tables.length - firstFloodTable,
      stderrLines: stderr.length - stderrBefore,
    };
    console.log(`flood figures: ${JSON.stringify(flood)}`);

    // Not vacuous: the publisher outran the consumer, so ZMQ had to drop batches.
    expect(flood.dropped).toBeGreaterThan(0);
    expect(flood.sent).toBeGreaterThan(flood.received);
    // Every flood batch is accounted for as received or dropped (probes before it may add a few).
    expect(flood.received + flood.dropped).toBeGreaterThanOrEqual(figures.floodSent);
    expect(flood.received + flood.dropped).toBeLessThanOrEqual(figures.sent + 1000);
    // The bomb (a million nil events in one 1 MiB batch) is over the per-batch event maximum: it is
    // refused whole, before any per-event work, and reported in one line; the flood's own nils are
    // counted per event.
    expect(stderr.join("\n")).toMatch(new RegExp(`batch: ${NIL_BOMB} events, over the maximum`));
    expect(flood.badEvents).toBeGreaterThan(0);
    expect(rssMax - rssBefore).toBeLessThan(64);
    // The table kept coming while the flood was on (it stalled behind per-event log lines before).
    // Counted against the watch's own output, not this test's clock: a busy machine slows both.
    expect(flood.tablesWhileFlooding).toBeGreaterThanOrEqual(2);
    // One log line per worker per log interval, plus the first one and the final flush: at most
    // one for every LOG_INTERVAL_S / INTERVAL_S tables the watch printed meanwhile.
    const logIntervals = Math.ceil((flood.tablesSinceFlood * INTERVAL_S) / LOG_INTERVAL_S);
    expect(flood.stderrLines, stderr.slice(stderrBefore).join("\n")).toBeLessThanOrEqual(
      logIntervals + 2,
    );
    expect(stderr.join("\n")).toMatch(/worker w0: \d+ × bad event: event is nil.* in the last/);
  }, 120_000);

  it("verify-hashes --zmq keeps its progress line on time and its per-event output capped", async () => {
    const { pub, endpoint, done } = await startPublisher();
    const v = tsx([
      "src/cli/bin.ts",
      "verify-hashes",
      "--zmq",
      endpoint,
      "--interval",
      String(INTERVAL_S),
    ]);
    const stderr: string[] = [];
    createInterface({ input: v.stderr }).on("line", (l) => stderr.push(l));
    const progress: { t: number; line: string }[] = [];
    let stdoutLines = 0;
    const waiters: (() => void)[] = [];
    createInterface({ input: v.stdout }).on("line", (l) => {
      stdoutLines++;
      const m = /^verify-hashes: (\d+\.\d) s: /.exec(l);
      if (m) progress.push({ t: Number(m[1]), line: l });
      for (const w of waiters.splice(0)) w();
    });
    const until = async (cond: () => boolean, what: string, ms: number) => {
      const end = Date.now() + ms;
      while (!cond()) {
        if (Date.now() > end || v.exitCode !== null)
          throw new Error(`timed out waiting for ${what}: ${stderr.join("\n")}`);
        await new Promise<void>((r) => waiters.push(r));
      }
    };
    // The probes come in as batches without events: the progress line shows them once subscribed.
    await until(
      () => progress.some((p) => !/^verify-hashes: [\d.]+ s: 0 batch/.test(p.line)),
      "the first probe batch",
      60_000,
    );
    const first = progress.length;
    const stdoutBefore = stdoutLines;
    const stderrBefore = stderr.length;
    pub.stdin.write(`flood ${FLOOD_S} ${NIL_BOMB}\n`);
    await done;
    const seen = progress.length;
    const progressWhileFlooding = seen - first;
    await until(() => progress.length >= seen + 2, "two progress lines after the flood", 60_000);
    v.kill("SIGINT");
    const code = await new Promise((r) => v.once("exit", r));
    pub.stdin.end();

    const during = progress.slice(first - 1);
    const gaps = during.slice(1).map((x, i) => x.t - during[i].t);
    const last = during[during.length - 1].line;
    console.log(
      `verify-hashes flood: ${last}; max progress gap ${Math.max(...gaps)} s; ${stdoutLines - stdoutBefore} stdout lines`,
    );
    expect(code).toBe(1); // the flood's hashes are not those of its tokens
    expect(Number(/ (\d+) dropped/.exec(last)?.[1])).toBeGreaterThan(0);
    expect(last).toMatch(/event line\(s\) not shown/);
    // The progress line kept coming while the flood was on, and per-event output stayed within its
    // cap: at most 200 event lines and one progress line per interval, intervals counted by the
    // progress lines it printed (its own clock, not this test's).
    expect(progressWhileFlooding).toBeGreaterThanOrEqual(2);
    const intervals = progress.length - first + 2;
    expect(stdoutLines - stdoutBefore).toBeLessThanOrEqual(intervals * 201 + 10);
    expect(stderr.length - stderrBefore).toBeLessThanOrEqual(intervals + 2);
  }, 120_000);
});
