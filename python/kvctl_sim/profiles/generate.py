"""Writes the GPU profiles of ``kvctl sim`` from AIConfigurator, or checks the committed ones.

    .venv/bin/python python/kvctl_sim/profiles/generate.py           rewrite profiles/<gpu>/<model>.json
    .venv/bin/python python/kvctl_sim/profiles/generate.py --check   exit 1 naming each stale file
    --dir DIR                                                         read and write DIR/<gpu>/<model>.json

Inputs: aiconfigurator-core 0.12.0 (its SGLang silicon tables and its built-in model configs),
installed by python/setup_venv.sh into .venv/aiconfigurator-core-0.12.0 ($KVCTL_AIC_SITE
overrides), and the deployment facts below, each with its source (docs/sim.md "Profiles").
The step times are AIConfigurator's ``predict_prefill_latency`` / ``predict_decode_latency``,
the calls Dynamo's mocker makes per step, tabulated on a grid the simulator interpolates.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent.parent))

from kvctl_sim.timing import FORMAT, LINKS, Profile  # noqa: E402

AIC_VERSION = "0.12.0"
AIC_BACKEND = "sglang"
AIC_BACKEND_VERSION = "0.5.14"  # the SGLang release AIConfigurator 0.12.0's H100/H200 tables measured
# What a figure on this profile rests on (docs/sim.md "Profiles" has the measurements).
VALIDATION = (
    f"aiconfigurator-core {AIC_VERSION} SGLang {AIC_BACKEND_VERSION} silicon tables; interpolation within "
    "0.6% (median) and 9% (worst) of AIConfigurator itself; not run against a real GPU server"
)
MIB = 1 << 20

# GPU memory as SGLang reads it (torch.cuda.mem_get_info total, the figure nvidia-smi prints).
GPU_MEM_MIB = {"h100_sxm": 81559, "h200_sxm": 143771}

# Per-GPU links, one direction, in decimal GB/s; a TP-N worker has N of each.
#   h2d/d2h: PCIe Gen5 x16 is 64 GB/s per direction (AIConfigurator's systems/*.yaml pcie_bw);
#     NVIDIA's NVbandwidth reports 55.6 GB/s for host_to_device_memcpy_ce on such a link.
#   storage: a Mooncake store over RDMA. Mooncake's Transfer Engine moves 190 GB/s over
#     8 x 400 Gb/s RoCE NICs (kvcache-ai/Mooncake doc/en/transfer-engine.md), one NIC per GPU on
#     an HGX H100/H200 node: 23.75 GB/s per GPU when all eight move at once.
# Latencies are assumptions (no published figure fits): one DMA launch, one store round trip.
LINK_SPECS = {
    "h2d": (55.6, 10.0, "PCIe Gen5 x16, NVbandwidth host_to_device_memcpy_ce (line rate 64 GB/s)"),
    "d2h": (55.6, 10.0, "PCIe Gen5 x16, NVbandwidth host_to_device_memcpy_ce (line rate 64 GB/s)"),
    "storage_read": (23.75, 100.0, "Mooncake store, RDMA: 190 GB/s per 8 x 400 Gb/s node / 8 GPUs"),
    "storage_write": (23.75, 100.0, "Mooncake store, RDMA: 190 GB/s per 8 x 400 Gb/s node / 8 GPUs"),
}

# SGLang 0.5.23's defaults on a GPU of 60-160 GB (arg_groups/memory_hook.py), and the HiCache
# settings its best-practices page gives (--page-size 64, --hicache-ratio 2).
SGLANG = {
    "page_size": 64,
    "hicache_ratio": 2.0,
    "max_prefill_tokens": 16384,
    "chunked_prefill_size": 8192,
    "prefill_cuda_graph_sizes": 58,
}

# One deployment per GPU x model: the tensor parallelism a deployment would choose there.
DEPLOYMENTS = [
    ("h100_sxm", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", 1),
    ("h200_sxm", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", 1),
    # 141 GB of BF16 weights leave no room for KV on two 80 GB GPUs; four leave ~33 GB each.
    ("h100_sxm", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", 4),
    # Two 141 GB GPUs hold the weights and ~60 GB of KV each: TP4 would double the GPUs.
    ("h200_sxm", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", 2),
]

# The grid. Prefill is indexed by the batch's mean request; between knots the times are
# multilinear, exact for the batch x tokens and tokens x prefix terms, so the knots only need to
# follow the quadratic attention in the extend length.
PREFILL_BATCH = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
PREFILL_EXTEND = [1, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384]
PREFILL_PREFIX = [0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 49152, 65536, 98304, 131072]
DECODE_BATCH = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]
DECODE_CONTEXT = [1, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304, 131072]


def aic_site() -> Path:
    return Path(os.environ.get("KVCTL_AIC_SITE", ROOT / ".venv" / f"aiconfigurator-core-{AIC_VERSION}"))


def import_aic():
    site = aic_site()
    if not (site / "aiconfigurator_core").is_dir():
        raise SystemExit(f"aiconfigurator-core {AIC_VERSION} not found in {site}: run python/setup_venv.sh")
    sys.path.insert(0, str(site))
    import logging

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    from aiconfigurator_core.sdk import engine

    return engine, site


def model_config(site: Path, hf_id: str) -> dict:
    return json.loads(
        (site / "aiconfigurator_core" / "model_configs" / f"{hf_id.replace('/', '--')}_config.json").read_text()
    )


def geometry(cfg: dict) -> dict:
    """KV bytes per token and parameter count, from the model's own config (BF16 KV and weights)."""
    layers, hidden, heads = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads, inter, vocab = cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]
    head_dim = cfg.get("head_dim") or hidden // heads
    attn = hidden * head_dim * (2 * heads + 2 * kv_heads)
    per_layer = attn + 3 * hidden * inter + 2 * hidden
    tied = cfg.get("tie_word_embeddings", False)
    params = layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    return {
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "kv_dtype": "bfloat16",
        "kv_dtype_bytes": 2,
        "params": params,
        "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * 2,
    }


def sglang_pools(gpu: str, geo: dict, tp: int) -> dict:
    """The pool sizes SGLang 0.5.23 picks by default on this GPU (memory_hook.py, kv_cache_configurator.py).

    mem_fraction_static reserves activations (1.5 MiB per chunked-prefill token), graph buffers and
    a TP allowance; the KV pool is what the static fraction leaves after the weights. The CUDA
    context and NCCL buffers (a few hundred MiB) are not subtracted.
    """
    gpu_mib = GPU_MEM_MIB[gpu]
    decode_graph_bs = 512 if tp >= 4 else 256
    reserved = 512 + max(SGLANG["chunked_prefill_size"], 2048) * 1.5 + tp / 8 * 1024
    reserved += decode_graph_bs * 2 + SGLANG["prefill_cuda_graph_sizes"] * 8
    reserved = max(reserved, 10 * 1024)
    fraction = round((gpu_mib - reserved) / gpu_mib, 3)
    weights_rank = geo["params"] * 2 / tp
    kv_rank = gpu_mib * MIB * fraction - weights_rank
    if kv_rank <= 0:
        raise SystemExit(f"{gpu} TP{tp}: the weights do not leave room for KV")
    page = SGLANG["page_size"]
    device = int(kv_rank / (geo["kv_bytes_per_token"] / tp)) // page * page
    running = max(min(int(device / 131072 * 512), 4096), 2048)
    return {
        "page_size": page,
        "device_kv_tokens": device,
        "host_kv_tokens": int(device * SGLANG["hicache_ratio"]) // page * page,
        "max_prefill_tokens": SGLANG["max_prefill_tokens"],
        "chunked_prefill_size": SGLANG["chunked_prefill_size"],
        "max_running_requests": min(running, device // 2),
        "mem_fraction_static": fraction,
        "hicache_ratio": SGLANG["hicache_ratio"],
    }


def tables(handle, provenance: set[str]) -> tuple[dict, dict]:
    total, attention = [], []
    eng = handle._engine
    for b in PREFILL_BATCH:
        rows_t, rows_a = [], []
        for e in PREFILL_EXTEND:
            row_t, row_a = [], []
            for p in PREFILL_PREFIX:
                ctx, _ = eng.run_static_per_op(b, 1, e + p, 1, p, 1.0, 1.0, "static_ctx", 32)
                row_t.append(ms(sum(op[1] for op in ctx)))
                row_a.append(ms(sum(op[1] for op in ctx if op[0] == "context_attention")))
                provenance.add(eng.last_provenance() or "silicon")
            rows_t.append(row_t)
            rows_a.append(row_a)
        total.append(rows_t)
        attention.append(rows_a)
    prefill = {"batch": PREFILL_BATCH, "extend": PREFILL_EXTEND, "prefix": PREFILL_PREFIX}
    prefill.update(total_ms=total, attention_ms=attention)
    decode = {"batch": DECODE_BATCH, "context": DECODE_CONTEXT}
    decode["ms"] = []
    for b in DECODE_BATCH:
        decode["ms"].append([ms(handle.predict_decode_latency(b, c, 2)) for c in DECODE_CONTEXT])
        provenance.add(eng.last_provenance() or "silicon")
    return prefill, decode


def ms(x: float) -> float:
    return float(f"{x:.6g}")


def profile(engine, site: Path, gpu: str, model: str, hf_id: str, tp: int) -> dict:
    geo = geometry(model_config(site, hf_id))
    handle = engine.EngineHandle.compile(hf_id, gpu, AIC_BACKEND, backend_version=AIC_BACKEND_VERSION, tp_size=tp)
    provenance: set[str] = set()
    prefill, decode = tables(handle, provenance)
    links = {}
    for link in LINKS:
        per_gpu, latency_us, source = LINK_SPECS[link]
        links[link] = {
            "gb_per_s": round(per_gpu * tp, 4),
            "per_gpu_gb_per_s": per_gpu,
            "latency_us": latency_us,
            "source": source,
        }
    return {
        "format": FORMAT,
        "ref": {
            "name": f"{gpu}/{model}",
            "gpu": gpu,
            "model": model,
            "tp": tp,
            "validation": VALIDATION,
        },
        "source": {
            "generator": "python/kvctl_sim/profiles/generate.py",
            "aiconfigurator_core": AIC_VERSION,
            "backend": AIC_BACKEND,
            "backend_version": AIC_BACKEND_VERSION,
            "hf_model": hf_id,
            "provenance": sorted(provenance),
        },
        "model": {k: v for k, v in geo.items() if k != "kv_bytes_per_token"},
        "kv_bytes_per_token": geo["kv_bytes_per_token"],
        "sglang": sglang_pools(gpu, geo, tp),
        "prefill": prefill,
        "decode": decode,
        "links": links,
    }


def render(doc: dict) -> str:
    """Indented JSON with each innermost list of numbers on one line (diffs stay readable)."""

    def enc(node, depth: int) -> str:
        pad = " " * (depth + 1)
        if isinstance(node, dict):
            items = [f"{pad}{json.dumps(k)}: {enc(v, depth + 1)}" for k, v in node.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
        if isinstance(node, list) and node and isinstance(node[0], list):
            return "[\n" + ",\n".join(pad + enc(v, depth + 1) for v in node) + "\n" + " " * depth + "]"
        return json.dumps(node)

    return enc(doc, 0) + "\n"


def generated(out_dir: Path) -> dict[Path, str]:
    engine, site = import_aic()
    out = {}
    for gpu, model, hf_id, tp in DEPLOYMENTS:
        text = render(profile(engine, site, gpu, model, hf_id, tp))
        Profile(json.loads(text), out_dir / gpu / f"{model}.json")  # what we write, the loader reads
        out[out_dir / gpu / f"{model}.json"] = text
    return out


def main(argv: list[str]) -> int:
    out_dir = Path(argv[argv.index("--dir") + 1]).resolve() if "--dir" in argv else HERE
    files = generated(out_dir)
    if "--check" in argv:
        stale = [p for p, text in files.items() if not p.is_file() or p.read_text() != text]
        for p in stale:
            print(
                f"{p} differs from what its generator writes: run {Path(__file__).relative_to(ROOT)}", file=sys.stderr
            )
        return 1 if stale else 0
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
