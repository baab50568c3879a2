// bench:agent's NVIDIA Dynamo peers (Dynamo 1.6.1 on CPU, docs/dynamo.md): two `dynamo.sglang`
// workers on the same patched SGLang as the other rows (`python -m kvctl_worker.dynamo` with no
// kvctl flag is `dynamo.sglang`), with the same SGLang flags, device pool, HiCache host ratio and
// `file` L3, behind Dynamo's frontend:
//   dynamo_kv       the frontend's KV router (`--router-mode kv`), its router queue on
//   dynamo_thunder  `dynamo.thunderagent_router` (program scheduler over the KV router, its
//                   documented defaults: pause at 0.95, resume hysteresis 0.10) behind a
//                   round-robin frontend; workers register with `--endpoint-types none`, as its
//                   README says, so every request goes through it
// The tool-call and reasoning parsers are Dynamo's own (`--dyn-*`): Dynamo builds the response,
// and SGLang's parsers and Dynamo's may not both construct tool calls.
//
// The admission budget: Dynamo 1.6.1 has no request-count bound. Its router queue
// (`--router-queue-threshold`) holds a request while every worker's active prefill tokens exceed
// the threshold times its max_num_batched_tokens (the model card's, from the worker's
// max_prefill_tokens). The bench sets it to `perWorker` prompts of the trace's median size, the
// kvctl rows' budget in the unit Dynamo counts.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { buildPatchedTree } from "../../src/demo/harness.js";
import { readDynamoDiscovery } from "../../src/events/dynamo/discovery.js";
import {
  type DynamoProcess,
  type DynamoWorker,
  env,
  launch,
  MODEL_NAME,
  startDynamoFrontend,
  startDynamoWorker,
  until,
} from "../../test/helpers/dynamo.js";
import { coldStartText } from "./cold-start.js";
import type { Target } from "./driver.js";
import type { ServerShape } from "./stack.js";

export type DynamoPeer = "kv" | "thunder";

export interface DynamoStackOptions {
  shape: ServerShape;
  /** The SGLang flags every row's workers get (stack.ts). */
  sglangArgs: string[];
  /** Requests in flight per worker (the kvctl rows' admission budget). */
  perWorker: number;
  /** The trace's median prompt (tokens), from an earlier row of the regime. */
  medianPromptTokens: number;
  scratch: string;
  log: (line: string) => void;
}

export interface DynamoReport {
  router_queue_threshold: number;
  /** Sessions ThunderAgent admitted as programs (its "program created" log lines); null: no ThunderAgent. */
  thunder_programs: number | null;
}

export interface DynamoStack {
  target: Target;
  /** The frontend's URL (OpenAI API). */
  url: string;
  /** `--router-queue-threshold` as given to the router. */
  queueThreshold: number;
  /** What the router did: ThunderAgent's programs created (null for dynamo_kv), read from its log. */
  report(): DynamoReport;
  stop(): Promise<void>;
}

/** The threshold for `perWorker` prompts of the median size, as a share of max_num_batched_tokens. */
export function queueThreshold(
  perWorker: number,
  medianPromptTokens: number,
  maxBatchedTokens: number,
): number {
  if (!(maxBatchedTokens > 0))
    throw new Error(`dynamo: max_num_batched_tokens unknown (${maxBatchedTokens})`);
  return +((perWorker * medianPromptTokens) / maxBatchedTokens).toFixed(4);
}

/** Dynamo's frontend takes SGLang's regex constraint as `guided_regex`, and refuses fields it does not know. */
export function dynamoDialect(body: Record<string, unknown>): Record<string, unknown> {
  const {
    regex,
    return_cached_tokens_details: _details,
    return_output_ids_in_sglext: _ids,
    ...rest
  } = body;
  return regex === undefined ? rest : { ...rest, guided_regex: regex };
}

const PARSERS = ["--dyn-tool-call-parser", "hermes", "--dyn-reasoning-parser", "qwen3"];

export async function startDynamoStack(
  peer: DynamoPeer,
  o: DynamoStackOptions,
): Promise<DynamoStack> {
  const discovery = join(o.scratch, "discovery");
  const tree = buildPatchedTree();
  const procs: DynamoProcess[] = [];
  const stop = async () => {
    for (const p of [...procs].reverse()) await p.stop();
    tree.remove();
  };
  try {
    const workers = await startWorkers(peer, o, tree.dir, discovery, procs);
    const cards = readDynamoDiscovery(discovery).maxBatchedTokens;
    const maxBatched = Math.min(...workers.map((w) => cards[w.dynamoId] ?? Number.NaN));
    const threshold = queueThreshold(o.perWorker, o.medianPromptTokens, maxBatched);
    o.log(
      `   dynamo_${peer}: --router-queue-threshold ${threshold} (${o.perWorker} x ${o.medianPromptTokens} median prompt tokens / max_num_batched_tokens ${maxBatched})`,
    );
    const queue = ["--router-queue-threshold", String(threshold)];
    const router = peer === "thunder" ? await startThunderRouter(o, discovery, queue, procs) : null;
    // Both keep Dynamo's own (Rust) chat preprocessor, its default: the agent model's template
    // renders alike there and in SGLang (it spells JSON itself), so both serve the same prompts.
    const fe = await startDynamoFrontend({
      name: "frontend",
      discovery,
      dir: join(o.scratch, "fe"),
      routerMode: peer === "kv" ? "kv" : "round-robin",
      extraArgs: peer === "kv" ? queue : [],
    });
    procs.push(fe);
    await untilServing(fe.baseUrl, peer === "thunder", o.shape.pageSize);
    const target: Target = {
      name: `dynamo_${peer}`,
      url: () => fe.baseUrl,
      // ThunderAgent groups a session's turns into one program by this header; the KV router routes on the prompt.
      sessionHeader: peer === "thunder",
      sessionHeaderName: "x-dynamo-session-id",
      dialect: dynamoDialect,
      ...(peer === "thunder" ? { closeSession: (id: string) => endSession(fe.baseUrl, id) } : {}),
    };
    const report = (): DynamoReport => ({
      router_queue_threshold: threshold,
      thunder_programs: router
        ? (router.log().match(/thunderagent\.program created/g) ?? []).length
        : null,
    });
    return { target, url: fe.baseUrl, queueThreshold: threshold, report, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The two dynamo.sglang workers (each on `procs` once up; the first failure is thrown). */
async function startWorkers(
  peer: DynamoPeer,
  o: DynamoStackOptions,
  tree: string,
  discovery: string,
  procs: DynamoProcess[],
): Promise<DynamoWorker[]> {
  const workerArgs = [...o.sglangArgs, ...(peer === "kv" ? PARSERS : ["--endpoint-types", "none"])];
  const started = await Promise.allSettled(
    ["w0", "w1"].map((id) => {
      const l3 = join(o.scratch, `l3-${id}`);
      mkdirSync(l3, { recursive: true });
      return startDynamoWorker({
        name: `dynamo-${id}`,
        entry: "kvctl",
        tree,
        model: o.shape.model,
        discovery,
        dir: join(o.scratch, id),
        pageSize: o.shape.pageSize,
        maxTotalTokens: o.shape.deviceTokens,
        hostRatio: o.shape.hostRatio,
        extraArgs: [
          ...(o.shape.storage ? ["--hicache-storage-backend", "file"] : []),
          ...workerArgs,
        ],
        env: o.shape.storage
          ? { SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR: o.shape.sharedStorageDir ?? l3 }
          : {},
        readyTimeoutMs: 600_000,
      });
    }),
  );
  const workers: DynamoWorker[] = [];
  for (const s of started) if (s.status === "fulfilled") workers.push(s.value);
  procs.push(...workers);
  const failed = started.find((s) => s.status === "rejected") as PromiseRejectedResult | undefined;
  if (failed) throw failed.reason;
  return workers;
}

/** ThunderAgent's router in front of the workers, once it says it serves (on `procs`). */
async function startThunderRouter(
  o: DynamoStackOptions,
  discovery: string,
  queue: string[],
  procs: DynamoProcess[],
): Promise<DynamoProcess> {
  const home = join(o.scratch, "thunder", "home");
  const r = launch(
    "thunderagent",
    [
      "-m",
      "dynamo.thunderagent_router",
      "--endpoint",
      "dynamo.backend.generate",
      "--model-name",
      MODEL_NAME,
      "--model-path",
      o.shape.model,
      "--router-block-size",
      String(o.shape.pageSize),
      ...queue,
      ...PARSERS,
    ],
    env(discovery, home, null),
    join(o.scratch, "thunder"),
  );
  procs.push(r);
  await until(
    r,
    () => /ThunderAgent|thunderagent/.test(r.log()) && /regist|serving|ready/i.test(r.log()),
    120_000,
    "its start",
  );
  return r;
}

/**
 * Waits until the frontend serves chat (a model listed there may not be routable yet: ThunderAgent's
 * router registers after the workers, and until then a chat answers 404), then pays each worker's
 * one-time start-up cost as payColdStart does for the other rows: two answered requests of a few
 * full pages of text no workload prompt shares, each its own program under ThunderAgent.
 */
async function untilServing(url: string, sessions: boolean, pageSize: number): Promise<void> {
  const deadline = Date.now() + 180_000;
  let last = "";
  for (let n = 0; n < 2; ) {
    const id = `kvctl-bench-ready-${n}`;
    const text = `ready probe ${n}: ${coldStartText(pageSize, 4)}`;
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(sessions ? { "x-dynamo-session-id": id } : {}),
      },
      body: JSON.stringify({
        model: MODEL_NAME,
        messages: [{ role: "user", content: text }],
        max_tokens: 1,
        temperature: 0,
      }),
    }).catch((e: Error) => ({ ok: false, status: 0, text: async () => e.message }));
    if (r.ok) {
      await r.text();
      if (sessions) await endSession(url, id);
      n++;
      continue;
    }
    last = `${r.status} ${(await r.text()).slice(0, 200)}`;
    if (Date.now() > deadline)
      throw new Error(`the Dynamo frontend did not serve chat within 180 s (last answer: ${last})`);
    // Readiness poll: the frontend says nothing when its router joins.
    await new Promise((res) => setTimeout(res, 500));
  }
}

/** ThunderAgent releases a session's program on a request marked final (it is not run). */
async function endSession(url: string, id: string): Promise<void> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-dynamo-session-id": id,
      "x-dynamo-session-final": "true",
    },
    body: JSON.stringify({
      model: MODEL_NAME,
      messages: [{ role: "user", content: "done" }],
      max_tokens: 1,
    }),
  });
  await r.text();
}
