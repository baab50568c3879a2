"""kvctl sim's L3 (python/kvctl_sim/storage.py): SGLang 0.5.23's own storage backup and prefetch
on a simulated worker, over a store of page keys timed on the virtual clock.

A program's first turn is cached; six other prompts through the same worker push it out of device
and host; its second turn comes back. With a store per worker the prefix comes back from L3 by
prefetch (storage hit tokens, bytes on storage_read, then h2d); with no L3, or on another worker
of per-worker stores, it is recomputed; with one shared store, another worker reads it. The same
case twice gives the same figures (the virtual clock)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HELPER = Path(__file__).with_name("sim_l3_fleet.py")
PROFILE = "h100_sxm/llama-3.1-8b"


def cases(*args: str) -> list[dict]:
    r = subprocess.run([sys.executable, str(HELPER), PROFILE, *args], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_l3_brings_an_evicted_prefix_back_and_only_where_it_was_written():
    own, again, none, other, shared = cases("worker:1", "worker:1", "none:1", "worker:2", "shared:2")
    kv = 131072  # bytes per token of Llama-3.1-8B's KV (32 layers x 8 heads x 128 x 2 x bf16)
    keep = own["keep"]
    hit = own["workers"]["w0"]["storage_hit_tokens"]
    # The first turn's full pages, all of them from L3 (the new tokens after them are computed).
    assert hit == keep // 16 * 16 == own["second"]["cached"] == own["second"]["host_loaded"]
    assert own["workers"]["w0"]["bytes"]["storage_read"] == hit * kv
    assert own["workers"]["w0"]["bytes"]["storage_write"] >= hit * kv
    assert own["workers"]["w0"]["bytes"]["h2d"] >= hit * kv
    assert again == own

    # Without L3 the same second turn is recomputed whole: the first turn really was evicted.
    assert none["second"]["cached"] == 0
    assert none["workers"]["w0"]["storage_hit_tokens"] == 0
    assert none["workers"]["w0"]["bytes"]["storage_read"] == none["workers"]["w0"]["bytes"]["storage_write"] == 0

    # A store per worker: w1 cannot read what w0 wrote.
    assert other["second"]["cached"] == 0
    assert other["workers"]["w1"]["storage_hit_tokens"] == 0
    # One shared store: w1 reads it.
    assert shared["second"]["cached"] == hit
    assert shared["workers"]["w1"]["storage_hit_tokens"] == hit
    assert shared["workers"]["w1"]["bytes"]["storage_read"] == hit * kv
    assert shared["workers"]["w0"]["storage_hit_tokens"] == 0
