"""SGLang's own tree invariant check (UnifiedRadixCache.sanity_check: structure, leaf sets, LRU,
sizes, ongoing ops) run on the patched tree after a workload of inserts, splits, pins, demotions,
host evictions, load-backs and unpins; plus the index checked against the tree at every step."""
import random

from helpers import insert_kv, load_back, make_unified, umatch

from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache
from sglang.srt.mem_cache.base_prefix_cache import EvictParams


def _check_index(cache):
    st = state_for_cache(cache)
    root = st.ops.root()
    if hasattr(cache.tree_core, "_binding"):
        return _check_rust_index(cache, st)
    seen = set()
    stack = [root]
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        if n is root:
            continue
        assert len(n.kvctl_hashes) == len(n.key) // cache.page_size
        for h in n.kvctl_hashes:
            assert st.index.get(h, root) is n
            seen.add(h)
    assert seen == {h for h, _ in st.index.items()}


def _check_rust_index(cache, st):
    """The Rust core's index is the fold of its KV events: every block in it is found in the tree,
    in a node that lists it, on exactly the tiers its events say (a node's blocks share its tiers)."""
    blocks = st.index.blocks
    st.index.resolve([])  # the index reads what the core drained so far (observer._fold)
    found = st.index.resolve(list(blocks.hashes()))
    assert set(found) == set(blocks.hashes())
    for h, n in found.items():
        assert h in n.kvctl_hashes
        assert blocks.tiers(h) == (not n.evicted, n.backuped), (h, n)


def test_workload_keeps_sglang_invariants_and_the_index_exact(core):
    rng = random.Random(7)
    cache, alloc, pool = make_unified(page_size=4, size=512)
    h = CommandHandler(cache)
    st = state_for_cache(cache)
    bases = [list(range(b, b + 64)) for b in (1, 1000, 2000)]
    pinned = []
    for step in range(60):
        base = rng.choice(bases)
        cut = rng.randrange(1, 16) * 4
        tokens = base[:cut] + [rng.randrange(5000, 9000) for _ in range(rng.randrange(1, 5) * 4)]
        m = umatch(cache, tokens)
        if m.host_hit_length:
            cache.evict(EvictParams(num_tokens=m.host_hit_length))
            load_back(cache, m.best_match_node)
        if alloc.available_size() < len(tokens):
            cache.evict(EvictParams(num_tokens=len(tokens)))
        if alloc.available_size() < len(tokens):
            continue
        insert_kv(cache, alloc, pool, tokens)
        op = rng.random()
        hashes = [x for x, _ in st.index.items()]
        if op < 0.3 and hashes:
            pick = rng.sample(hashes, min(3, len(hashes)))
            if h.handle({"type": "Cache", "block_hashes": pick, "pin": True}).affected:
                pinned.extend(pick)
        elif op < 0.45 and pinned:
            h.handle({"type": "Cache", "block_hashes": [pinned.pop()], "pin": False})
        elif op < 0.6:
            cache.evict(EvictParams(num_tokens=rng.randrange(8, 128)))
        elif op < 0.7:
            cache.evict_host(rng.randrange(8, 256))
        _check_index(cache)
    h.handle({"type": "Cache", "block_hashes": pinned, "pin": False})
    assert not any(st.pins.records.values())
    cache.sanity_check()  # SGLang's own invariants, with every pin released
    _check_index(cache)


def _random_workload_with_commands(seed, policy):
    rng = random.Random(seed)
    cache, alloc, pool = make_unified(page_size=4, size=512, write_policy=policy)
    h = CommandHandler(cache)
    st = state_for_cache(cache)
    bases = [list(range(b, b + 64)) for b in (1, 1000, 2000)]
    epochs = {}
    leases = set()
    for step in range(80):
        base = rng.choice(bases)
        cut = rng.randrange(1, 16) * 4
        tokens = base[:cut] + [rng.randrange(5000, 9000) for _ in range(rng.randrange(1, 5) * 4)]
        m = umatch(cache, tokens)
        if m.host_hit_length:
            load_back(cache, m.best_match_node)
        if alloc.available_size() < len(tokens):
            cache.evict(EvictParams(num_tokens=len(tokens)))
        if alloc.available_size() < len(tokens):
            continue
        insert_kv(cache, alloc, pool, tokens)
        hashes = [x for x, _ in st.index.items()]
        if not hashes:
            continue
        pick = rng.sample(hashes, min(rng.randrange(1, 4), len(hashes)))
        op = rng.randrange(12)
        if op == 0:
            h.handle({"type": "Prune", "after_block_hash": pick[0], "force": rng.random() < 0.3})
        elif op == 1:
            h.handle({"type": "Think", "block_hashes": pick, "transient": rng.random() < 0.6})
        elif op == 2:
            lid = f"L{rng.randrange(4)}"
            a = h.handle({"type": "Pause", "block_hashes": pick, "ttl_seconds": rng.choice([None, 30]), "lease_id": lid})
            if a.lease:
                leases.add(lid)
        elif op == 3 and leases:
            h.handle({"type": "RevokeLease", "lease_id": leases.pop()})
        elif op == 4:
            sid = f"s{rng.randrange(3)}"
            epochs[sid] = h.handle({"type": "ToolStart", "session_id": sid, "block_hashes": pick}).epoch
        elif op == 5 and epochs:
            sid = rng.choice(sorted(epochs))
            h.handle({"type": "ToolEnd", "session_id": sid, "epoch": epochs.pop(sid)})
        elif op == 6:
            h.handle({"type": "Cache", "block_hashes": pick, "pin": rng.random() < 0.5})
        elif op in (7, 8):
            cache.evict(EvictParams(num_tokens=rng.randrange(8, 128)))
        elif op == 9:
            cache.evict_host(rng.randrange(8, 256))
        elif op == 10:
            h.handle({"type": "Inspect", "block_hashes": pick})
        _check_index(cache)
        cache.sanity_check()
    for sid, ep in epochs.items():
        h.handle({"type": "ToolEnd", "session_id": sid, "epoch": ep})
    for lid in leases:
        h.handle({"type": "RevokeLease", "lease_id": lid})
    # The workload reached the handler (not only the cache), commands took effect, none failed midway.
    by_status = h.metrics["by_status"]
    assert sum(by_status.values()) >= 20, h.metrics
    assert by_status.get("applied", 0) > 0, h.metrics
    assert by_status.get("error", 0) == 0, h.metrics
    cache.sanity_check()
    _check_index(cache)


import pytest


@pytest.mark.parametrize("seed", [11, 34])  # 34: once left a backed-up child under a transient parent
def test_command_workload_keeps_sglang_invariants_write_through(seed, core):
    _random_workload_with_commands(seed, "write_through")


@pytest.mark.parametrize("seed", [12, 102])  # 102: a hold's backup once made room by removing the node
def test_command_workload_keeps_sglang_invariants_write_back(seed, core):
    _random_workload_with_commands(seed, "write_back")
