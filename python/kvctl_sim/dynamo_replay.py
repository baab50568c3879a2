"""The peer side of kvctl sim's cross-check: NVIDIA Dynamo 1.6.1's offline replay of a trace.

    .venv/bin/python python/kvctl_sim/dynamo_replay.py --trace T.jsonl --profile h100_sxm/llama-3.1-70b \
        --workers 8 [--trace-block-size 64] [--seeds 3]

Runs ``dynamo.replay.run_trace_replay`` (Dynamo's KV router in process, its SGLang-shaped mocker,
a virtual clock) on a Mooncake-shaped JSONL trace (``timestamp`` ms, ``input_length``,
``output_length``, ``hash_ids``: the shape docs/sim.md's trace format accepts), with the same
worker as kvctl sim's profile: its page size, device pool, prefill budgets, running-request cap,
and its step times. Dynamo 1.6.1 times AIConfigurator steps through ``aisimulate`` 0.13, which
cannot be installed here (docs/sim.md "Profiles"), so the step times reach it through Dynamo's own
profile-table provider (``dynamo_profile``: prefill time by new tokens, decode time by active KV
tokens and mean context), filled from the profile's AIConfigurator tables. The last line printed
is one JSON object: TTFT p50/p90/p99 over every request, per seed and their median.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kvctl_sim.timing import load_profile  # noqa: E402

DYNAMO_SITE = Path(os.environ.get("KVCTL_DYNAMO_SITE", HERE.parents[1] / ".venv" / "dynamo-1.6.1"))


def dynamo_tables(profile, path: Path) -> None:
    """Dynamo's profile-table file (mocker ``PerfModel::from_npz``) from the profile's step times.

    Prefill: one request of ``isl`` new tokens and no prefix (Dynamo looks prefill up by the
    batch's new tokens alone). Decode: ``active_kv`` tokens over requests of ``context`` tokens,
    so ``active_kv / context`` requests (at least one).
    """
    import numpy as np

    isl = [1, 16, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768]
    ctx = [1, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    active = sorted({1, 128, 512, *(2**k for k in range(10, 23)), profile.device_kv_tokens})
    decode = [[profile.decode_s(max(1, round(kv / c)), kv) * 1e3 for c in ctx] for kv in active]
    np.savez(
        path,
        prefill_isl=np.array(isl, dtype=np.float64),
        prefill_ttft_ms=np.array([profile.prefill_s([n], [0]) * 1e3 for n in isl]),
        decode_active_kv_tokens=np.array(active, dtype=np.float64),
        decode_context_length=np.array(ctx, dtype=np.float64),
        decode_itl=np.array(decode, dtype=np.float64),
    )


def engine_args(profile, npz: Path) -> dict:
    """A Dynamo SGLang mocker worker shaped like the profile's SGLang worker."""
    return {
        "engine": {
            "backend": "sglang",
            "block_size": profile.page_size,
            "num_gpu_blocks": profile.device_kv_tokens // profile.page_size,
            "max_num_seqs": profile.max_running_requests,
            "max_num_batched_tokens": min(profile.max_prefill_tokens, profile.chunked_prefill_size),
            "enable_prefix_caching": True,
            "enable_chunked_prefill": True,
            "sglang": {
                "max_prefill_tokens": profile.max_prefill_tokens,
                "chunked_prefill_size": profile.chunked_prefill_size,
            },
            "timing_model": {"type": "external", "provider": "dynamo_profile", "config": {"path": str(npz)}},
        }
    }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the definition kvctl sim's figures use)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def replay(trace: Path, profile, workers: int, block_size: int, npz: Path) -> dict:
    os.environ.setdefault("DYN_LOG", "warn")  # its router logs every decision at info
    sys.path.insert(0, str(DYNAMO_SITE))
    from dynamo.replay import run_trace_replay

    start = time.perf_counter()
    report = run_trace_replay(
        [str(trace)],
        extra_engine_args=engine_args(profile, npz),
        num_workers=workers,
        router_mode="kv_router",
        trace_block_size=block_size,
        capture_per_request=True,
    )
    wall = time.perf_counter() - start
    done = [r for r in report.per_request if r["terminal_status"] == "completed"]
    ttft = [r["ttft_ms"] for r in done]
    reused = sum(r["reused_input_tokens"] for r in done)
    return {
        "requests": len(report.per_request),
        "completed": len(done),
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p90_ms": percentile(ttft, 90),
        "ttft_p99_ms": percentile(ttft, 99),
        "recomputed_tokens": sum(r["input_length"] for r in done) - reused,
        "simulated_s": report.summary["duration_ms"] / 1e3,
        "wall_s": round(wall, 3),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True, help="Mooncake-shaped JSONL trace")
    ap.add_argument("--profile", required=True, help="kvctl sim profile, e.g. h100_sxm/llama-3.1-70b")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trace-block-size", type=int, default=None, help="tokens per hash id (default: page size)")
    ap.add_argument("--seeds", type=int, default=1, help="repeat runs: Dynamo breaks routing ties at random")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.seeds < 1:
        ap.error("--workers and --seeds must be at least 1")
    if not args.trace.is_file():
        ap.error(f"--trace: no file {args.trace}")
    profile = load_profile(args.profile)
    block = args.trace_block_size or profile.page_size
    with tempfile.TemporaryDirectory(prefix="kvctl-dynamo-") as tmp:
        npz = Path(tmp) / "timing.npz"
        dynamo_tables(profile, npz)
        runs = [replay(args.trace, profile, args.workers, block, npz) for _ in range(args.seeds)]
    median = {k: statistics.median(r[k] for r in runs) for k in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms")}
    out = {
        "bench": "dynamo-replay",
        "dynamo": "1.6.1",
        "profile": profile.ref,
        "workers": args.workers,
        "trace": str(args.trace),
        "trace_block_size": block,
        "timing": "dynamo_profile tables filled from the profile's AIConfigurator tables",
        **median,
        "runs": runs,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
