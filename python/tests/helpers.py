"""Small builders shared by the tests: a real plain RadixCache over a real CPU allocator."""
from __future__ import annotations

from array import array

import torch


def make_radix(page_size: int = 4, size: int = 256, events: bool = True):
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.radix_cache import RadixCache

    pool = MHATokenToKVPool(size=size, page_size=page_size, dtype=torch.float32, head_num=1,
                            head_dim=4, layer_num=1, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=size, dtype=torch.float32, device="cpu", kvcache=pool,
                                   need_sort=False)
    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc,
                             page_size=page_size, enable_kv_cache_events=events)
    return RadixCache(params), alloc


def insert(cache, alloc, tokens, extra_key=None, cache_salt=None):
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    key = RadixKey(array("q", tokens), extra_key=extra_key, cache_salt=cache_salt)
    value = alloc.alloc(len(tokens))
    assert value is not None, "allocator out of space"
    res = cache.insert(InsertParams(key=key, value=value))
    # insert() does not free the duplicate prefix indices: the scheduler does; mimic it
    dup = getattr(res, "prefix_len", None)
    if dup:
        alloc.free(value[:dup])
    return res


def match(cache, tokens):
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))


def stored_hashes(cache):
    """Block hashes of the BlockStored events, in order (what the router sees)."""
    from sglang.srt.disaggregation.kv_events import BlockStored

    out = []
    for ev in cache.take_events():
        if isinstance(ev, BlockStored):
            out.extend(ev.block_hashes)
    return out
