"""Pins on the plain RadixCache (lock-based) through the command handler."""
import logging

from helpers import insert, make_radix, match, stored_hashes

from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache, state_of
from sglang.srt.mem_cache.base_prefix_cache import EvictParams


def _setup(page=4, size=256):
    c, a = make_radix(page_size=page, size=size)
    h = CommandHandler(c, worker_id="w0")
    return c, a, h


import itertools

_ids = itertools.count()


def _pin(h, hashes, pin=True, ttl=None):
    cmd = {"type": "Cache", "block_hashes": hashes, "pin": pin}
    if ttl:
        cmd["ttl_seconds"] = ttl
    return h.handle({"version": 1, "id": f"x{next(_ids)}", "issued_at_ms": 1, "command": cmd})  # fresh id: no dedupe


def test_pinned_blocks_survive_eviction_unpinned_do_not():
    c, a, h = _setup()
    vip = list(range(1, 17))
    insert(c, a, vip)
    hs = stored_hashes(c)
    insert(c, a, list(range(500, 532)))
    ack = _pin(h, hs)
    assert (ack.status, ack.affected, ack.tiers, ack.worker_id, ack.id) == ("applied", 4, {"GPU": 1}, "w0", ack.id)
    assert ack.id.startswith("x")
    c.evict(EvictParams(num_tokens=10_000))
    assert match(c, vip).device_prefix_len == 16
    assert match(c, list(range(500, 532))).device_prefix_len == 0


def test_double_pin_needs_double_unpin_and_unpin_of_unpinned_is_noop():
    c, a, h = _setup()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    _pin(h, hs)
    _pin(h, hs)
    assert _pin(h, hs, pin=False).status == "applied"
    c.evict(EvictParams(num_tokens=10_000))
    assert match(c, list(range(1, 9))).device_prefix_len == 8
    assert _pin(h, hs, pin=False).status == "applied"
    ack = _pin(h, hs, pin=False)
    assert ack.status == "noop" and ack.skipped == 2
    c.evict(EvictParams(num_tokens=10_000))
    assert match(c, list(range(1, 9))).device_prefix_len == 0


def test_unknown_hashes_are_missing_and_uint64_is_refused():
    c, a, h = _setup()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    ack = _pin(h, [str(x) for x in hs] + [12345])
    assert ack.status == "partial" and ack.affected == 2 and ack.missing == [12345]
    assert all(state_of(c).pins.pin_count_of_hash(x) == 1 for x in hs)
    # the uint64 reading of a negative hash is outside int64: refused, nothing pinned again
    neg = [x for x in hs if x < 0] or [hs[0] - 2**63 if hs[0] >= 0 else hs[0]]
    ack = _pin(h, [hs[0], str(neg[0] + 2**64)])
    assert ack.status == "rejected" and ack.reason.startswith("command.block_hashes[1]:")
    assert all(state_of(c).pins.pin_count_of_hash(x) == 1 for x in hs)


def test_ttl_expiry_releases_the_pin():
    c, a, h = _setup()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    now = [1000.0]
    state_of(c).pins.clock = lambda: now[0]
    _pin(h, hs, ttl=30)
    now[0] += 29
    assert state_of(c).pins.reap() == 0
    now[0] += 2
    assert state_of(c).pins.reap() == 2
    c.evict(EvictParams(num_tokens=10_000))
    assert match(c, list(range(1, 9))).device_prefix_len == 0


def test_budget_refuses_past_the_fraction_and_acks_partial():
    c, a, h = _setup(page=4, size=64)  # budget = 0.5 * 64 = 32 tokens = 8 pages
    insert(c, a, list(range(1, 41)))  # 10 pages
    hs = stored_hashes(c)
    ack = _pin(h, hs)
    assert ack.status == "partial" and ack.affected == 8 and ack.skipped == 2
    assert ack.reason == "pin budget exhausted (32/32 host tokens)"
    assert state_of(c).pins.pinned_tokens() == 32


def test_pins_survive_split_on_both_halves_and_can_be_unpinned():
    c, a, h = _setup()
    insert(c, a, list(range(1, 17)))
    hs = stored_hashes(c)
    _pin(h, hs)
    insert(c, a, list(range(1, 9)) + [99] * 4)  # splits the pinned node
    st = state_of(c)
    first, last = st.index.get(hs[0], c.root_node), st.index.get(hs[3], c.root_node)
    assert first is not last and first.pin_count == 2 and last.pin_count == 2
    assert _pin(h, hs, pin=False).status == "applied"
    assert first.pin_count == 0 and last.pin_count == 0 and c.protected_size() == 0


def test_safety_net_releases_oldest_pins_only_as_needed(caplog):
    c, a, h = _setup(page=4, size=64)
    insert(c, a, list(range(1, 9)))
    old = stored_hashes(c)
    insert(c, a, list(range(100, 108)))
    mid = stored_hashes(c)
    insert(c, a, list(range(200, 208)))
    new = stored_hashes(c)
    st = state_of(c).pins
    st.budget_fraction = 1.0
    for hs in (old, mid, new):
        _pin(h, hs)
    assert c.protected_size() == 24
    with caplog.at_level(logging.WARNING):
        released = st.relieve(required_tokens=64 - 16)  # room for 48 means at most 16 protected
    assert released == 2 and st.pin_count_of_hash(old[0]) == 0 and st.pin_count_of_hash(mid[0]) == 1
    assert st.metrics["safety_net_triggers"] == 1 and "safety net" in caplog.text
    assert st.relieve(required_tokens=8) == 0


def test_pin_aware_flush_keeps_pinned_blocks():
    c, a, h = _setup()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    insert(c, a, list(range(50, 66)))
    _pin(h, hs)
    ack = h.flush()
    assert ack.status == "applied" and ack.affected == 16 and ack.skipped == 2
    assert match(c, list(range(1, 9))).device_prefix_len == 8
    assert state_of(c).index.get(hs[0], c.root_node) is not None


def test_inspect_reports_tiers_pins_and_budget():
    c, a, h = _setup()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    _pin(h, hs[:1])
    ack = h.handle({"type": "Inspect", "block_hashes": hs + [7]})
    assert ack.status == "applied" and ack.missing == [7] and ack.tiers == {"GPU": 2}
    blocks = {b["block_hash"]: b for b in ack.detail["blocks"]}
    assert blocks[hs[0]]["pin_count"] == 1 and blocks[hs[1]]["pin_count"] == 0
    assert ack.detail["pinned_tokens"] == 4 and ack.detail["budget_tokens"] == 128


def test_bad_body_is_rejected_and_counted():
    c, a, h = _setup()
    ack = h.handle(b"{nope")
    assert ack.status == "rejected" and ack.reason.startswith("body") and h.metrics["rejected"] == 1


def test_ttl_pins_expire_from_the_scheduler_loop_tick():
    import types

    from sglang.srt.kvctl.scheduler_side import on_scheduler_tick

    c, a, h = _setup()
    insert(c, a, list(range(1, 9)))
    hs = stored_hashes(c)
    now = [50.0]
    state_of(c).pins.clock = lambda: now[0]
    _pin(h, hs[:1], ttl=5)
    _pin(h, hs[1:])  # no TTL: stays
    sched = types.SimpleNamespace(tree_cache=c, waiting_queue=[])
    on_scheduler_tick(sched)
    assert state_of(c).pins.pin_count_of_hash(hs[0]) == 1
    now[0] += 6
    on_scheduler_tick(sched)
    assert state_of(c).pins.pin_count_of_hash(hs[0]) == 0 and state_of(c).pins.pin_count_of_hash(hs[1]) == 1
    assert state_of(c).pins.metrics["pins_expired"] == 1


def test_prune_and_think_purge_on_plain_radix_cache_skip_pins_and_requests():
    from sglang.srt.disaggregation.kv_events import BlockRemoved

    c, a, h = _setup()
    insert(c, a, list(range(1, 21)))                 # one node, 5 pages
    hs = stored_hashes(c)
    free0 = a.available_size()
    _pin(h, [hs[4]])
    ack = h.handle({"type": "Prune", "after_block_hash": hs[1]})
    assert ack.status == "noop" and ack.skipped == 3     # pinned tail keeps its prefixes
    ack = h.handle({"type": "Prune", "after_block_hash": hs[1], "force": True})
    assert ack.status == "applied" and ack.affected == 3 and ack.tiers == {"GPU": 3}
    assert a.available_size() == free0 + 12
    removed = [x for ev in c.take_events() if isinstance(ev, BlockRemoved) for x in ev.block_hashes]
    assert removed == hs[2:]
    st = state_for_cache(c)
    node = st.index.get(hs[1], st.ops.root())
    c.inc_lock_ref(node)                      # a running request on pages 1-2
    ack = h.handle({"type": "Think", "block_hashes": [hs[1]], "transient": False})
    assert ack.affected == 0 and ack.skipped == 1
    c.dec_lock_ref(node)
    ack = h.handle({"type": "Think", "block_hashes": [hs[1]], "transient": False})
    assert ack.status == "applied" and ack.affected == 1 and st.index.get(hs[0], st.ops.root()) is not None
    assert h.handle({"type": "Think", "block_hashes": [hs[0]], "transient": True}).status == "rejected"
