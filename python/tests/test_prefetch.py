"""Prefetch on a real UnifiedRadixCache with its real HiCache controller (CPU pools): host -> device
through SGLang's load_back, the ack's statuses, the device hold, and bad input refused whole."""
import torch

from helpers import device_indices, device_locked, insert_kv, kv_of, make_unified, no_host_locks, umatch
from test_commands import A, B, C, env, events, hashes_of, node_of

from sglang.srt.kvctl import scheduler_side
from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache


def setup():
    cache, alloc, pool = make_unified(write_policy="write_back")
    return cache, alloc, pool, CommandHandler(cache, worker_id="w0")


def parked(cache, alloc, pool, h, tokens=A, session="s1", shared=0):
    """The tokens' blocks offloaded to host by ToolStart (device copies of all but the first
    ``shared`` freed: those another session's branch still stands on)."""
    insert_kv(cache, alloc, pool, tokens)
    hs = hashes_of(cache, tokens)
    assert h.handle(env({"type": "ToolStart", "session_id": session, "block_hashes": hs})).status == "applied"
    assert all(node_of(cache, x).evicted == (i >= shared) for i, x in enumerate(hs))
    events(cache)
    return hs


def test_prefetch_loads_parked_blocks_back_with_identical_kv_and_device_events(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    before = kv_of(pool, device_indices(cache, umatch(cache, A)))
    ha = hashes_of(cache, A)
    h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha}))
    events(cache)
    for l in range(pool.layer_num):  # the device rows the blocks had are overwritten
        pool.k_buffer[l].zero_()
        pool.v_buffer[l].zero_()
    ack = h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 5000}))
    assert ack.status == "applied" and ack.requested == 4 and ack.affected == 4 and ack.skipped == 0, ack
    assert ack.tiers == {"GPU": 4, "CPU_PINNED": 4} and ack.reason is None
    # SGLang's own commit_load_back: one BlockStored on the device tier per block, nothing else
    assert [(k, m) for k, m, _ in events(cache)] == [("stored", "GPU")] * 4
    assert umatch(cache, A).device_prefix_len == 16
    after = kv_of(pool, device_indices(cache, umatch(cache, A)))
    for (k0, v0), (k1, v1) in zip(before, after):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    assert cache.ongoing_load_back == {}
    cache.sanity_check()


def test_prefetch_of_resident_blocks_is_noop_and_a_second_prefetch_too(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    events(cache)
    ack = h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 100}))
    assert ack.status == "noop" and ack.affected == 0 and ack.tiers.get("GPU") == 4, ack
    again = h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 100}))
    assert again.status == "noop" and len(state_for_cache(cache).prefetch.holds) == 1
    assert events(cache) == []


def test_prefetch_by_session_adds_the_tool_offloads_blocks(core):
    cache, alloc, pool, h = setup()
    ha = parked(cache, alloc, pool, h)
    ack = h.handle(env({"type": "Prefetch", "block_hashes": [], "session_id": "s1", "deadline_ms": 5000}))
    assert ack.status == "applied" and ack.requested == 4 and ack.affected == 4, ack
    assert not any(node_of(cache, x).evicted for x in ha)
    # the tool offload is still open: ToolEnd finds the blocks resident and releases the host hold
    end = h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    assert end.status == "applied" and no_host_locks(cache)


def test_prefetch_holds_what_it_loaded_on_the_device_until_the_hold_ends(core):
    cache, alloc, pool, h = setup()
    ha = parked(cache, alloc, pool, h)
    st = state_for_cache(cache)
    now = [100.0]
    st.prefetch.clock = lambda: now[0]
    assert h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 5000})).status == "applied"
    h.handle(env({"type": "ToolEnd", "session_id": "s1", "epoch": 1}))
    deepest = node_of(cache, ha[-1])
    assert len(st.prefetch.holds) == 1 and device_locked(cache, deepest)
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    cache.evict(EvictParams(num_tokens=10_000))       # the LRU cannot take the held path
    assert umatch(cache, A).device_prefix_len == 16

    class Sched:
        tree_cache = cache
        waiting_queue = []

    scheduler_side.on_scheduler_tick(Sched())
    assert len(st.prefetch.holds) == 1                # not expired yet, nobody else holds it
    now[0] += st.prefetch.hold_s + 1
    scheduler_side.on_scheduler_tick(Sched())         # no command, no caller: the loop tick
    assert st.prefetch.holds == {} and not device_locked(cache, deepest)
    assert st.prefetch.metrics["prefetch_holds_expired"] == 1
    cache.evict(EvictParams(num_tokens=10_000))
    assert umatch(cache, A).device_prefix_len == 0
    cache.sanity_check()


def test_prefetch_hold_goes_once_a_request_holds_the_blocks_itself(core):
    cache, alloc, pool, h = setup()
    ha = parked(cache, alloc, pool, h)
    st = state_for_cache(cache)
    h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 5000}))
    deepest = node_of(cache, ha[-1])
    req_lock = cache.inc_lock_ref(deepest.id)          # what a scheduled request takes
    st.prefetch.reap(cache)
    assert st.prefetch.holds == {} and st.prefetch.metrics["prefetch_holds_taken_over"] == 1
    assert device_locked(cache, deepest)                      # the request's own lock stays
    cache.dec_lock_ref(deepest.id, req_lock.to_dec_params())
    assert not device_locked(cache, deepest)


def test_prefetch_past_its_deadline_loads_nothing_more_and_acks_partial(core):
    cache, alloc, pool, h = setup()
    ha = parked(cache, alloc, pool, h, C)   # one 5-page node
    ticks = iter([0.0])                     # the receipt, then every later look is past the deadline
    h.routes["Prefetch"].__self__.clock = lambda: next(ticks, 10.0)
    ack = h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 1}))
    assert ack.status == "partial" and ack.affected == 0 and ack.skipped == 5, ack
    assert ack.reason == "deadline 1 ms passed: 5 block(s) still on host only"
    assert ack.tiers == {"CPU_PINNED": 5} and all(node_of(cache, x).evicted for x in ha)
    assert events(cache) == []


def test_prefetch_refused_by_load_back_acks_partial_with_what_is_resident(monkeypatch, core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, B)
    hb = hashes_of(cache, B)
    ha = parked(cache, alloc, pool, h, A, shared=2)   # A's own two pages left the device
    monkeypatch.setattr(cache, "load_back", lambda *a, **k: False)
    ack = h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 5000}))
    assert ack.status == "partial" and ack.affected == 0 and ack.skipped == 2, ack
    assert "load_back refused" in ack.reason and ack.tiers["GPU"] == 2
    assert hb[:2] == ha[:2]


def test_prefetch_failing_midway_acks_error_with_the_reason(monkeypatch, core):
    cache, alloc, pool, h = setup()
    ha = parked(cache, alloc, pool, h)

    def boom(*a, **k):
        raise RuntimeError("DMA failed")

    monkeypatch.setattr(cache, "load_back", boom)
    ack = h.handle(env({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 5000}))
    assert ack.status == "error" and "DMA failed" in ack.reason


def test_prefetch_bad_input_is_rejected_naming_the_field_counted_and_nothing_loaded(core):
    cache, alloc, pool, h = setup()
    ha = parked(cache, alloc, pool, h)
    cases = [
        ({"type": "Prefetch", "block_hashes": ha + [12345], "deadline_ms": 5000}, "command.block_hashes[4]"),
        ({"type": "Prefetch", "block_hashes": ha, "session_id": "nobody", "deadline_ms": 5000}, "command.session_id"),
        ({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 0}, "command.deadline_ms"),
        ({"type": "Prefetch", "block_hashes": ha, "deadline_ms": 60001}, "command.deadline_ms"),
        ({"type": "Prefetch", "block_hashes": [0] * 65537, "deadline_ms": 5}, "command.block_hashes"),
        ({"type": "Prefetch", "block_hashes": ha}, "command.deadline_ms"),
    ]
    for cmd, field in cases:
        ack = h.handle(env(cmd))
        assert ack.status == "rejected" and ack.reason.startswith(field + ":"), (field, ack)
    assert h.metrics["rejected"] == len(cases)
    assert h.metrics["rejected_by_field"]["command.deadline_ms"] == 3
    assert h.metrics["rejected_by_field"]["command.block_hashes[4]"] == 1
    assert all(node_of(cache, x).evicted for x in ha) and events(cache) == []
    assert state_for_cache(cache).prefetch.holds == {}


def test_prefetch_needs_a_host_tier(core):
    cache, alloc, pool = make_unified(hicache=False)
    h = CommandHandler(cache, worker_id="w0")
    insert_kv(cache, alloc, pool, A)
    ack = h.handle(env({"type": "Prefetch", "block_hashes": hashes_of(cache, A), "deadline_ms": 5}))
    assert ack.status == "rejected" and ack.reason.startswith("command.type: Prefetch needs HiCache")
