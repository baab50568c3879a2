"""kvctl sim's worker against Dynamo 1.6.1's, one worker each, on the same trace and profile.

The cross-check of issue 48 compares whole fleets (kvctl sim's cache_aware routing against
Dynamo's KV router); this is its worker half, with no router in the way: SGLang's own cache under
kvctl sim's scheduler (python/kvctl_sim/fleet.py) against Dynamo's SGLang-shaped mocker, both timed
by the same profile. The cache decides the same tokens to recompute, to the token; TTFT p50 and
p90 agree within 20% (docs/sim.md, "Cross-check against Dynamo's offline replay", says where the
rest comes from). Run with -s to see the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
if not (PYTHON_DIR / "kvctl_sim" / "fleet.py").is_file():
    pytest.skip("kvctl sim's fleet (branch sim-engine) has not landed here yet", allow_module_level=True)
TRACE = PYTHON_DIR / "kvctl_sim" / "crosscheck_trace.py"
DYNAMO = PYTHON_DIR / "kvctl_sim" / "dynamo_replay.py"


def kvctl_one_worker(trace: Path, name: str) -> dict:
    """In its own process: the fleet installs its mock host pools and virtual clock process-wide."""
    r = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("sim_one_worker.py")), str(trace), name],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def dynamo_one_worker(trace: Path, name: str) -> dict:
    r = subprocess.run(
        [sys.executable, str(DYNAMO), "--trace", str(trace), "--profile", name, "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {k: out["runs"][0][k] for k in ("ttft_p50_ms", "ttft_p90_ms", "recomputed_tokens")}


def test_one_kvctl_worker_matches_one_dynamo_worker(tmp_path: Path):
    # docs/sim.md lists four more profiles and seeds; one keeps npm test near a minute.
    name, seed = "h100_sxm/llama-3.1-70b", 2
    trace = tmp_path / "trace.jsonl"
    args = ["--out", str(trace), "--seed", str(seed), "--rate", "8", "--conversations", "48"]
    subprocess.run([sys.executable, str(TRACE), *args], check=True, capture_output=True)
    ours, theirs = kvctl_one_worker(trace, name), dynamo_one_worker(trace, name)
    print(json.dumps({"profile": name, "seed": seed, "kvctl": ours, "dynamo": theirs}))
    assert ours["recomputed_tokens"] == theirs["recomputed_tokens"] > 0
    for figure in ("ttft_p50_ms", "ttft_p90_ms"):
        assert ours[figure] == pytest.approx(theirs[figure], rel=0.2), figure
