// A fresh worker's one-time start-up cost, paid before a configuration is measured. SGLang hashes
// full pages with a C++ extension that torch JIT-builds on first use; the build directory is keyed
// by the extension's name only and its build command names the source's path, which is a different
// temp copy of the patched tree for every worker, so the first request that hashes a page on each
// fresh worker rebuilds it, under a lock that every SGLang process on the machine shares. Left in
// the run, that build lands in the first request of whichever configuration meets it and stretches
// its sessions and TTFT by the compile time, whatever the configuration does. One request of a few
// full pages per worker, sent to the worker directly (no gateway decision sees it), takes it out.
import { request } from "node:http";
import type { RealServer } from "../../src/demo/real-server.js";

/** POSTs JSON and resolves with the answer: no timeout (the build takes minutes on a busy machine; fetch's own 300 s limit is too short). */
function post(url: string, body: unknown): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => {
          text += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

/** Text the worker tokenizes itself (token ids must be its vocabulary's), unlike the workload's
 * prompts so none shares a page with it; a character or more per token, so at least `pages` pages. */
export function coldStartText(pageSize: number, pages: number): string {
  return "cold start of the page hash; ".repeat(Math.ceil((pageSize * pages * 2) / 29));
}

/** Sends each worker one request of at least `pages` full pages of synthetic text and waits for its answer. */
export async function payColdStart(
  workers: readonly RealServer[],
  pageSize: number,
  pages = 4,
): Promise<void> {
  const text = coldStartText(pageSize, pages);
  for (const w of workers) {
    const r = await post(`${w.baseUrl}/generate`, {
      text,
      sampling_params: { max_new_tokens: 1, temperature: 0 },
    }).catch((e: Error) => {
      throw new Error(`cold-start request to ${w.info.worker_id} failed: ${e.message}`);
    });
    if (r.status !== 200)
      throw new Error(
        `cold-start request to ${w.info.worker_id} answered ${r.status}: ${r.text.slice(0, 300)}`,
      );
  }
}
