"""The KV links of a CPU SGLang server, timed on the code the server runs (bench/sim-cpu/README.md).

On a CPU server the "device" pool and HiCache's host pool are both host memory, and with
``--hicache-io-backend direct --hicache-mem-layout layer_first`` every transfer between them is
``transfer_kv_direct`` (the test bed's stand-in for the CUDA kernel, python/tests/stand_ins:
``dst[dst_indices] = src[src_indices]`` per layer buffer): a load calls it once per layer with that
layer's K and V buffers (``load_to_device_per_layer``), a backup once with every layer's
(``backup_from_device_all_layer``). The ``file`` L3 writes and reads one file per page through
SGLang's own ``HiCacheFile`` (``batch_set`` / ``batch_get``). This times both on buffers of the
server's geometry, over runs of pages at random pool slots, and prints one JSON object:
per link the samples (bytes, median seconds) and a least-squares fit ``latency + bytes / rate``.

    python links.py --layers 2 --kv-heads 2 --head-dim 16 --dtype bfloat16 --page 16 \
        --device-tokens 8192 --host-tokens 16384 --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests" / "stand_ins"))
from cpu_cuda import transfer_kv_direct  # noqa: E402  the server's own copy on CPU

TOKEN_RUNS = (16, 64, 256, 1024, 4096, 8192)


def fit(samples: list[tuple[int, float]]) -> dict[str, float]:
    """seconds = latency + bytes / rate, fitted on relative error (each run counts alike, whatever
    its size); latency clipped at 0."""
    w = [1.0 / (s * s) for _, s in samples]
    sw = sum(w)
    sx = sum(wi * b for wi, (b, _) in zip(w, samples))
    sy = sum(wi * s for wi, (_, s) in zip(w, samples))
    sxx = sum(wi * b * b for wi, (b, _) in zip(w, samples))
    sxy = sum(wi * b * s for wi, (b, s) in zip(w, samples))
    slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    latency = (sy - slope * sx) / sw
    if latency < 0:
        latency, slope = 0.0, sxy / sxx
    return {"gb_per_s": round(1e-9 / slope, 4), "latency_us": round(latency * 1e6, 2)}


def timed(fn, repeats: int) -> float:
    fn()
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def slots(pool_tokens: int, tokens: int, page: int, gen: torch.Generator) -> torch.Tensor:
    """Token slots of `tokens // page` random whole pages of a pool (as SGLang's page allocator gives)."""
    pages = torch.randperm(pool_tokens // page, generator=gen)[: tokens // page]
    return (pages[:, None] * page + torch.arange(page)[None, :]).reshape(-1)


def host_links(a: argparse.Namespace, dtype: torch.dtype) -> dict[str, list[tuple[int, float]]]:
    shape = (a.kv_heads, a.head_dim)
    device_k = [torch.randn(a.device_tokens + a.page, *shape).to(dtype) for _ in range(a.layers)]
    device_v = [torch.randn(a.device_tokens + a.page, *shape).to(dtype) for _ in range(a.layers)]
    host_k = [torch.zeros(a.host_tokens, *shape, dtype=dtype) for _ in range(a.layers)]
    host_v = [torch.zeros(a.host_tokens, *shape, dtype=dtype) for _ in range(a.layers)]
    per_token = 2 * a.layers * a.kv_heads * a.head_dim * dtype.itemsize
    gen = torch.Generator().manual_seed(1)
    out: dict[str, list[tuple[int, float]]] = {"h2d": [], "d2h": []}
    for n in TOKEN_RUNS:
        dev, host = slots(a.device_tokens, n, a.page, gen), slots(a.host_tokens, n, a.page, gen)

        def load() -> None:
            for layer in range(a.layers):
                transfer_kv_direct([host_k[layer], host_v[layer]], [device_k[layer], device_v[layer]], host, dev)

        def backup() -> None:
            transfer_kv_direct(device_k + device_v, host_k + host_v, dev, host)

        out["h2d"].append((n * per_token, timed(load, a.repeats)))
        out["d2h"].append((n * per_token, timed(backup, a.repeats)))
    return out


def storage_links(a: argparse.Namespace, dtype: torch.dtype) -> dict[str, list[tuple[int, float]]]:
    from sglang.srt.mem_cache.hicache_storage import HiCacheFile, HiCacheStorageConfig

    page_shape = (2, a.layers, a.page, a.kv_heads, a.head_dim)
    out: dict[str, list[tuple[int, float]]] = {"storage_write": [], "storage_read": []}
    with tempfile.TemporaryDirectory(prefix="kvctl-links-l3-") as d:
        os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = d
        cfg = HiCacheStorageConfig(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=False,
            model_name="calibration",
        )
        store = HiCacheFile(cfg, file_path=d)
        serial = 0
        for n in TOKEN_RUNS:
            pages = n // a.page
            values = [torch.randn(page_shape).to(dtype) for _ in range(pages)]
            targets = [torch.empty(page_shape, dtype=dtype) for _ in range(pages)]
            writes, reads = [], []
            for _ in range(a.repeats):
                keys = [f"k{serial}_{i}" for i in range(pages)]
                serial += 1
                t = time.perf_counter()
                assert store.batch_set(keys, values)
                writes.append(time.perf_counter() - t)
                t = time.perf_counter()
                got = store.batch_get(keys, targets)
                reads.append(time.perf_counter() - t)
                assert all(g is not None for g in got)
            nbytes = pages * values[0].numel() * dtype.itemsize
            out["storage_write"].append((nbytes, statistics.median(writes)))
            out["storage_read"].append((nbytes, statistics.median(reads)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("layers", "kv-heads", "head-dim", "page", "device-tokens", "host-tokens"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    dtype = getattr(torch, a.dtype)
    torch.set_num_threads(1)  # the servers run with OMP_NUM_THREADS=1
    samples = {**host_links(a, dtype), **storage_links(a, dtype)}
    print(json.dumps({link: {"samples": s, **fit(s)} for link, s in samples.items()}))


if __name__ == "__main__":
    main()
