"""Warm through SGLang's own `file` HiCache storage backend (real files on disk, no GPU)."""
import pytest
import torch

from helpers import (attach_file_storage, device_indices, insert_kv, kv_of, make_unified, umatch,
                     wait_storage_written)
from test_commands import A, env, events, hashes_of

from sglang.srt.kvctl.handlers import CommandHandler
from sglang.srt.mem_cache.base_prefix_cache import EvictParams


def storage_keys(tokens, page_size=4):
    """The storage keys of a token path: SGLang's own chain (what the `file` backend names)."""
    from array import array

    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    return list(get_storage_hash_str(RadixKey(array("q", tokens)), None, page_size=page_size))


def drop_from_gpu_and_host(cache):
    """SGLang's own evictions, of everything (the storage files stay)."""
    cache.evict(EvictParams(num_tokens=10_000))
    cache.evict_host(10_000)


@pytest.fixture
def warm_bed(tmp_path, core):
    cache, alloc, pool = make_unified(write_policy="write_through")
    attach_file_storage(cache, tmp_path)
    insert_kv(cache, alloc, pool, A)
    wait_storage_written(cache, tmp_path, 4)
    keys = storage_keys(A)
    before = kv_of(pool, device_indices(cache, umatch(cache, A)))
    h = CommandHandler(cache, worker_id="w0")
    ha = hashes_of(cache, A)
    drop_from_gpu_and_host(cache)
    assert umatch(cache, A).host_hit_length == 0 and umatch(cache, A).device_prefix_len == 0
    events(cache)
    yield cache, alloc, pool, h, keys, before, ha
    cache.detach_storage_backend()


def test_warm_fetches_from_storage_into_host_then_gpu_with_identical_kv_and_events(warm_bed):
    cache, alloc, pool, h, keys, before, ha = warm_bed
    assert len(keys) == 4 and all(len(k) == 64 for k in keys)
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "token_ids": A, "target_tier": "CPU_TIER1"}))
    assert ack.status == "applied" and ack.affected == 4 and ack.tiers == {"CPU_PINNED": 4}, ack
    ev = events(cache)
    assert [(k, m) for k, m, _ in ev] == [("stored", "CPU_PINNED")] * 4
    assert [x for _, _, x in ev] == ha            # the same block hashes as the original insert
    m = umatch(cache, A)
    assert m.host_hit_length == 16 and m.device_prefix_len == 0
    for l in range(pool.layer_num):
        pool.k_buffer[l].zero_()
        pool.v_buffer[l].zero_()
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "token_ids": A, "target_tier": "GPU"}))
    assert ack.status == "noop" and ack.skipped == 4       # already on host: nothing fetched
    drop_from_gpu_and_host(cache)
    events(cache)
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "token_ids": A, "target_tier": "GPU"}))
    assert ack.status == "applied" and ack.tiers == {"CPU_PINNED": 4, "GPU": 4}, ack
    assert [(k, m) for k, m, _ in events(cache)] == [("stored", "CPU_PINNED")] * 4 + [("stored", "GPU")] * 4
    after = kv_of(pool, device_indices(cache, umatch(cache, A)))
    for (k0, v0), (k1, v1) in zip(before, after):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    cache.sanity_check()


def test_warm_reports_missing_pages(warm_bed, tmp_path):
    cache, alloc, pool, h, keys, before, ha = warm_bed
    import os

    victim = [f for f in os.listdir(tmp_path) if f.startswith(keys[2])][0]
    os.remove(tmp_path / victim)
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "token_ids": A, "target_tier": "CPU_TIER1"}))
    assert ack.status == "partial" and ack.affected == 2 and ack.detail["missing_keys"] == keys[2:]
    assert len(ack.missing) == 2 and umatch(cache, A).host_hit_length == 8


def test_warm_keys_not_matching_tokens_rejected_state_unchanged(warm_bed):
    cache, alloc, pool, h, keys, before, ha = warm_bed
    host0 = cache.cache_controller.mem_pool_host.available_size()
    bad = A[:15] + [9999]
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "token_ids": bad, "target_tier": "GPU"}))
    assert ack.status == "rejected" and ack.reason.startswith("command.block_keys[3]: does not match")
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "token_ids": A[:12], "target_tier": "GPU"}))
    assert ack.status == "rejected" and ack.reason.startswith("command.token_ids")
    assert umatch(cache, A).host_hit_length == 0 and events(cache) == []
    assert cache.cache_controller.mem_pool_host.available_size() == host0
    assert h.metrics["rejected_by_field"] == {"command.block_keys[3]": 1, "command.token_ids": 1}


def test_warm_without_tokens_rejected_unless_keys_known(warm_bed):
    cache, alloc, pool, h, keys, before, ha = warm_bed
    ack = h.handle(env({"type": "Warm", "block_keys": keys, "target_tier": "CPU_TIER1"}))
    assert ack.status == "rejected" and ack.reason.startswith("command.token_ids: missing")
    # known keys (the first two pages are back in the tree): tokens come from the tree
    h.handle(env({"type": "Warm", "block_keys": keys[:2], "token_ids": A[:8], "target_tier": "CPU_TIER1"}))
    ack = h.handle(env({"type": "Warm", "block_keys": keys[:2], "target_tier": "GPU"}))
    assert ack.status == "noop" and ack.skipped == 2, ack


def test_warm_without_storage_backend_is_rejected(core):
    cache, alloc, pool = make_unified()
    ack = CommandHandler(cache).handle(env({"type": "Warm", "block_keys": ["0" * 64], "target_tier": "GPU"}))
    assert ack.status == "rejected" and "storage backend" in ack.reason
