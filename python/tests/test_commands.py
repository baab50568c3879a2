"""Issue 5 commands on UnifiedRadixCache + HiCache (real controller, CPU pools): Prune, Think,
Pause/RenewLease/RevokeLease (+ the tick reaper), Inspect, dedupe, rejections, KV events."""
import itertools

import pytest
import torch

from helpers import chain_hashes, device_indices, insert_kv, kv_of, load_back, make_unified, umatch

from sglang.srt.kvctl import scheduler_side
from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache
from sglang.srt.mem_cache.base_prefix_cache import EvictParams

A = list(range(1, 17))            # 4 pages
B = A[:8] + [900, 901, 902, 903]   # splits A after page 2
C = A + [700, 701, 702, 703]       # extends A by one page
_ids = itertools.count()


def env(cmd):
    return {"version": 1, "id": f"t-{next(_ids)}", "issued_at_ms": 1, "command": cmd}


def events(cache):
    """(kind, medium, hash) in order, from SGLang's own recorder."""
    from sglang.srt.disaggregation.kv_events import BlockRemoved, BlockStored

    out = []
    for ev in cache.take_events():
        if isinstance(ev, BlockStored):
            out += [("stored", ev.medium, h) for h in ev.block_hashes]
        elif isinstance(ev, BlockRemoved):
            out += [("removed", ev.medium, h) for h in ev.block_hashes]
    return out


def hashes_of(cache, tokens):
    """The published hashes of the blocks of a cached token path (on either core)."""
    n = umatch(cache, tokens)
    held = n.device_prefix_len + n.host_hit_length
    return chain_hashes(tokens[:held], cache.page_size)


def setup(policy="write_through"):
    cache, alloc, pool = make_unified(write_policy=policy)
    h = CommandHandler(cache, worker_id="w0")
    return cache, alloc, pool, h


def node_of(cache, hsh):
    st = state_for_cache(cache)
    return st.index.get(hsh, st.ops.root())


# ---- Prune -------------------------------------------------------------------------------------
def test_prune_evicts_descendants_from_every_tier_leaves_first_keeps_anchor(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, C)
    insert_kv(cache, alloc, pool, B)
    cache.evict(EvictParams(num_tokens=4))   # one leaf demoted: descendants on both tiers
    ha, hb, hc = hashes_of(cache, A), hashes_of(cache, B), hashes_of(cache, C)
    anchor = ha[1]                          # page 2 of A: B's branch and A's tail hang below it
    events(cache)
    ack = h.handle(env({"type": "Prune", "after_block_hash": anchor}))
    assert ack.status == "applied" and ack.affected == 4 and ack.skipped == 0, ack
    assert node_of(cache, anchor) is not None and node_of(cache, ha[0]) is not None
    for x in ha[2:] + hb[2:] + hc[4:]:
        assert node_of(cache, x) is None
    ev = events(cache)
    removed = [(m, x) for k, m, x in ev if k == "removed"]
    assert {x for _, x in removed} == set(ha[2:] + hb[2:] + hc[4:])
    # leaves first: C's last page is removed before A's pages 3-4 that prefix it
    order = [x for _, x in removed]
    assert order.index(hc[4]) < order.index(ha[3]) < order.index(ha[2]) or order.index(hc[4]) < order.index(ha[2])
    assert ack.tiers.get("GPU", 0) + ack.tiers.get("CPU_PINNED", 0) >= 4
    # a removal on each tier the block lived on, nothing else
    for medium, x in removed:
        assert medium in ("GPU", "CPU_PINNED")
    cache.sanity_check()


def test_prune_skips_pinned_and_in_use_unless_force_in_use_never(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, C)
    ha, hc = hashes_of(cache, A), hashes_of(cache, C)
    assert h.handle(env({"type": "Cache", "block_hashes": [hc[4]], "pin": True})).status == "applied"
    ack = h.handle(env({"type": "Prune", "after_block_hash": ha[0]}))
    # the pinned tail and every prefix of it stay
    assert ack.status == "noop" and ack.skipped == 4 and node_of(cache, hc[4]) is not None
    ack = h.handle(env({"type": "Prune", "after_block_hash": ha[0], "force": True}))
    assert ack.status == "applied" and ack.affected == 4 and node_of(cache, hc[4]) is None
    assert state_for_cache(cache).pins.records == {}
    # in use (a request's lock) is never pruned, not even with force
    insert_kv(cache, alloc, pool, C)
    hc = hashes_of(cache, C)
    leaf = node_of(cache, hc[4])
    lock = cache.inc_lock_ref(leaf.id)
    ack = h.handle(env({"type": "Prune", "after_block_hash": hc[0], "force": True}))
    assert ack.affected == 0 and ack.skipped == 4 and node_of(cache, hc[4]) is not None
    cache.dec_lock_ref(leaf.id, lock.to_dec_params())
    assert h.handle(env({"type": "Prune", "after_block_hash": hc[0]})).affected == 4


def test_prune_unknown_anchor_is_noop_naming_it(core):
    cache, alloc, pool, h = setup()
    ack = h.handle(env({"type": "Prune", "after_block_hash": 42}))
    assert ack.status == "noop" and ack.missing == [42]


# ---- Think ------------------------------------------------------------------------------------
def test_think_transient_takes_back_the_write_through_copy_and_is_evicted_first_never_demoted():
    cache, alloc, pool, h = setup("write_through")
    insert_kv(cache, alloc, pool, A)
    insert_kv(cache, alloc, pool, [300 + i for i in range(8)])  # an ordinary, older-than-nothing prefix
    ha = hashes_of(cache, A)
    assert node_of(cache, ha[3]).backuped
    events(cache)
    ack = h.handle(env({"type": "Think", "block_hashes": ha[2:], "transient": True}))
    assert ack.status == "applied" and ack.tiers == {"CPU_PINNED": 2}
    assert [(k, m) for k, m, _ in events(cache)] == [("removed", "CPU_PINNED")] * 2
    n = node_of(cache, ha[3])
    assert n.kvctl_transient and not n.backuped
    # GPU pressure: the transient pages go first (the other prefix stays), and never to host
    cache.evict(EvictParams(num_tokens=4))
    ev = events(cache)
    assert node_of(cache, ha[3]) is None
    assert ("stored", "CPU_PINNED") not in [(k, m) for k, m, _ in ev]
    assert {x for k, m, x in ev if k == "removed" and m == "GPU"} == set(ha[2:])
    assert umatch(cache, [300 + i for i in range(8)]).device_prefix_len == 8
    # inspect shows the flag on the rest
    cache.sanity_check()


def test_think_transient_under_write_back_is_deleted_not_backed_up():
    cache, alloc, pool, h = setup("write_back")
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    h.handle(env({"type": "Think", "block_hashes": ha, "transient": True}))
    events(cache)
    cache.evict(EvictParams(num_tokens=10_000))
    ev = events(cache)
    assert all(not (k == "stored" and m == "CPU_PINNED") for k, m, _ in ev)
    assert umatch(cache, A).host_hit_length == 0 and node_of(cache, ha[0]) is None


def test_think_transient_blocks_are_never_written_to_storage(monkeypatch):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    h.handle(env({"type": "Think", "block_hashes": ha, "transient": True}))
    calls = []
    monkeypatch.setattr(cache, "enable_storage", True)
    monkeypatch.setattr(cache.cache_controller, "write_storage", lambda *a, **k: calls.append(a) or 1,
                        raising=False)
    cache.write_backup_storage(node_of(cache, ha[0]).id)
    assert calls == []


def test_think_false_purges_blocks_and_descendants_now():
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, C)
    ha, hc = hashes_of(cache, A), hashes_of(cache, C)
    cache.evict(EvictParams(num_tokens=4))
    events(cache)
    ack = h.handle(env({"type": "Think", "block_hashes": [ha[2]], "transient": False}))
    assert ack.status == "applied" and ack.affected == 3
    assert node_of(cache, ha[1]) is not None and all(node_of(cache, x) is None for x in ha[2:] + hc[4:])
    removed = {x for k, _, x in events(cache) if k == "removed"}
    assert removed == set(ha[2:] + hc[4:])


# ---- Pause / leases -----------------------------------------------------------------------------
def test_pause_backs_up_frees_gpu_holds_host_and_load_back_restores_identical_data(core):
    cache, alloc, pool, h = setup("write_back")
    insert_kv(cache, alloc, pool, A)
    before = kv_of(pool, device_indices(cache, umatch(cache, A)))
    ha = hashes_of(cache, A)
    free0 = alloc.available_size()
    events(cache)
    ack = h.handle(env({"type": "Pause", "block_hashes": ha, "ttl_seconds": 60, "lease_id": "L1"}))
    assert ack.status == "applied" and ack.tiers == {"CPU_PINNED": 4}, ack
    assert ack.lease["lease_id"] == "L1" and isinstance(ack.lease["expires_at_ms"], int)
    assert alloc.available_size() == free0 + 16
    ev = events(cache)
    assert [(k, m) for k, m, _ in ev] == [("stored", "CPU_PINNED")] * 4 + [("removed", "GPU")] * 4
    cache.evict_host(10_000)                      # held: stays on host
    m = umatch(cache, A)
    assert m.device_prefix_len == 0 and m.host_hit_length == 16
    for l in range(pool.layer_num):
        pool.k_buffer[l].zero_()
        pool.v_buffer[l].zero_()
    load_back(cache, m.best_match_node)           # a request hitting paused blocks loads them
    after = kv_of(pool, device_indices(cache, umatch(cache, A)))
    for (k0, v0), (k1, v1) in zip(before, after):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    assert [(k, m) for k, m, _ in events(cache)] == [("stored", "GPU")] * 4
    cache.evict(EvictParams(num_tokens=10_000))
    cache.evict_host(10_000)
    assert umatch(cache, A).host_hit_length == 16  # the lease still protects them


def paused_under_l1():
    """A's four blocks inserted and paused under lease L1: the cache, handler and worker state."""
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    h.handle(env({"type": "Pause", "block_hashes": hashes_of(cache, A), "ttl_seconds": 60, "lease_id": "L1"}))
    return cache, h, state_for_cache(cache)


def test_renew_revoke_and_unknown_lease(core):
    cache, h, st = paused_under_l1()
    old = st.sessions.leases["L1"].expires_at
    ack = h.handle(env({"type": "RenewLease", "lease_id": "L1", "new_ttl_seconds": 3600}))
    assert ack.status == "applied" and st.sessions.leases["L1"].expires_at > old
    bad = h.handle(env({"type": "RenewLease", "lease_id": "nope", "new_ttl_seconds": 5}))
    assert bad.status == "rejected" and bad.reason.startswith("command.lease_id")
    events(cache)
    ack = h.handle(env({"type": "RevokeLease", "lease_id": "L1"}))
    assert ack.status == "applied" and ack.affected == 4 and ack.tiers == {"CPU_PINNED": 4}
    assert [(k, m) for k, m, _ in events(cache)] == [("removed", "CPU_PINNED")] * 4
    assert umatch(cache, A).host_hit_length == 0 and "L1" not in st.sessions.leases
    assert h.handle(env({"type": "RevokeLease", "lease_id": "L1"})).status == "rejected"
    assert h.metrics["rejected_by_field"]["command.lease_id"] == 2


def test_revoke_without_purge_releases_the_hold_and_keeps_the_blocks(core):
    cache, h, st = paused_under_l1()
    events(cache)
    ack = h.handle(env({"type": "RevokeLease", "lease_id": "L1", "purge": False}))
    assert ack.status == "applied" and ack.affected == 4 and ack.tiers == {"CPU_PINNED": 4}
    assert events(cache) == []                      # nothing removed
    assert "L1" not in st.sessions.leases
    assert umatch(cache, A).host_hit_length == 16   # still served from host
    cache.evict_host(10_000)                        # and now the cache's own eviction may take them
    assert umatch(cache, A).host_hit_length == 0
    assert h.handle(env({"type": "RevokeLease", "lease_id": "L1", "purge": False})).status == "rejected"


def test_lease_expires_by_the_scheduler_tick_with_no_caller(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    st = state_for_cache(cache)
    now = [1000.0]
    st.sessions.clock = lambda: now[0]
    h.handle(env({"type": "Pause", "block_hashes": ha, "ttl_seconds": 5, "lease_id": "L1"}))

    class Sched:
        tree_cache = cache
        waiting_queue = []

    scheduler_side.on_scheduler_tick(Sched())
    assert "L1" in st.sessions.leases
    now[0] += 6
    scheduler_side.on_scheduler_tick(Sched())
    assert "L1" not in st.sessions.leases and st.pins.records == {}
    cache.evict_host(10_000)
    assert umatch(cache, A).host_hit_length == 0   # released: ordinary cache again
    assert st.sessions.metrics["leases_expired"] == 1


# ---- Inspect --------------------------------------------------------------------------------------
def test_inspect_residency_pins_transient_lease_pool_and_filters():
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, C)
    hc = hashes_of(cache, C)
    h.handle(env({"type": "Pause", "block_hashes": hc[:2], "ttl_seconds": None, "lease_id": "L9"}))
    insert_kv(cache, alloc, pool, [800, 801, 802, 803])
    ht = hashes_of(cache, [800, 801, 802, 803])
    h.handle(env({"type": "Think", "block_hashes": ht, "transient": True}))
    h.handle(env({"type": "Cache", "block_hashes": [hc[0]], "pin": True}))
    ack = h.handle(env({"type": "Inspect", "lease_id": "L9"}))
    assert ack.status == "applied" and ack.affected == 0 and ack.lease == {"lease_id": "L9", "expires_at_ms": None}
    blocks = {b["block_hash"]: b for b in ack.detail["blocks"]}
    assert set(blocks) == set(hc[:2]) and blocks[hc[0]]["lease"] == "L9" and blocks[hc[0]]["pin_count"] == 1
    ack = h.handle(env({"type": "Inspect", "block_hashes": [ht[0], 5]}))
    assert ack.detail["blocks"][0]["transient"] is True and ack.missing == [5]
    pool_ = ack.detail["pool"]
    # The process names itself, the same on every Inspect (a router sees a restart as a change).
    assert isinstance(ack.detail["incarnation"], str) and ack.detail["incarnation"] == h.handle(env({"type": "Inspect"})).detail["incarnation"]
    assert pool_["host"]["size"] > 0 and pool_["device"]["size"] > 0 and pool_["leases"] == 1
    assert pool_["commands"]["by_status"]["applied"] >= 4


# ---- dedupe, rejections, fuzz ---------------------------------------------------------------------
def test_duplicate_id_is_not_applied_again_and_repeats_the_first_outcome(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    body = {"version": 1, "id": "dup-1", "issued_at_ms": 1, "command": {"type": "Cache", "block_hashes": ha + [7], "pin": True}}
    first = h.handle(body)
    again = h.handle(body)
    assert first.status == "partial" and again.status == "duplicate"
    assert again.reason == "duplicate of dup-1; first outcome: partial" + (f" ({first.reason})" if first.reason else "")
    assert (again.affected, again.missing, again.tiers, again.id) == (first.affected, first.missing, first.tiers, "dup-1")
    assert state_for_cache(cache).pins.pin_count_of_hash(ha[0]) == 1
    # bare commands have no id: never deduplicated
    bare = {"type": "Cache", "block_hashes": ha, "pin": True}
    h.handle(bare)
    h.handle(bare)
    assert state_for_cache(cache).pins.pin_count_of_hash(ha[0]) == 3


def test_dedupe_window_bounds():
    from sglang.srt.kvctl.handlers import Dedupe

    now = [0.0]
    d = Dedupe(window_s=600, max_ids=3, clock=lambda: now[0])
    for i in range(5):
        d.put(str(i), {"i": i})
    assert d.get("0") is None and d.get("4") == {"i": 4}
    now[0] = 601
    assert d.get("4") is None


@pytest.mark.parametrize("cmd,field", [
    ({"type": "Pause", "block_hashes": [1], "ttl_seconds": 0, "lease_id": "L"}, "command.ttl_seconds"),
    ({"type": "Pause", "block_hashes": [1], "ttl_seconds": 10**9, "lease_id": "L"}, "command.ttl_seconds"),
    ({"type": "Pause", "block_hashes": [1], "lease_id": "L"}, "command.ttl_seconds"),
    ({"type": "RenewLease", "lease_id": "L", "new_ttl_seconds": 0}, "command.new_ttl_seconds"),
    ({"type": "Cache", "block_hashes": [1], "pin": True, "ttl_seconds": 30 * 86400 + 1}, "command.ttl_seconds"),
    ({"type": "Cache", "block_hashes": [1], "pin": True, "ttl_second": 5}, "command.ttl_second"),
    ({"type": "Prune", "after_block_hash": 2**64}, "command.after_block_hash"),
    ({"type": "Think", "block_hashes": [1]}, "command.transient"),
    ({"type": "ToolEnd", "session_id": "s", "epoch": -1}, "command.epoch"),
    ({"type": "ToolStart", "session_id": "has space", "block_hashes": []}, "command.session_id"),
    ({"type": "Warm", "block_keys": ["XYZ"], "target_tier": "GPU"}, "command.block_keys[0]"),
    ({"type": "Warm", "block_keys": [], "target_tier": "DISK"}, "command.target_tier"),
    ({"type": "Warm", "block_keys": [], "token_ids": [-1], "target_tier": "GPU"}, "command.token_ids[0]"),
])
def test_bad_input_rejected_naming_the_field_state_unchanged_and_counted(cmd, field, core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    before = (len(state_for_cache(cache).index), alloc.available_size())
    ack = h.handle({"version": 1, "id": "bad-1", "issued_at_ms": 1, "command": cmd})
    assert ack.status == "rejected" and ack.reason.startswith(field + ":"), ack.reason
    assert ack.id == "bad-1" and ack.type == cmd["type"]
    assert (len(state_for_cache(cache).index), alloc.available_size()) == before
    assert h.metrics["rejected_by_field"] == {field: 1} and h.metrics["by_status"] == {"rejected": 1}


def test_envelope_unknown_field_and_bad_id(core):
    h = CommandHandler(make_unified()[0])
    assert h.handle({"version": 1, "id": "a", "issued_at_ms": 1, "extra": 1, "command": {"type": "Inspect"}}).reason.startswith("extra:")
    assert h.handle({"version": 1, "id": "a b", "issued_at_ms": 1, "command": {"type": "Inspect"}}).reason.startswith("id:")
    assert h.handle({"version": 1, "id": "ok", "issued_at_ms": 1}).reason.startswith("command:")


from hypothesis import HealthCheck, given, settings, strategies as st_

_json = st_.recursive(
    st_.none() | st_.booleans() | st_.integers(min_value=-(2**70), max_value=2**70) | st_.floats() | st_.text(max_size=8),
    lambda ch: st_.lists(ch, max_size=4) | st_.dictionaries(st_.sampled_from(
        ["type", "version", "id", "command", "block_hashes", "pin", "ttl_seconds", "lease_id", "epoch",
         "session_id", "block_keys", "token_ids", "target_tier", "after_block_hash", "force", "transient",
         "new_ttl_seconds", "x"]) | st_.text(max_size=4), ch, max_size=6),
    max_leaves=20)
_types = st_.sampled_from(["Cache", "Prune", "Think", "Pause", "RenewLease", "RevokeLease", "Warm",
                           "ToolStart", "ToolEnd", "Inspect", "Nope"])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=st_.binary(max_size=64) | st_.text(max_size=64).map(str.encode), obj=_json, t=_types, env_=st_.booleans())
def test_fuzz_decoder_never_raises_only_rejects(raw, obj, t, env_):
    import json

    from sglang.srt.kvctl.codec import CommandError, decode

    bodies = [raw]
    if isinstance(obj, dict):
        cmd = dict(obj, type=t)
        bodies.append(json.dumps({"version": 1, "id": "f", "issued_at_ms": 1, "command": cmd} if env_ else cmd, default=str))
        bodies.append(cmd)
    bodies.append(json.dumps(obj, default=str) if not isinstance(obj, float) else b"1e999")
    for b in bodies:
        try:
            decode(b)
        except CommandError:
            pass
    h = _FUZZ_HANDLER
    for b in bodies:
        ack = h.handle(b)
        assert ack.status in ("rejected", "applied", "noop", "partial", "duplicate", "error")
        assert ack.status != "error", ack.reason


_FUZZ_HANDLER = CommandHandler(make_unified(hicache=False)[0])


# ---- KV events: our moves emit exactly what SGLang's own moves emit ---------------------------------
def test_events_match_sglangs_own_demote_host_eviction_and_load_back():
    from helpers import load_back

    ours, a1, p1, h = setup()
    theirs, a2, p2 = make_unified()
    for c, a, p in ((ours, a1, p1), (theirs, a2, p2)):
        insert_kv(c, a, p, A)
    assert events(ours) == events(theirs)
    ha = hashes_of(ours, A)
    # demote: Pause vs SGLang's GPU eviction
    h.handle(env({"type": "Pause", "block_hashes": ha, "ttl_seconds": 60, "lease_id": "L"}))
    theirs.evict(EvictParams(num_tokens=10_000))
    assert events(ours) == events(theirs) == [("removed", "GPU", x) for x in ha]
    # load-back: ToolStart+ToolEnd's restore vs SGLang's load_back of a request
    h.handle(env({"type": "ToolStart", "session_id": "s", "block_hashes": ha}))
    h.handle(env({"type": "ToolEnd", "session_id": "s", "epoch": 1}))
    load_back(theirs, umatch(theirs, A).best_match_node)
    assert events(ours) == events(theirs) == [("stored", "GPU", x) for x in ha]
    # removal from every tier: RevokeLease vs SGLang's GPU + host eviction
    h.handle(env({"type": "RevokeLease", "lease_id": "L"}))
    theirs.evict(EvictParams(num_tokens=10_000))
    theirs.evict_host(10_000)
    assert events(ours) == events(theirs) == [("removed", "GPU", x) for x in ha] + [("removed", "CPU_PINNED", x) for x in ha]


def test_pause_also_writes_to_the_storage_backend_when_one_is_configured(tmp_path, core):
    import os

    from helpers import attach_file_storage, wait_storage_written

    cache, alloc, pool = make_unified(write_policy="write_back")
    attach_file_storage(cache, tmp_path)
    h = CommandHandler(cache)
    insert_kv(cache, alloc, pool, A)
    assert [f for f in os.listdir(tmp_path) if f.endswith(".bin")] == []   # write_back: nothing yet
    ack = h.handle(env({"type": "Pause", "block_hashes": hashes_of(cache, A), "ttl_seconds": 60, "lease_id": "L"}))
    assert ack.status == "applied"
    wait_storage_written(cache, tmp_path, 4)
    cache.detach_storage_backend()


def test_worker_id_from_one_place_and_the_scheduler_entry_point(monkeypatch):
    from sglang.srt.kvctl import identity

    cache, alloc, pool = make_unified()

    class Sched:
        tree_cache = cache
        waiting_queue = []

    s = Sched()
    monkeypatch.setenv("KVCTL_WORKER_ID", "from-env")
    monkeypatch.setattr(identity, "_worker_id", None)
    assert scheduler_side.handle_command(s, b'{"type":"Inspect"}').worker_id == "from-env"
    identity.set_worker_id("w7")
    try:
        ack = scheduler_side.handle_command(s, '{"version":1,"id":"e1","issued_at_ms":1,"command":{"type":"Inspect"}}')
        assert ack.worker_id == "w7" and ack.id == "e1" and ack.status == "applied"
        again = scheduler_side.handle_command(s, {"version": 1, "id": "e1", "issued_at_ms": 1, "command": {"type": "Inspect"}})
        assert again.status == "duplicate"   # one handler (and dedupe window) per scheduler
        scheduler_side.handle_command(s, b"not json")
        m = scheduler_side.metrics(s)["commands"]
        assert m["by_status"] == {"applied": 2, "duplicate": 1, "rejected": 1}
        assert m["rejected_by_field"] == {"body": 1}
    finally:
        identity.set_worker_id(None)


def test_think_transient_on_host_only_blocks_removes_them_from_host():
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    cache.evict(EvictParams(num_tokens=10_000))        # demoted: host only
    events(cache)
    ack = h.handle(env({"type": "Think", "block_hashes": ha[2:], "transient": True}))
    assert ack.status == "applied" and ack.tiers == {"CPU_PINNED": 2}
    assert [(k, m) for k, m, _ in events(cache)] == [("removed", "CPU_PINNED")] * 2
    assert umatch(cache, A).host_hit_length == 8


def test_pause_purges_transient_descendants_instead_of_writing_them_to_host():
    cache, alloc, pool, h = setup("write_back")
    insert_kv(cache, alloc, pool, C)
    hc = hashes_of(cache, C)
    h.handle(env({"type": "Think", "block_hashes": [hc[4]], "transient": True}))
    events(cache)
    ack = h.handle(env({"type": "Pause", "block_hashes": hc[:4], "ttl_seconds": 60, "lease_id": "L"}))
    assert ack.status == "applied" and ack.tiers == {"CPU_PINNED": 4}, ack
    ev = events(cache)
    assert ("removed", "GPU", hc[4]) in ev and ("stored", "CPU_PINNED", hc[4]) not in ev
    assert node_of(cache, hc[4]) is None and node_of(cache, hc[3]).evicted


def test_transient_marks_descendants_and_new_suffixes_are_never_written_through():
    cache, alloc, pool, h = setup("write_through")
    insert_kv(cache, alloc, pool, C)
    hc = hashes_of(cache, C)
    h.handle(env({"type": "Think", "block_hashes": [hc[2]], "transient": True}))
    assert node_of(cache, hc[4]).kvctl_transient and not node_of(cache, hc[4]).backuped
    assert not node_of(cache, hc[1]).kvctl_transient and node_of(cache, hc[1]).backuped
    events(cache)
    insert_kv(cache, alloc, pool, C + [40, 41, 42, 43])       # the answer after the reasoning
    n = node_of(cache, hashes_of(cache, C + [40, 41, 42, 43])[-1])
    assert n.kvctl_transient and not n.backuped
    assert all(m != "CPU_PINNED" for _, m, _ in events(cache))
    cache.sanity_check()


def test_think_transient_host_copy_held_by_an_inflight_backup_goes_on_a_later_tick():
    """A backup in flight (here: the host lock SGLang's storage write takes) keeps the host copy
    when Think(transient=true) arrives; the scheduler tick takes it back once the lock is gone."""
    cache, alloc, pool, h = setup("write_through")
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    n = node_of(cache, ha[0])
    assert n.backuped and node_of(cache, ha[3]) is n
    receipt = cache.inc_host_lock_ref(n.id).to_dec_params()
    events(cache)
    ack = h.handle(env({"type": "Think", "block_hashes": ha, "transient": True}))
    assert ack.status == "applied" and "in-flight backup" in ack.reason
    assert n.kvctl_transient and n.backuped

    class Sched:
        tree_cache = cache
        waiting_queue = []

    scheduler_side.on_scheduler_tick(Sched())
    assert n.backuped                       # still held: nothing forced
    cache.dec_host_lock_ref(n.id, receipt)
    scheduler_side.on_scheduler_tick(Sched())
    assert not n.backuped
    assert [(k, m) for k, m, _ in events(cache)] == [("removed", "CPU_PINNED")] * 4
    assert state_for_cache(cache).transient_host_pending == {}
    cache.sanity_check()


def test_revoke_purge_keeps_blocks_an_inflight_storage_write_holds_and_inspect_says_so(core, monkeypatch):
    """Pause starts SGLang's asynchronous storage write, which host-locks the path until it lands:
    a purging RevokeLease in that window keeps the host copy (partial, counted where it stays),
    and Inspect's ``in_flight`` is the signal a caller waits on; once the write lands the blocks
    can go."""
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    ops = []
    monkeypatch.setattr(cache, "enable_storage", True)
    monkeypatch.setattr(cache.cache_controller, "write_storage",
                        lambda *a, **k: ops.append(a) or len(ops), raising=False)
    idle = {"write_through": 0, "load_back": 0, "backup": 0, "prefetch": 0}
    assert h.handle(env({"type": "Inspect"})).detail["pool"]["in_flight"] == idle
    pause = {"type": "Pause", "block_hashes": ha, "ttl_seconds": 60, "lease_id": "L"}
    assert h.handle(env(pause)).status == "applied" and len(ops) == 1
    assert h.handle(env({"type": "Inspect"})).detail["pool"]["in_flight"] == {**idle, "backup": 1}
    ack = h.handle(env({"type": "RevokeLease", "lease_id": "L"}))
    assert (ack.status, ack.affected, ack.skipped) == ("partial", 0, 4)
    assert ack.detail["skipped_tiers"] == {"CPU_PINNED": 4}
    assert h.handle(env({"type": "Inspect", "block_hashes": ha})).tiers == {"CPU_PINNED": 4}

    def land():  # the writes land: what SGLang's drain of the storage acks does
        while cache.ongoing_backup:
            node_id, receipt = cache.ongoing_backup.pop(next(iter(cache.ongoing_backup)))
            cache.dec_host_lock_ref(node_id, receipt)

    land()
    assert h.handle(env({"type": "Inspect"})).detail["pool"]["in_flight"] == idle
    assert h.handle(env({**pause, "lease_id": "L2"})).status == "applied"
    land()
    ack = h.handle(env({"type": "RevokeLease", "lease_id": "L2"}))
    assert (ack.status, ack.affected) == ("applied", 4)
    assert h.handle(env({"type": "Inspect", "block_hashes": ha})).missing == ha
