"""One test per pin trap of shared/design/lessons.md ("Pin prototype: traps"), named after it."""
import os
import types

import torch
from helpers import device_locked, insert, insert_kv, make_radix, make_unified, match, no_host_locks, stored_hashes, umatch

from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache, state_of
from sglang.srt.kvctl.scheduler_side import on_scheduler_tick
from sglang.srt.mem_cache.base_prefix_cache import EvictParams


def _fake_scheduler(cache, alloc, idle=True, waiting=()):
    return types.SimpleNamespace(
        tree_cache=cache, token_to_kv_pool_allocator=alloc, waiting_queue=list(waiting),
        running_batch=types.SimpleNamespace(reqs=[]), _engine_paused=False,
        is_fully_idle=lambda ignore_waiting=False, **_: idle, cur_batch_for_debug=None,
        last_batch=None, req_to_token_pool=types.SimpleNamespace(clear=lambda: None,
                                                                 reset_aux_cache_allocator=lambda: None),
        grammar_manager=types.SimpleNamespace(clear=lambda: None),
        metrics_reporter=types.SimpleNamespace(reset_metrics=lambda: None, is_stats_logging_rank=False),
        draft_worker=None)


def _flush(sched):
    from sglang.srt.managers.scheduler import Scheduler

    return Scheduler.flush_cache(sched, empty_cache=False)


def test_trap01_stale_node_after_eviction_is_decided_by_reachability():
    c, a = make_radix()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    node = state_of(c).index._map[hs[0]]
    c.evict(EvictParams(num_tokens=100))
    assert not node.evicted  # the stale reference still "looks" cached: value is not reset
    assert state_of(c).index.get(hs[0], c.root_node) is None
    ack = CommandHandler(c).handle({"type": "Cache", "block_hashes": hs, "pin": True})
    assert ack.status == "noop" and ack.missing == hs


def test_trap02_test_allocator_has_a_real_device_and_real_kv():
    c, a = make_radix()
    assert a.device == "cpu" and c.device == torch.device("cpu")
    insert(c, a, list(range(1, 9)))
    node = state_of(c).index._map[stored_hashes(c)[0]]
    assert isinstance(node.value, torch.Tensor) and node.value.device.type == "cpu"
    assert a.get_kvcache().k_buffer[0].shape[0] >= 256  # a real pool, not a mock


def test_trap03_flush_cache_keeps_pins_and_index_full_reset_clears_them():
    from sglang.srt.disaggregation.kv_events import AllBlocksCleared

    c, a = make_radix()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    insert(c, a, list(range(40, 56)))
    CommandHandler(c).handle({"type": "Cache", "block_hashes": hs, "pin": True})
    assert _flush(_fake_scheduler(c, a)) is True
    assert match(c, list(range(1, 9))).device_prefix_len == 8
    assert match(c, list(range(40, 56))).device_prefix_len == 0
    assert not any(isinstance(e, AllBlocksCleared) for e in c.take_events())
    assert state_of(c).pins.pin_count_of_hash(hs[0]) == 1
    c.reset()  # a full reset: pins and index go, AllBlocksCleared is emitted
    assert any(isinstance(e, AllBlocksCleared) for e in c.take_events())
    assert not state_of(c).pins.records and len(state_of(c).index) == 0
    # no pins: flush_cache is SGLang's plain reset
    insert(c, a, list(range(1, 9)))
    assert _flush(_fake_scheduler(c, a)) is True and len(state_of(c).index) == 0


def test_trap04_pins_cannot_wedge_the_scheduler():
    c, a = make_radix(page_size=4, size=64)
    pins = state_of(c).pins
    pins.budget_fraction = 1.0
    for start in (1, 100, 200, 300):
        insert(c, a, list(range(start, start + 8)))
        CommandHandler(c).handle({"type": "Cache", "block_hashes": stored_hashes(c), "pin": True})
    assert c.protected_size() == 32
    req = types.SimpleNamespace(origin_input_ids=list(range(48)))  # 32 > 64 - 48: would spin
    on_scheduler_tick(_fake_scheduler(c, a, waiting=[req]))
    assert c.protected_size() <= 64 - 48 and pins.metrics["safety_net_released"] == 4  # 2 oldest nodes
    assert pins.metrics["safety_net_triggers"] == 1


def test_trap05_inspect_sees_blocks_cached_before_any_collector():
    c, a = make_radix(events=False)  # no collector at all when these were cached
    insert(c, a, list(range(1, 13)))
    ack = CommandHandler(c).handle({"type": "Inspect"})
    assert len(ack.detail["blocks"]) == 3 and ack.detail["indexed_blocks"] == 3 and ack.affected == 0


def test_trap06_flush_refused_while_busy_leaves_pins_and_tree_intact():
    c, a = make_radix()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    insert(c, a, list(range(40, 56)))
    CommandHandler(c).handle({"type": "Cache", "block_hashes": hs, "pin": True})
    assert _flush(_fake_scheduler(c, a, idle=False)) is False  # HTTP 400: the caller retries
    assert match(c, list(range(40, 56))).device_prefix_len == 16
    assert state_of(c).pins.pin_count_of_hash(hs[0]) == 1


def test_trap07_cached_tokens_are_measured_per_request_not_from_a_counter():
    import pin_flood

    c, a = make_radix(page_size=4)
    insert(c, a, list(range(1, 17)))
    assert pin_flood.cached_tokens(c, list(range(1, 17)) + [99] * 8) == 16
    assert pin_flood.cached_tokens(c, [7] * 16) == 0


def test_trap08_the_interpreter_imports_the_patched_tree(patched_tree):
    import sglang
    import sglang.srt.mem_cache.radix_cache as rc
    import sglang.srt.mem_cache.unified_cache.unified_tree_core as utc

    assert os.path.realpath(sglang.__file__).startswith(os.path.realpath(patched_tree))
    for mod in (rc, utc):
        assert os.path.realpath(mod.__file__).startswith(os.path.realpath(patched_tree))
        assert "KvctlObserver.create(self)" in open(mod.__file__).read()
    assert os.path.exists(os.path.join(patched_tree, "sglang", ".kvctl-patches.json"))


def test_trap09_index_is_maintained_under_hicache_on_every_tier_transition(core):
    cache, alloc, pool = make_unified(events=False)
    insert_kv(cache, alloc, pool, list(range(1, 17)))
    st = state_for_cache(cache)
    hs = [h for h, _ in st.index.items()]
    assert len(hs) == 4
    cache.evict(EvictParams(num_tokens=10_000))  # GPU -> host: still indexed
    assert all(st.index.get(h, st.ops.root()) is not None for h in hs)
    cache.evict_host(10_000)
    assert len(st.index) == 0


def test_trap10_split_repoints_the_index_so_both_halves_unpin(core):
    from helpers import chain_hashes

    cache, alloc, pool = make_unified()
    insert_kv(cache, alloc, pool, list(range(1, 17)))
    st = state_for_cache(cache)
    hs = chain_hashes(list(range(1, 17)))
    h = CommandHandler(cache)
    h.handle({"type": "Cache", "block_hashes": hs, "pin": True})
    insert_kv(cache, alloc, pool, list(range(1, 9)) + [77] * 4)  # split the pinned node
    first, last = st.index.get(hs[0], st.ops.root()), st.index.get(hs[-1], st.ops.root())
    assert first is not last and first.pin_count == 2 and last.pin_count == 2
    assert h.handle({"type": "Cache", "block_hashes": hs, "pin": False}).status == "applied"
    assert first.pin_count == last.pin_count == 0
    assert no_host_locks(cache)


def test_trap11_host_pin_is_its_own_counter_and_forces_backup(core):
    cache, alloc, pool = make_unified(write_policy="write_back")
    insert_kv(cache, alloc, pool, list(range(1, 17)))
    st = state_for_cache(cache)
    hs = [h for h, _ in st.index.items()]
    node = st.index.get(hs[0], st.ops.root())
    assert not node.backuped
    CommandHandler(cache).handle({"type": "Cache", "block_hashes": hs, "pin": True})
    node = st.index.get(hs[0], st.ops.root())
    assert node.pin_count == 4 and node.backuped
    assert not device_locked(cache, node)                              # lock_ref untouched
    assert not no_host_locks(cache)                                    # host protection
    cache.evict(EvictParams(num_tokens=10_000))   # GPU copy still evictable: demoted
    assert node.evicted and node.backuped
    cache.evict_host(10_000)                      # never leaves the host
    assert umatch(cache, list(range(1, 17))).host_hit_length == 16


def test_only_the_worker_is_placed_into_the_sglang_tree(patched_tree):
    """patch apply places sglang.srt.kvctl and nothing of the test/demo harness."""
    placed = os.path.join(patched_tree, "sglang", "srt", "kvctl")
    assert os.path.exists(os.path.join(placed, "observer.py"))
    assert not os.path.exists(os.path.join(placed, "harness"))
    def subdirs(top):
        return sorted(os.path.relpath(os.path.join(r, d), top) for r, dirs, _ in os.walk(top)
                      for d in dirs if d != "__pycache__" and "__pycache__" not in r)

    source = os.path.join(os.path.dirname(__file__), "..", "kvctl_worker")
    assert subdirs(placed) == subdirs(source) == ["commands", "rust_core"]  # the worker's own package
