"""The Dynamo side of kvctl sim's cross-check (python/kvctl_sim/dynamo_replay.py): Dynamo 1.6.1's own
offline replay, its KV router and SGLang mocker, timed by the same profile tables kvctl sim reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))

from kvctl_sim.timing import load_profile  # noqa: E402

SCRIPT = PYTHON_DIR / "kvctl_sim" / "dynamo_replay.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def result(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_one_request_on_an_idle_worker_waits_exactly_its_prefill(tmp_path: Path):
    name = "h200_sxm/llama-3.1-70b"
    trace = write_trace(
        tmp_path / "one.jsonl",
        [{"timestamp": 0, "input_length": 6144, "output_length": 4, "hash_ids": list(range(96))}],
    )
    out = result(run("--trace", str(trace), "--profile", name, "--workers", "2"))
    assert out["bench"] == "dynamo-replay" and out["profile"] == load_profile(name).ref
    assert out["runs"][0]["completed"] == 1
    assert out["ttft_p50_ms"] == pytest.approx(load_profile(name).prefill_s([6144], [0]) * 1e3, rel=1e-4)


def test_its_kv_router_sends_a_returning_turn_to_its_prefix_and_recomputes_only_the_new_tokens(tmp_path: Path):
    name = "h100_sxm/llama-3.1-8b"
    rows = [
        {"timestamp": 0, "input_length": 4096, "output_length": 4, "hash_ids": list(range(64))},
        # Ten seconds later, the same 64 pages and 8 new ones, with three idle workers to choose from.
        {"timestamp": 10_000, "input_length": 4608, "output_length": 4, "hash_ids": list(range(72))},
    ]
    out = result(run("--trace", str(write_trace(tmp_path / "two.jsonl", rows)), "--profile", name, "--workers", "4"))
    assert out["runs"][0]["recomputed_tokens"] == 4096 + 512
    # Dynamo times a prefill by its new tokens alone: the cached prefix's attention is not counted.
    p = load_profile(name)
    assert out["ttft_p50_ms"] == pytest.approx(p.prefill_s([512], [0]) * 1e3, rel=1e-4)
    assert p.prefill_s([512], [4096]) > p.prefill_s([512], [0])


def test_bad_arguments_are_refused_naming_them(tmp_path: Path):
    r = run("--trace", str(tmp_path / "missing.jsonl"), "--profile", "h100_sxm/llama-3.1-8b")
    assert r.returncode == 2 and "--trace: no file" in r.stderr
    trace = write_trace(
        tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1]}]
    )
    r = run("--trace", str(trace), "--profile", "h100_sxm/llama-9", "--workers", "1")
    assert r.returncode != 0 and "unknown model in profile 'h100_sxm/llama-9'" in r.stderr
    r = run("--trace", str(trace), "--profile", "h100_sxm/llama-3.1-8b", "--workers", "0")
    assert r.returncode == 2 and "--workers and --seeds must be at least 1" in r.stderr


def test_the_crosscheck_trace_is_seeded_full_pages_of_shared_prefixes(tmp_path: Path):
    script = PYTHON_DIR / "kvctl_sim" / "crosscheck_trace.py"

    def write(name: str, *args: str) -> bytes:
        out = tmp_path / name
        r = subprocess.run([sys.executable, str(script), "--out", str(out), *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return out.read_bytes()

    first = write("a.jsonl", "--conversations", "10", "--turns", "3", "--seed", "5")
    assert write("b.jsonl", "--conversations", "10", "--turns", "3", "--seed", "5") == first
    assert write("c.jsonl", "--conversations", "10", "--turns", "3", "--seed", "6") != first
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert len(rows) == 30
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    assert all(r["input_length"] == 64 * len(r["hash_ids"]) and r["output_length"] > 0 for r in rows)
    # Every later turn repeats an earlier request's pages as its prefix; no request repeats whole.
    seen = {tuple(r["hash_ids"]) for r in rows}
    assert len(seen) == 30
    prefixes = sum(any(tuple(r["hash_ids"][: len(o)]) == o and len(o) < len(r["hash_ids"]) for o in seen) for r in rows)
    assert prefixes >= 20
    r = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "x"), "--rate", "0"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "--rate must be positive" in r.stderr
