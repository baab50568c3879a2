"""BlockHashIndex on SGLang's real RadixCache (patched): keyed by the published event hashes."""
from helpers import insert, make_radix, stored_hashes

from sglang.srt.kvctl.hooks import state_of


def _indexed(cache):
    st = state_of(cache)
    return {h for h, _ in st.index.items() if st.index.get(h, cache.root_node) is not None}


def test_index_equals_published_hashes_through_insert_and_split():
    c, a = make_radix(page_size=4)
    insert(c, a, list(range(1, 17)))
    insert(c, a, list(range(1, 9)) + [100, 101, 102, 103])  # splits the first node at 8
    hs = stored_hashes(c)
    assert _indexed(c) == set(hs) and len(hs) == 5
    # every page hash points at the node that holds that page
    st = state_of(c)
    for h, node in st.index.items():
        assert h in node.kvctl_hashes
        assert len(node.kvctl_hashes) == len(node.key) // 4


def test_index_follows_eviction_and_reset():
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    c, a = make_radix(page_size=4)
    insert(c, a, list(range(1, 17)))
    insert(c, a, list(range(1, 9)) + [100, 101, 102, 103])
    hs = stored_hashes(c)
    c.evict(EvictParams(num_tokens=4))  # one leaf page group
    removed = [h for ev in c.take_events() for h in getattr(ev, "block_hashes", [])]
    assert removed and _indexed(c) == set(hs) - set(removed)
    c.reset()
    assert len(state_of(c).index) == 0


def test_namespaced_event_hash_for_cache_salt():
    c, a = make_radix(page_size=4)
    insert(c, a, list(range(1, 13)), cache_salt="tenant-a")
    insert(c, a, list(range(1, 13)))
    hs = stored_hashes(c)
    assert len(hs) == 6 and len(set(hs)) == 6  # salted and plain pages differ
    assert _indexed(c) == set(hs)


def test_index_without_kv_events_still_matches_the_hash_events_would_publish():
    c1, a1 = make_radix(page_size=4, events=True)
    c2, a2 = make_radix(page_size=4, events=False)
    for c, a in ((c1, a1), (c2, a2)):
        insert(c, a, list(range(1, 17)))
        insert(c, a, list(range(1, 9)) + [7, 7, 7, 7])
    assert _indexed(c2) == set(stored_hashes(c1))


def test_lookup_sharing_walks_finds_what_one_walk_per_hash_finds():
    """A lookup remembers the nodes it found reachable (the tree does not change during it): the
    same found and missing hashes as a walk to the root per hash, unreachable nodes included."""
    c, a = make_radix(page_size=4)
    insert(c, a, list(range(1, 33)))
    insert(c, a, list(range(1, 17)) + [100, 101, 102, 103, 104, 105, 106, 107])
    insert(c, a, list(range(1, 9)) + [200, 201, 202, 203])
    st = state_of(c)
    hs = stored_hashes(c)
    # Detach a leaf as a tree delete does, leaving its index entries behind (their flags lie).
    leaf = st.index.get(hs[-1], c.root_node)
    assert leaf is not None and leaf.parent is not None
    parent = leaf.parent
    key = next(k for k, v in parent.children.items() if v is leaf)
    del parent.children[key]
    order = list(reversed(hs)) + hs  # a reachable node seen before and after its ancestors
    expected_found = [h for h in order if st.index.reachable(st.index._map[h], c.root_node)]
    found, missing = st.index.lookup(order, c.root_node)
    assert [h for h, _ in found] == expected_found
    assert set(missing) == set(leaf.kvctl_hashes) and missing
    assert all(n is st.index._map[h] for h, n in found)
