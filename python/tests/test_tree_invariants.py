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


def test_workload_keeps_sglang_invariants_and_the_index_exact():
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
