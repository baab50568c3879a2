// A fresh worker's one-time start-up cost, paid before a configuration is measured. SGLang hashes
// full pages with a C++ extension that torch JIT-builds on first use; the build directory is keyed
// by the extension's name only and its build command names the source's path, which is a different
// temp copy of the patched tree for every worker, so the first request that hashes a page on each
// fresh worker rebuilds it, under a lock that every SGLang process on the machine shares. Left in
// the run, that build lands in the first request of whichever configuration meets it and stretches
// its sessions and TTFT by the compile time, whatever the configuration does. One request of a few
// full pages per worker, sent to the worker directly (no gateway decision sees it), takes it out.
import type { RealServer } from "../../src/demo/real-server.js";

/** Sends each worker one request of `pages` full pages of synthetic tokens and waits for its answer. */
export async function payColdStart(workers: readonly RealServer[], pageSize: number, pages = 4): Promise<void> {
  // Token ids far from the workload's text, so no prompt of the trace shares a page with them.
  const inputIds = Array.from({ length: pageSize * pages }, (_, i) => 1000 + i);
  for (const w of workers) {
    const r = await fetch(`${w.baseUrl}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input_ids: inputIds, sampling_params: { max_new_tokens: 1, temperature: 0 } }),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`cold-start request to ${w.info.worker_id} answered ${r.status}: ${text.slice(0, 300)}`);
  }
}
