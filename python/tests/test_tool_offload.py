"""ToolStart / ToolEnd: UnifiedRadixCache-native offload/restore (nodes stay in the tree, payloads
move between tiers), epochs, and one test per defect of the tool prototype (lessons.md)."""
import threading

import torch

from helpers import device_indices, insert_kv, kv_of, make_unified, no_host_locks, umatch
from test_commands import A, C, env, events, hashes_of, node_of

from sglang.srt.kvctl import scheduler_side
from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache

OTHER = list(range(500, 516))


def setup(policy="write_back"):
    cache, alloc, pool = make_unified(write_policy=policy)
    return cache, alloc, pool, CommandHandler(cache, worker_id="w0")


def host_free(cache):
    return cache.cache_controller.mem_pool_host.available_size()


def test_tool_offload_restore_round_trip_identical_kv_and_truthful_events(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    before = kv_of(pool, device_indices(cache, umatch(cache, A)))
    events(cache)
    ack = h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha}))
    assert ack.status == "applied" and ack.epoch == 1 and ack.tiers == {"CPU_PINNED": 4}, ack
    assert [(k, m) for k, m, _ in events(cache)] == [("stored", "CPU_PINNED")] * 4 + [("removed", "GPU")] * 4
    assert node_of(cache, ha[0]).evicted and umatch(cache, A).host_hit_length == 16
    for l in range(pool.layer_num):
        pool.k_buffer[l].zero_()
        pool.v_buffer[l].zero_()
    ack = h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    assert ack.status == "applied" and ack.tiers == {"GPU": 4, "CPU_PINNED": 4} and ack.epoch == 1, ack
    assert [(k, m) for k, m, _ in events(cache)] == [("stored", "GPU")] * 4
    after = kv_of(pool, device_indices(cache, umatch(cache, A)))
    for (k0, v0), (k1, v1) in zip(before, after):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    assert no_host_locks(cache) and state_for_cache(cache).pins.records == {}
    cache.sanity_check()


def test_tool_epochs_increase_on_every_offload_and_stale_epoch_is_rejected(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    assert h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha})).epoch == 1
    assert h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha})).epoch == 2
    stale = h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    assert stale.status == "rejected" and stale.reason == "command.epoch: stale epoch 1 (current 2)"
    assert node_of(cache, ha[0]).evicted and not no_host_locks(cache)   # state unchanged
    assert h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 2})).status == "applied"
    again = h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 2}))
    assert again.status == "rejected" and again.reason.startswith("command.session_id")
    assert h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha})).epoch == 3


def test_tool_defect1_refused_or_failed_restore_releases_host_protection(monkeypatch, core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha}))
    assert not no_host_locks(cache)
    # SGLang declining the load (no device room now) is the engine clipping advice: partial,
    # every block counted where it stays
    monkeypatch.setattr(cache, "load_back", lambda *a, **k: False)
    ack = h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    assert (ack.status, ack.affected, ack.skipped, ack.tiers) == ("partial", 0, 4, {"CPU_PINNED": 4})
    assert "load_back" in ack.reason and "host protection released" in ack.reason
    assert no_host_locks(cache) and state_for_cache(cache).pins.records == {}
    assert "s1" not in state_for_cache(cache).sessions.tools
    # an exception midway releases it too
    monkeypatch.undo()
    h.handle(env({"type": "ToolStart", "session_id": "s2", "block_hashes": ha}))

    def boom(*a, **k):
        raise RuntimeError("DMA failed")

    monkeypatch.setattr(cache, "load_back", boom)
    ack = h.handle(env({"type": "ToolEnd", "session_id": "s2", "epoch": 1}))
    assert ack.status == "error" and "DMA failed" in ack.reason and no_host_locks(cache)
    cache.evict_host(10_000)                       # ordinary cache again: host eviction may take it
    assert umatch(cache, A).host_hit_length == 0


def test_tool_defect2_no_unlocked_shared_state_between_load_back_and_loading_check(monkeypatch, core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha}))
    threads = []
    for name in ("load_back", "loading_check"):
        orig = getattr(cache, name)

        def wrapped(*a, _orig=orig, _name=name, **k):
            threads.append((_name, threading.get_ident(), len(cache.ongoing_load_back)))
            return _orig(*a, **k)

        monkeypatch.setattr(cache, name, wrapped)
    assert h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1})).status == "applied"
    # SGLang's own table, written by load_back and read by loading_check, on the one scheduler
    # thread, inside one command: nothing else can interleave; kvctl keeps no load table at all
    assert [t[0] for t in threads] == ["load_back", "loading_check"]
    assert {t[1] for t in threads} == {threading.get_ident()}
    assert cache.ongoing_load_back == {}
    assert not any("load" in k for k in vars(state_for_cache(cache).sessions))


def test_tool_defect3_no_leaked_host_buffers_after_restore_and_removal():
    cache, alloc, pool, h = setup()
    host0, dev0 = host_free(cache), alloc.available_size()
    insert_kv(cache, alloc, pool, C)
    hc = hashes_of(cache, C)
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": hc}))
    assert host_free(cache) == host0 - 20 and alloc.available_size() == dev0
    h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    # the node is removed while it still has its host copy (no host eviction ran): freed too
    ack = h.handle(env({"type": "Think", "block_hashes": [hc[0]], "transient": False}))
    assert ack.status == "applied" and ack.tiers == {"GPU": 5, "CPU_PINNED": 5}
    assert host_free(cache) == host0 and alloc.available_size() == dev0
    cache.sanity_check()


def test_tool_defect4_host_eviction_leaf_collection_respects_host_locks():
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    insert_kv(cache, alloc, pool, OTHER)
    ha = hashes_of(cache, A)
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha}))
    h.handle(env({"type": "Pause", "block_hashes": hashes_of(cache, OTHER), "ttl_seconds": 60, "lease_id": "L"}))
    h.handle(env({"type": "RevokeLease", "lease_id": "L"}))  # OTHER gone; A held by the tool
    insert_kv(cache, alloc, pool, OTHER)
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    cache.evict(EvictParams(num_tokens=10_000))  # OTHER demoted: an unheld host leaf
    core = cache.tree_core
    held = node_of(cache, ha[0])
    assert held not in core.evictable_host_leaves and node_of(cache, hashes_of(cache, OTHER)[0]) in core.evictable_host_leaves
    freed = cache.evict_host(10_000)
    assert freed == 16                       # exactly the unheld tokens: no held node counted
    assert node_of(cache, ha[0]) is held and umatch(cache, A).host_hit_length == 16


def test_tool_defect5_stale_session_node_mappings_are_detected():
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, C)
    hc = hashes_of(cache, C)
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": hc}))
    # the session's tail leaves the tree while the tool runs (forced prune)
    h.handle(env({"type": "Prune", "after_block_hash": hc[1], "force": True}))
    ack = h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    assert ack.status == "partial" and ack.missing == hc[2:] and ack.affected == 2, ack
    assert umatch(cache, C).device_prefix_len == 8 and no_host_locks(cache)
    ins = h.handle(env({"type": "Inspect", "session_id": "s1"}))
    assert ins.epoch is None and ins.detail["blocks"] == []


def test_tool_defect6_offloads_whose_tool_never_ended_expire_by_the_tick(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    st = state_for_cache(cache)
    now = [50.0]
    st.sessions.clock = lambda: now[0]
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": hashes_of(cache, A)}))

    class Sched:
        tree_cache = cache
        waiting_queue = []

    scheduler_side.on_scheduler_tick(Sched())
    assert "s1" in st.sessions.tools
    from sglang.srt.kvctl.sessions import TOOL_TTL_S

    now[0] += TOOL_TTL_S + 1
    scheduler_side.on_scheduler_tick(Sched())           # no command, no caller: the loop tick
    assert "s1" not in st.sessions.tools and no_host_locks(cache)
    assert st.sessions.metrics["tool_offloads_expired"] == 1
    assert cache.evict_host(10_000) == 16


def test_tool_defect7_no_offload_evict_race_host_copy_held_before_gpu_copy_freed(monkeypatch):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    core = cache.tree_core
    seen = []
    orig = core._demote

    def demote(node, *a, **k):
        # an eviction that runs right between backup and GPU free finds a held, backed-up node
        seen.append((node.backuped, any(cd.host_lock_ref for cd in node.component_data)))
        cache.evict_host(10_000)
        assert node.backuped and node.parent is not None
        return orig(node, *a, **k)

    monkeypatch.setattr(core, "_demote", demote)
    ack = h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha}))
    assert ack.status == "applied" and seen == [(True, True)]
    monkeypatch.undo()
    n = node_of(cache, ha[0])
    assert n.evicted and n.backuped and n.write_through_pending_id is None
    assert cache.ongoing_write_through == {} if isinstance(cache.ongoing_write_through, dict) else True
    cache.sanity_check()


def test_offload_frees_the_sessions_own_branch_and_leaves_shared_ancestors_on_the_gpu(core):
    """A (4 pages) and B (A's first 2 pages, then its own) share a prefix: offloading A must not
    take B's GPU copies with it (a device node never sits below a host-only one)."""
    from test_commands import B

    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    insert_kv(cache, alloc, pool, B)
    ha, hb = hashes_of(cache, A), hashes_of(cache, B)
    assert ha[:2] == hb[:2]
    for cmd in ({"type": "ToolStart", "session_id": "s1", "block_hashes": ha},
                {"type": "Pause", "block_hashes": ha, "ttl_seconds": 60, "lease_id": "l1"}):
        ack = h.handle(env(cmd))
        assert ack.status in ("applied", "noop"), ack
        assert all(node_of(cache, x).evicted for x in ha[2:])  # A's own pages left the GPU
        assert not any(node_of(cache, x).evicted for x in hb)  # B's path (shared prefix too) did not
        assert len(device_indices(cache, umatch(cache, B))) == len(B)
        h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
        insert_kv(cache, alloc, pool, A)  # back on the GPU for the next command
    cache.sanity_check()
