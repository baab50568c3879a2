// The cpu profile as a `kvctl-sim-profile/1` document (python/kvctl_sim/timing.py reads it; the
// GPU profiles' generator, python/kvctl_sim/profiles/generate.py, writes the same fields).
import { cpus, loadavg } from "node:os";
import type { Cell3 } from "./fit.js";
import { median } from "./fit.js";
import type { ServerFacts } from "./server-facts.js";

export const PROFILE_MODEL = "kvctl-tiny";
const SGLANG_VERSION = "0.5.23";

export interface Measured {
  cfg: Record<string, number>;
  facts: ServerFacts;
  axes: {
    prefill: { batch: number[]; extend: number[]; prefix: number[] };
    decode: { batch: number[]; context: number[] };
  };
  prefill: { spreads: number[]; overheadMs: number };
  decode: { ms: number[][]; spreads: number[] };
  links: Record<string, { gb_per_s: number; latency_us: number; samples: [number, number][] }>;
  table: { totalMs: number[][][]; coef: number[]; filled: Cell3[]; residuals: number[] };
  repeats: number;
  steps: number;
  load0: number[];
  t0: number;
  linkNotes: Record<string, string>;
}

const r3 = (x: number) => +x.toFixed(3);
const quantiles = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { median: r3(median(s)), p90: r3(s[Math.min(s.length - 1, Math.floor(0.9 * s.length))]) };
};

/** The server's flags with what is this run's own (paths, ports) replaced by what it stands for. */
function portable(command: string[]): string[] {
  const args = command.slice(command.indexOf("sglang.launch_server") + 1);
  const stands: Record<string, string> = {
    "--model-path": "<bench:agent's model>",
    "--port": "<free port>",
    "--kv-events-config": "<zmq on a loopback port>",
  };
  return ["python", "-m", "sglang.launch_server", ...args.map((a, i) => stands[args[i - 1]] ?? a)];
}

function source(m: Measured) {
  return {
    generator: "bench/sim-cpu/calibrate.ts (npm run sim:calibrate-cpu)",
    sglang: SGLANG_VERSION,
    measured_at: new Date().toISOString().slice(0, 10),
    machine: `${cpus().length} x ${cpus()[0]?.model ?? "cpu"}`,
    load_average: { start: m.load0.map(r3), end: loadavg().map(r3) },
    wall_s: Math.round((performance.now() - m.t0) / 1000),
    method:
      "prefill: the scheduler's prefill_finished_time - forward_entry_time of one batch sent as one /generate call, its prefix cached first; decode: the tokenizer's first-to-last-token span over steps - 1 of a batch decoding together; medians of repeats",
    repeats: m.repeats,
    decode_steps: m.steps,
    // (max - min) / median of each cell's repeats, over the cells.
    prefill_spread: quantiles(m.prefill.spreads),
    decode_spread: quantiles(m.decode.spreads),
    // What a client waits beyond the prefill forward: tokenize, queue, schedule, detokenize, HTTP.
    request_overhead_ms: r3(m.prefill.overheadMs),
    prefill_model: {
      terms: ["batch", "request", "new token", "request x (prefix + extend)^2"],
      coef_ms: m.table.coef.map((c) => +c.toPrecision(4)),
      residual: quantiles(m.table.residuals.map(Math.abs)),
      // Shapes no batch can take (more new tokens than chunked_prefill_size): the model's value.
      fitted_cells: m.table.filled.map((c) => [c.batch, c.extend, c.prefix]),
    },
    server_command: portable(m.facts.command),
    link_samples: Object.fromEntries(Object.entries(m.links).map(([k, v]) => [k, v.samples])),
  };
}

export function profileDoc(m: Measured) {
  const f = m.facts;
  const layers = m.cfg.num_hidden_layers;
  const headDim = m.cfg.head_dim ?? m.cfg.hidden_size / m.cfg.num_attention_heads;
  return {
    format: "kvctl-sim-profile/1",
    ref: {
      name: `cpu/${PROFILE_MODEL}`,
      gpu: "cpu",
      model: PROFILE_MODEL,
      tp: 1,
      validation: `measured on this machine's real SGLang ${SGLANG_VERSION} CPU servers (bench:agent's model and flags); checked against bench:agent's recomputed tokens in docs/sim.md "Validation"`,
    },
    source: source(m),
    model: {
      layers,
      kv_heads: m.cfg.num_key_value_heads,
      head_dim: headDim,
      kv_dtype: f.kv_dtype,
      kv_dtype_bytes: f.kv_bytes_per_token / (2 * layers * m.cfg.num_key_value_heads * headDim),
      hidden_size: m.cfg.hidden_size,
      vocab_size: m.cfg.vocab_size,
    },
    kv_bytes_per_token: f.kv_bytes_per_token,
    sglang: {
      page_size: f.page_size,
      device_kv_tokens: f.device_kv_tokens,
      host_kv_tokens: f.host_kv_tokens,
      max_prefill_tokens: f.max_prefill_tokens,
      chunked_prefill_size: f.chunked_prefill_size,
      max_running_requests: f.max_running_requests,
      mem_fraction_static: 0.3,
      hicache_ratio: f.host_kv_tokens / f.device_kv_tokens,
    },
    prefill: { ...m.axes.prefill, total_ms: m.table.totalMs },
    decode: { ...m.axes.decode, ms: m.decode.ms },
    links: Object.fromEntries(
      Object.entries(m.links).map(([k, v]) => [
        k,
        { gb_per_s: v.gb_per_s, latency_us: v.latency_us, source: m.linkNotes[k] },
      ]),
    ),
  };
}

/** Indented JSON with each list of scalars on one line, as the GPU profiles' generator writes them. */
export function render(doc: unknown): string {
  const enc = (node: unknown, depth: number): string => {
    const pad = " ".repeat(depth + 1);
    if (node && typeof node === "object" && !Array.isArray(node)) {
      const items = Object.entries(node as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => `${pad}${JSON.stringify(k)}: ${enc(v, depth + 1)}`);
      return `{\n${items.join(",\n")}\n${" ".repeat(depth)}}`;
    }
    if (Array.isArray(node) && node.some((v) => v !== null && typeof v === "object"))
      return `[\n${node.map((v) => pad + enc(v, depth + 1)).join(",\n")}\n${" ".repeat(depth)}]`;
    if (Array.isArray(node)) return `[${node.map((v) => JSON.stringify(v)).join(", ")}]`;
    return JSON.stringify(node);
  };
  return `${enc(doc, 0)}\n`;
}
