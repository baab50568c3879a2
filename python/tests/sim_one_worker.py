"""Helper of test_sim_crosscheck.py (run as a script, with the patched SGLang tree on PYTHONPATH as
conftest.py leaves it): one kvctl sim worker (python/kvctl_sim/fleet.py, SGLang's own cache) on a
Mooncake-shaped trace, every row its own program, each hash id 64 token ids. Prints one JSON line:
TTFT p50/p90 over every request and the tokens it recomputed.

    python sim_one_worker.py TRACE.jsonl PROFILE
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvctl_sim.timing import load_profile  # noqa: E402

BLOCK = 64


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, -(-len(ordered) * q // 100)) - 1]


def kvctl_one_worker(rows: list[dict], profile) -> dict:
    """Every trace row as its own program on one kvctl sim worker; each hash id is 64 token ids."""
    from kvctl_sim.cache import WorkerSpec
    from kvctl_sim.fleet import Fleet

    spec = WorkerSpec(
        id="w0",
        page_size=profile.page_size,
        device_tokens=profile.device_kv_tokens,
        host_tokens=0,  # Dynamo's SGLang mocker has no host tier
        chunked_prefill_size=profile.chunked_prefill_size,
        events=False,
    )
    fleet = Fleet(profile, [spec])
    arrival, first, computed = {}, {}, 0
    for i, row in enumerate(rows):
        t = (row["timestamp"] - rows[0]["timestamp"]) / 1000.0
        while fleet.advance(t) < t:
            pass
        ids = np.concatenate([np.arange(h * BLOCK, (h + 1) * BLOCK, dtype="<i4") + 1 for h in row["hash_ids"]])
        out = np.arange(row["output_length"], dtype="<i4") + 10_000_000 + 5000 * i
        arrival[f"r{i}"] = t
        fleet.submit(t, "w0", f"r{i}", f"r{i}", 0, ids.tobytes(), out.tobytes(), None)
    finished = 0
    while finished < len(rows):
        at = fleet.advance(math.inf)
        for event in fleet.out.events:
            if event[0] == "first":
                first[event[1]] = event[2]
            elif event[0] == "finish":
                finished += 1
                computed += event[5]
        fleet.out.clear()
        assert finished == len(rows) or math.isfinite(at) or fleet.busy(), "the worker stopped with work left"
    ttft = [(first[r] - arrival[r]) * 1e3 for r in arrival]
    return {"ttft_p50_ms": percentile(ttft, 50), "ttft_p90_ms": percentile(ttft, 90), "recomputed_tokens": computed}


if __name__ == "__main__":
    trace_rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    print(json.dumps(kvctl_one_worker(trace_rows, load_profile(sys.argv[2]))))
