"""Tier-aware pins on UnifiedRadixCache + HiCache (either tree core, real controller, CPU pools)."""
import torch

from helpers import device_indices, insert_kv, kv_of, load_back, make_unified, umatch

from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache
from sglang.srt.mem_cache.base_prefix_cache import EvictParams

VIP = list(range(1, 17))
OTHER = list(range(500, 532))


def _gpu_and_host_hashes(cache):
    from sglang.srt.disaggregation.kv_events import BlockStored

    out = {}
    for ev in cache.take_events():
        if isinstance(ev, BlockStored):
            for h in ev.block_hashes:
                out.setdefault(h, set()).add(ev.medium)
    return out


def test_pin_survives_gpu_eviction_and_load_back_restores_identical_data(core):
    cache, alloc, pool = make_unified()
    insert_kv(cache, alloc, pool, VIP)
    m = umatch(cache, VIP)
    before = kv_of(pool, device_indices(cache, m))
    hs = [h for h in _gpu_and_host_hashes(cache)]
    h = CommandHandler(cache, worker_id="w0")
    ack = h.handle({"type": "Cache", "block_hashes": hs, "pin": True})
    assert ack.status == "applied" and ack.tiers == {"GPU": 1, "CPU_PINNED": 1}
    insert_kv(cache, alloc, pool, OTHER)
    cache.evict(EvictParams(num_tokens=10_000))          # GPU: everything goes (demoted)
    cache.evict_host(10_000)                              # host: everything unpinned goes
    st = state_for_cache(cache)
    node = st.index.get(hs[0], st.ops.root())
    assert node is not None and node.evicted and node.backuped and node.pin_count == 4
    assert umatch(cache, OTHER).host_hit_length == 0 and umatch(cache, OTHER).device_prefix_len == 0
    m2 = umatch(cache, VIP)
    assert m2.device_prefix_len == 0 and m2.host_hit_length == 16
    # scribble over the freed device rows so a fake restore could not pass
    for l in range(pool.layer_num):
        pool.k_buffer[l].zero_()
        pool.v_buffer[l].zero_()
    load_back(cache, m2.best_match_node)
    m3 = umatch(cache, VIP)
    assert m3.device_prefix_len == 16
    after = kv_of(pool, device_indices(cache, m3))
    for (k0, v0), (k1, v1) in zip(before, after):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    assert ack.tiers and h.handle({"type": "Cache", "block_hashes": hs, "pin": False}).status == "applied"
    cache.evict(EvictParams(num_tokens=10_000))
    cache.evict_host(10_000)
    assert umatch(cache, VIP).host_hit_length == 0


def test_write_back_pinned_node_is_backed_up_before_demotion(core):
    cache, alloc, pool = make_unified(write_policy="write_back")
    insert_kv(cache, alloc, pool, VIP)
    hs = list(_gpu_and_host_hashes(cache))
    st = state_for_cache(cache)
    node = st.index.get(hs[0], st.ops.root())
    assert not node.backuped                             # write_back: nothing on host yet
    CommandHandler(cache).handle({"type": "Cache", "block_hashes": hs[:1], "pin": True})
    assert node.backuped                                  # forced backup (lessons.md #11)
    cache.evict(EvictParams(num_tokens=10_000))
    cache.evict_host(10_000)
    assert umatch(cache, VIP).host_hit_length == 16


def test_unified_index_follows_split_demotion_host_eviction_and_reset(core):
    cache, alloc, pool = make_unified()
    insert_kv(cache, alloc, pool, VIP)
    insert_kv(cache, alloc, pool, VIP[:8] + [900, 901, 902, 903])  # split
    stored = _gpu_and_host_hashes(cache)
    st = state_for_cache(cache)
    root = st.ops.root()
    assert {h for h, _ in st.index.items()} == set(stored) and len(stored) == 5
    for h in stored:
        assert h in st.index.get(h, root).kvctl_hashes
    cache.evict(EvictParams(num_tokens=10_000))      # demoted: nodes stay, entries stay
    assert all(st.index.get(h, root) is not None for h in stored)
    cache.evict_host(10_000)                          # host eviction removes them
    assert all(st.index.get(h, root) is None for h in stored) and len(st.index) == 0
    insert_kv(cache, alloc, pool, VIP)
    cache.reset()
    assert len(st.index) == 0


def test_budget_is_a_fraction_of_the_host_pool(core):
    cache, alloc, pool = make_unified()
    st = state_for_cache(cache)
    assert st.pins.budget_tokens() == int(0.5 * cache.cache_controller.mem_pool_host.size)


def test_pin_aware_flush_keeps_pinned_blocks_on_host(core):
    cache, alloc, pool = make_unified()
    insert_kv(cache, alloc, pool, VIP)
    hs = list(_gpu_and_host_hashes(cache))
    insert_kv(cache, alloc, pool, OTHER)
    h = CommandHandler(cache)
    h.handle({"type": "Cache", "block_hashes": hs, "pin": True})
    ack = h.flush()
    assert ack.status == "applied" and ack.skipped == 4
    m = umatch(cache, VIP)
    assert m.device_prefix_len == 0 and m.host_hit_length == 16
    assert umatch(cache, OTHER).host_hit_length == 0


def test_safety_net_leaves_host_tier_pins_alone_they_hold_no_gpu_memory(core):
    """Backed-up pins never keep a request from the GPU (their GPU copies demote like any other),
    so a request nearly as large as the GPU pool releases none of them, even with more pinned
    tokens than the host pool has room for beside it."""
    from sglang.srt.kvctl.scheduler_side import on_scheduler_tick
    import types

    cache, alloc, pool = make_unified(page_size=4, size=256)
    st = state_for_cache(cache)
    st.pins.budget_fraction = 1.0
    host = cache.cache_controller.mem_pool_host.size
    h = CommandHandler(cache, worker_id="w0")
    pinned = 0
    for start in range(1000, 1000 + 10 * 32, 32):          # 320 tokens, more than the GPU pool
        insert_kv(cache, alloc, pool, list(range(start, start + 32)))
        hs = list(_gpu_and_host_hashes(cache))
        assert h.handle({"type": "Cache", "block_hashes": hs, "pin": True}).status == "applied"
        pinned += 32
        cache.evict(EvictParams(num_tokens=10_000))
    need = 250
    assert pinned + need > host, "the old host-pool arithmetic would have released pins here"
    req = types.SimpleNamespace(origin_input_ids=list(range(need)))
    sched = types.SimpleNamespace(tree_cache=cache, waiting_queue=[req])
    on_scheduler_tick(sched)
    assert st.pins.metrics["safety_net_triggers"] == 0 and st.pins.metrics["safety_net_released"] == 0
    assert umatch(cache, list(range(1000, 1032))).host_hit_length == 32   # the oldest pin still holds
    assert st.ops.device_held_tokens(st.pins.protected.values()) == 0
