"""PinManager's owner index: releasing a hold (a lease, a tool offload) visits the owner's own
hashes, yet leaves the records, the protections and the returned order exactly as a scan of every
record would. Real cache (UnifiedRadixCache + HiCache over CPU pools), real command handler."""
from helpers import insert_kv
from test_commands import A, B, C, env, hashes_of, setup

from sglang.srt.kvctl.hooks import state_for_cache


def scanned_owners(pins):
    """owner -> its hashes in ``records`` order: what a scan of every record finds."""
    out = {}
    for h, recs in pins.records.items():
        for p in recs:
            if p.owner is not None:
                out.setdefault(p.owner, []).append(h)
    return out


def check(pins):
    assert all(pins.records.values()), "an empty record list is left behind"
    assert {o: set(hs) for o, hs in pins._owned.items()} == {
        o: set(hs) for o, hs in scanned_owners(pins).items()
    }
    assert set(pins._born) == set(pins.records)
    assert pins.pinned_tokens() == pins.index.page_size * sum(1 for r in pins.records.values() if r)


def test_owner_index_matches_a_scan_through_holds_pins_and_releases(core):
    cache, alloc, pool, h = setup()
    for toks in (C, B):
        insert_kv(cache, alloc, pool, toks)
    hc, hb = hashes_of(cache, C), hashes_of(cache, B)
    pins = state_for_cache(cache).pins
    steps = [
        {"type": "Cache", "pin": True, "block_hashes": hb[2:]},
        {"type": "ToolStart", "session_id": "s1", "block_hashes": hc},
        {"type": "Pause", "block_hashes": hb, "ttl_seconds": 60, "lease_id": "L1"},
        {"type": "ToolStart", "session_id": "s2", "block_hashes": hc[:2] + hb[2:]},
        {"type": "Cache", "pin": True, "block_hashes": hc[:3]},
    ]
    for cmd in steps:
        assert h.handle(env(cmd)).status in ("applied", "noop", "partial"), cmd
        check(pins)
    # s1 holds C's five pages; the order it releases them in is the order records holds them
    expected = scanned_owners(pins)["tool:s1"]
    assert expected == [x for x in pins.records if x in set(hc)]
    assert pins.release_owner("tool:s1") == expected
    check(pins)
    assert pins.release_owner("tool:s1") == []  # nothing left to release: a no-op
    ack = h.handle(env({"type": "ToolEnd", "session_id": "s2", "epoch": 1}))
    assert ack.status in ("applied", "partial") and ack.affected > 0, ack
    check(pins)
    assert set(pins._owned) == {"lease:L1"}
    # Prune with force drops every owner's records on what it removes
    ack = h.handle(env({"type": "Prune", "after_block_hash": hb[1], "force": True}))
    assert ack.affected > 0, ack
    check(pins)
    assert h.handle(env({"type": "RevokeLease", "lease_id": "L1", "purge": False})).affected > 0
    check(pins)
    assert not pins._owned and all(p.owner is None for r in pins.records.values() for p in r)
    left = list(pins.records)
    assert left and h.handle(env({"type": "Cache", "pin": False, "block_hashes": left})).affected == len(left)
    check(pins)
    assert pins.records == {} and pins._born == {}


def test_a_hash_listed_twice_in_one_hold_takes_one_record(core):
    cache, alloc, pool, h = setup()
    insert_kv(cache, alloc, pool, A)
    ha = hashes_of(cache, A)
    ack = h.handle(env({"type": "ToolStart", "session_id": "s1", "block_hashes": ha + ha[:2]}))
    assert ack.affected == 6 and ack.status == "applied", ack
    pins = state_for_cache(cache).pins
    assert [len(pins.records[x]) for x in ha] == [1, 1, 1, 1]
    check(pins)
