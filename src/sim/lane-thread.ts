// A lane's worker thread (lanes.ts ThreadLane): its fleet process, and each configuration it is
// handed run on it here, the engine and the front in this thread. Calls come one at a time.
import { parentPort, workerData } from "node:worker_threads";
import { type ConfigTask, runConfigTask } from "./config-run.js";
import { FleetClient } from "./fleet-client.js";
import type { LaneReply } from "./lanes.js";

interface Call {
  id: number;
  op: "profile" | "prefillTimes" | "run" | "close";
  args: Record<string, unknown>;
  progress: boolean;
  log: boolean;
}

const port = parentPort as NonNullable<typeof parentPort>;
const data = workerData as { tree: string; log: boolean };
const post = (m: LaneReply) => port.postMessage(m);
const lineTo = (id: number, stream: "progress" | "log") => (line: string) =>
  post({ kind: "line", id, stream, line });
const fleet = new FleetClient({ tree: data.tree, log: data.log ? lineTo(0, "log") : undefined });

async function answer(c: Call): Promise<unknown> {
  const a = c.args;
  if (c.op === "profile") return await fleet.profile(a.name as string);
  if (c.op === "prefillTimes")
    return await fleet.prefillTimes(
      a.profile as string,
      a.extend as number[],
      a.prefix as number[],
    );
  if (c.op === "run")
    return await runConfigTask(
      c.args as unknown as ConfigTask,
      fleet,
      c.progress ? lineTo(c.id, "progress") : undefined,
      c.log ? lineTo(c.id, "log") : undefined,
    );
  await fleet.close();
  return null;
}

port.on("message", (c: Call) => {
  answer(c).then(
    (value) => {
      post({ kind: "ok", id: c.id, value });
      if (c.op === "close") port.close();
    },
    (e: unknown) => {
      const err = e instanceof Error ? e : new Error(String(e));
      post({
        kind: "err",
        id: c.id,
        error: { name: err.name, message: err.message, stack: err.stack },
      });
    },
  );
});
