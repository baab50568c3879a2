"""kvctl on both of SGLang 0.5.23's tree cores: which one a worker runs on and why, one command
corpus answered with the same ack bytes and the same KV events on both, and what the Rust core
refuses (naming the reason, changing nothing)."""
import itertools
import logging

import pytest

from helpers import chain_hashes, insert_kv, make_unified, umatch
from test_commands import A, B, C, events

from sglang.srt.kvctl import config, cores
from sglang.srt.kvctl.ack import encode_ack
from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.kvctl.hooks import state_for_cache
from sglang.srt.mem_cache.base_prefix_cache import EvictParams



def accepts(cmds):
    config.use(config.KvctlConfig(commands=frozenset(cmds)))


@pytest.fixture
def rust_commands():
    rust = sorted(set(config.KvctlConfig().commands) - set(cores.PYTHON_ONLY))
    accepts(rust)
    yield rust
    config.use(config.KvctlConfig())


def test_the_core_follows_the_commands_accepted(caplog, rust_commands):
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache import tree_core_registry as reg

    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None,
                             page_size=4)
    assert reg.resolve_tree_core_backend("rust", params) == "rust"
    cache, _alloc, _pool = make_unified(hicache=False, core="rust")
    assert type(cache.tree_core).__name__ == "RustUnifiedTreeCore"
    accepts([*rust_commands, "Think"])
    with caplog.at_level(logging.INFO, logger=reg.__name__):
        assert reg.resolve_tree_core_backend("rust", params) == "python"
    assert "Using the Python TreeCore: kvctl accepts Think, which need the Python TreeCore" in caplog.text
    assert "_should_backup_after_insert" in caplog.text
    # a cache that asks for the Rust core takes SGLang's own fallback all the same
    with pytest.raises(AssertionError, match="SGLang picked the python core"):
        make_unified(hicache=False, core="rust")
    config.use(None)  # kvctl off: SGLang's own choice
    assert reg.resolve_tree_core_backend("rust", params) == "rust"


def test_commands_setting_is_checked_naming_the_key():
    bad = [("[\"Cache\", \"Pin\"]", "unknown command type 'Pin'"), ("\"Cache\"", "must be a list"),
           ("[1]", "must be a list")]
    for value, why in bad:
        with pytest.raises(ValueError, match=why):
            config.from_server_args(type("A", (), {"kv_control_config": f'{{"commands": {value}}}'})())
    cfg = config.from_server_args(type("A", (), {"kv_control_config": '{"commands": ["Cache"]}'})())
    assert cfg.commands == frozenset({"Cache"})


def test_a_command_not_accepted_is_rejected_naming_the_type(rust_commands):
    cache, alloc, pool = make_unified(core="rust")
    h = CommandHandler(cache, worker_id="w0")
    insert_kv(cache, alloc, pool, A)
    ha = chain_hashes(A)
    for cmd in ({"type": "Think", "block_hashes": ha[2:], "transient": False},
                {"type": "Think", "block_hashes": ha[2:], "transient": True}):
        ack = h.handle(cmd)
        assert ack.status == "rejected" and ack.reason.startswith("command.type: "), ack
        assert cmd["type"] + " is not accepted by this worker" in ack.reason
    assert umatch(cache, A).device_prefix_len == 16
    assert h.metrics["rejected_by_field"] == {"command.type": 2}


def test_a_purge_removes_exactly_its_nodes_whatever_the_host_lru_would_pick(core):
    """RevokeLease(purge) and Prune take their own nodes off the host, on the Rust core too
    (every other host node host-locked meanwhile): the older host-only path the host LRU would
    evict first stays, and so does everything above the Prune's anchor."""
    cache, alloc, pool = make_unified()
    h = CommandHandler(cache, worker_id="w0")
    older, D = list(range(500, 516)), list(range(300, 312))
    for t in (older, A, D):
        insert_kv(cache, alloc, pool, t)
    cache.evict(EvictParams(num_tokens=10_000))  # every path host-only
    ha, hd = chain_hashes(A), chain_hashes(D)
    assert h.handle({"type": "Pause", "block_hashes": hd, "ttl_seconds": 60, "lease_id": "L"}).status == "applied"
    events(cache)
    ack = h.handle({"type": "RevokeLease", "lease_id": "L"})
    assert (ack.status, ack.affected, ack.tiers) == ("applied", 3, {"CPU_PINNED": 3}), ack
    assert sorted(events(cache)) == sorted(("removed", "CPU_PINNED", x) for x in hd)
    assert umatch(cache, older).host_hit_length == 16 and umatch(cache, A).host_hit_length == 16
    ack = h.handle({"type": "Prune", "after_block_hash": ha[0]})  # splits A's node after page 1
    assert (ack.status, ack.affected, ack.tiers) == ("applied", 3, {"CPU_PINNED": 3}), ack
    assert sorted(events(cache)) == sorted(("removed", "CPU_PINNED", x) for x in ha[1:])
    assert umatch(cache, older).host_hit_length == 16 and umatch(cache, A).host_hit_length == 4
    cache.sanity_check()


def test_prune_without_hicache_drops_the_device_leaves(core):
    cache, alloc, pool = make_unified(hicache=False)
    h = CommandHandler(cache, worker_id="w0")
    insert_kv(cache, alloc, pool, C)
    insert_kv(cache, alloc, pool, B)
    ha, hb, hc = chain_hashes(A), chain_hashes(B), chain_hashes(C)
    assert h.handle({"type": "Cache", "block_hashes": [hb[2]], "pin": True}).status == "applied"
    events(cache)
    ack = h.handle({"type": "Prune", "after_block_hash": ha[1]})
    assert (ack.status, ack.affected, ack.skipped, ack.tiers) == ("partial", 3, 1, {"GPU": 3}), ack
    assert sorted(events(cache)) == sorted(("removed", "GPU", x) for x in ha[2:] + hc[4:])
    assert umatch(cache, B).device_prefix_len == 12 and umatch(cache, C).device_prefix_len == 8
    cache.sanity_check()


# ---- one corpus, both cores ------------------------------------------------------------------
def _corpus(core):
    """Requests and commands on one cache: what every Rust-capable command says, and the KV
    events SGLang publishes meanwhile."""
    cache, alloc, pool = make_unified(core=core, size=128)
    h = CommandHandler(cache, worker_id="w0")
    state_for_cache(cache).sessions.wall_ms = lambda: 1_700_000_000_000  # acks carry the wall clock
    ids = itertools.count()
    out = []

    def send(cmd, envelope=False):
        body = {"version": 1, "id": f"c-{next(ids)}", "issued_at_ms": 1, "command": cmd} if envelope else cmd
        d = h.handle(body).to_dict()
        d["elapsed_us"] = 0
        if "tree_core" in d.get("detail", {}):
            d["detail"]["tree_core"] = "either"  # Inspect names the core: the one field that differs
        out.append(encode_ack(d))
        out.append(repr(events(cache)).encode())

    ha, hb, hc = chain_hashes(A), chain_hashes(B), chain_hashes(C)
    insert_kv(cache, alloc, pool, A)
    insert_kv(cache, alloc, pool, B)
    insert_kv(cache, alloc, pool, C)
    send({"type": "Inspect", "block_hashes": ha + hb + hc})
    send({"type": "Cache", "block_hashes": ha, "pin": True, "ttl_seconds": 60}, envelope=True)
    send({"type": "Cache", "block_hashes": [123456789, ha[0]], "pin": True})
    cache.evict(EvictParams(num_tokens=64))
    send({"type": "Inspect", "block_hashes": ha + hb + hc})
    send({"type": "Pause", "block_hashes": hb, "ttl_seconds": 30, "lease_id": "L1"})
    send({"type": "RenewLease", "lease_id": "L1", "new_ttl_seconds": 90})
    send({"type": "Inspect", "block_hashes": [], "lease_id": "L1"})
    send({"type": "ToolStart", "session_id": "s1", "block_hashes": hc})
    send({"type": "ToolEnd", "session_id": "s1", "epoch": 2})
    send({"type": "Prefetch", "block_hashes": [], "session_id": "s1", "deadline_ms": 5000})
    send({"type": "ToolEnd", "session_id": "s1", "epoch": 1})
    send({"type": "RevokeLease", "lease_id": "L1", "purge": False})
    send({"type": "Prune", "after_block_hash": hb[1]})  # B's own page goes, A's pinned tail stays
    send({"type": "Pause", "block_hashes": hc, "ttl_seconds": 30, "lease_id": "L2"})
    send({"type": "Prune", "after_block_hash": ha[0]})  # held and pinned: skipped
    send({"type": "RevokeLease", "lease_id": "L2"})  # purge: C's own page goes
    for i in range(12):  # fresh requests cycle both tiers
        need = 32 - alloc.available_size()
        if need > 0:
            cache.evict(EvictParams(num_tokens=need))
        insert_kv(cache, alloc, pool, list(range(1000 + 40 * i, 1000 + 40 * i + 32)))
        out.append(repr(events(cache)).encode())
    hf = chain_hashes(list(range(1440, 1472)))  # the last fresh request's eight pages
    send({"type": "Pause", "block_hashes": hf[:6], "ttl_seconds": 30, "lease_id": "L3"})
    send({"type": "Prune", "after_block_hash": hf[3], "force": True})  # held: force lets go
    send({"type": "RevokeLease", "lease_id": "L3"})  # purge: pages 1-4 leave every tier
    send({"type": "Inspect", "block_hashes": ha + hb + hc})
    send({"type": "Cache", "block_hashes": hb + hc, "pin": True})  # evicted from every tier
    send({"type": "Cache", "block_hashes": ha, "pin": False}, envelope=True)
    send({"type": "Cache", "block_hashes": ha, "pin": False})
    send({"type": "Prefetch", "block_hashes": [ha[0]], "deadline_ms": 5000})
    out.append(encode_ack(h.flush().to_dict() | {"elapsed_us": 0}))
    send({"type": "Inspect", "block_hashes": ha})
    cache.sanity_check()
    return out


def test_one_corpus_gives_the_same_ack_bytes_and_events_on_both_cores(rust_commands):
    py = _corpus("python")
    rs = _corpus("rust")
    assert len(py) == len(rs)
    for i, (a, b) in enumerate(zip(py, rs)):
        assert a == b, f"step {i}:\npython {a[:600]}\nrust   {b[:600]}"


def test_rust_core_lookups_of_host_only_blocks_refresh_no_lru(rust_commands, monkeypatch):
    """A block SGLang demoted is found again through the node its eviction step named (patch
    0008), never with the core's match_prefix (which refreshes recency, as a request would)."""
    cache, alloc, pool = make_unified(core="rust")
    h = CommandHandler(cache, worker_id="w0")
    insert_kv(cache, alloc, pool, A)
    insert_kv(cache, alloc, pool, B)
    cache.evict(EvictParams(num_tokens=cache.evictable_size()))  # everything to host
    ha, hb = chain_hashes(A), chain_hashes(B)
    assert umatch(cache, A).device_prefix_len == 0
    calls = []
    real = cache.tree_core.match_prefix
    monkeypatch.setattr(cache.tree_core, "match_prefix", lambda p: calls.append(p) or real(p))
    ins = h.handle({"type": "Inspect", "block_hashes": ha + hb})
    assert ins.tiers == {"CPU_PINNED": 7} and ins.missing == []
    assert h.handle({"type": "Cache", "block_hashes": hb, "pin": True}).status == "applied"
    assert h.handle({"type": "Pause", "block_hashes": ha, "ttl_seconds": 60, "lease_id": "L"}).status == "applied"
    assert h.handle({"type": "Prefetch", "block_hashes": hb, "deadline_ms": 5000}).status == "applied"
    assert calls == []
    assert umatch(cache, B).device_prefix_len == 12


# ---- SGLang's own policies with kvctl on ------------------------------------------------------
def _priority_run(kvctl_on: bool):
    """Three conversations at priorities 0, 5 and 10 on a priority-evicting cache; the lowest
    priority's blocks are pinned when kvctl is on. Returns the removals, in order."""
    cache, alloc, pool = make_unified(hicache=False, size=64, eviction_policy="priority")
    seqs = {p: list(range(100 * (p + 1), 100 * (p + 1) + 16)) for p in (0, 5, 10)}
    for p in (10, 0, 5):
        insert_kv(cache, alloc, pool, seqs[p], priority=p)
    events(cache)
    if kvctl_on:
        ack = CommandHandler(cache).handle({"type": "Cache", "block_hashes": chain_hashes(seqs[0]), "pin": True})
        assert ack.status == "applied"
    cache.evict(EvictParams(num_tokens=16))
    return [x for k, _, x in events(cache) if k == "removed"], seqs


def test_priority_eviction_keeps_its_order_with_kvctl_on_and_pins_outrank_it(core):
    removed, seqs = _priority_run(kvctl_on=True)
    assert removed == chain_hashes(seqs[5])  # priority 0 is pinned: the next lowest goes
    config.use(None)  # kvctl off: the same core (make_unified asserts it), the order alone
    off, _ = _priority_run(kvctl_on=False)
    assert off == chain_hashes(seqs[0])


def test_session_radix_cache_keeps_sglangs_python_core_with_kvctl_on(caplog, rust_commands):
    """SGLang's session radix cache runs on its Python core only (its Rust adapter refuses it);
    kvctl accepting the Rust core's commands follows SGLang's own choice and works there."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache import tree_core_registry as reg

    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None,
                             page_size=4, enable_session_radix_cache=True)
    with caplog.at_level(logging.INFO, logger=reg.__name__):
        assert reg.resolve_tree_core_backend("rust", params) == "python"
    assert "Using the Python TreeCore: session-aware caching requires the Python TreeCore" in caplog.text
    cache, alloc, pool = make_unified(core="python", sessions=True)
    cache.open_radix_session("s1")
    insert_kv(cache, alloc, pool, A)
    h = CommandHandler(cache, worker_id="w0")
    assert h.handle({"type": "Cache", "block_hashes": chain_hashes(A), "pin": True}).status == "applied"
    cache.release_radix_session("s1")
    cache.evict(EvictParams(num_tokens=10_000))
    cache.evict_host(10_000)
    assert umatch(cache, A).host_hit_length == 16  # the pin outlives the session's close
