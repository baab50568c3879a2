"""A seeded request workload over SGLang's real cache, shared by ``npm run bench:worker`` and the
"off = pristine" test: requests share a few long prefixes (system prompts, agent transcripts) and
add random suffixes; each one is matched, its KV allocated (evicting when the pool is full) and
inserted, as the scheduler does. Runs on whichever SGLang is importable (pristine or patched), so
the two can be compared from separate processes.

    python workload.py --requests 300 --seed 1 [--core rust|python|auto] [--kvctl on|off]

prints one JSON object: the tree core class, every KV event, every match length and the timing.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from array import array
from typing import Any, List


def build_cache(core: str, page_size: int, pool_tokens: int):
    """A UnifiedRadixCache (FULL component, events on) over a CPU pool; ``core``: "auto" lets
    SGLang choose (Rust unless something needs Python), "rust"/"python" ask for one."""
    import torch

    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    r2t = ReqToTokenPool(size=8, max_context_len=pool_tokens, device="cpu", enable_memory_saver=False)
    pool = MHATokenToKVPool(size=pool_tokens, page_size=page_size, dtype=torch.float32, head_num=1, head_dim=4,
                            layer_num=1, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=pool_tokens, dtype=torch.float32, device="cpu", kvcache=pool, need_sort=False)
    kw = {} if core == "auto" else {"tree_core_backend": core}
    params = CacheInitParams(req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=page_size,
                             disable=False, tree_components=(ComponentType.FULL,), enable_kv_cache_events=True, **kw)
    return UnifiedRadixCache(params=params), alloc


def requests(seed: int, n: int, page_size: int) -> List[List[int]]:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 30000) for _ in range(rng.randrange(8, 24) * page_size)] for _ in range(6)]
    out = []
    for _ in range(n):
        p = rng.choice(prefixes)
        cut = rng.randrange(len(p) // 2, len(p) + 1)
        out.append(p[:cut] + [rng.randrange(1, 30000) for _ in range(rng.randrange(1, 12) * page_size)])
    return out


def serve(cache: Any, alloc: Any, tokens: List[int]) -> int:
    """match_prefix, allocate (evicting when full), insert; returns the matched length."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    key = RadixKey(array("q", tokens))
    matched = cache.match_prefix(MatchPrefixParams(key=key)).device_prefix_len
    if alloc.available_size() < len(tokens):
        cache.evict(EvictParams(num_tokens=len(tokens) - alloc.available_size()))
    value = alloc.alloc(len(tokens))
    if value is None:
        return matched
    cache.insert(InsertParams(key=key, value=value))
    return matched


def restart(cache: Any, alloc: Any) -> None:
    """An empty cache and pool, as the scheduler's flush_cache leaves them."""
    cache.reset()
    alloc.clear()
    cache.take_events()


def event_record(ev: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(ev)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--page-size", type=int, default=4)
    ap.add_argument("--pool-tokens", type=int, default=2048)
    ap.add_argument("--core", choices=("auto", "rust", "python"), default="auto")
    ap.add_argument("--kvctl", choices=("off", "on", "as-configured"), default="as-configured",
                    help="on/off: set kvctl's config for this process (patched SGLang only)")
    ap.add_argument("--commands", choices=("all", "rust"), default="all",
                    help="with kvctl on: accept every command (Think needs SGLang's Python "
                         "tree core) or those the Rust core carries (kvctl cores.py)")
    ap.add_argument("--pins", type=int, default=0, help="with kvctl on: pin/lease this many blocks first")
    ap.add_argument("--no-events-out", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="timed passes over the workload (min reported)")
    a = ap.parse_args(argv)
    if a.kvctl != "as-configured":
        from sglang.srt.kvctl import config, cores

        accepted = config.KvctlConfig().commands
        if a.commands == "rust":
            accepted = accepted - set(cores.PYTHON_ONLY)
        config.use(config.KvctlConfig(commands=accepted) if a.kvctl == "on" else None)
    import torch

    torch.set_num_threads(1)
    cache, alloc = build_cache(a.core, a.page_size, a.pool_tokens)
    # warm up (the first requests pay for lazy imports and first-call setup), then start clean
    for toks in requests(a.seed + 1000, 20, a.page_size):
        serve(cache, alloc, toks)
    restart(cache, alloc)
    reqs = requests(a.seed, a.requests, a.page_size)
    if a.pins:
        pin_first_blocks(cache, alloc, reqs, a.pins)
    events: list = []
    matches: list = []
    best = float("inf")
    for rep in range(a.repeat):
        if rep:
            restart(cache, alloc)  # pins go with it: they are made again for every pass
            if a.pins:
                pin_first_blocks(cache, alloc, reqs, a.pins)
        # CPU time of this (single-threaded) process: the machine may be shared, and a wall clock
        # would time the neighbours too
        t0 = time.process_time()
        for toks in reqs:
            m = serve(cache, alloc, toks)
            evs = cache.take_events()
            if rep == 0:
                matches.append(m)
                if not a.no_events_out:
                    events.extend(event_record(e) for e in evs)
        best = min(best, time.process_time() - t0)
    out = {"core": type(cache.tree_core).__module__ + "." + type(cache.tree_core).__name__,
           "requests": len(reqs), "us_per_req": best * 1e6 / len(reqs), "matches": matches,
           "events": events if not a.no_events_out else None}
    json.dump(out, sys.stdout, default=str)
    sys.stdout.write("\n")
    return 0


def pin_first_blocks(cache: Any, alloc: Any, reqs: List[List[int]], n: int) -> None:
    """kvctl on: serve the prefixes once, then pin some of their blocks with a TTL through the
    command layer (the same handler both front doors reach), so the measured requests run with
    live pins whose protection the eviction walks must respect."""
    from sglang.srt.kvctl.handlers import CommandHandler
    from sglang.srt.kvctl.hooks import state_of

    for toks in reqs[:6]:
        serve(cache, alloc, toks)
    hashes = [h for h, _node in list(state_of(cache).index.items())[:n]]
    h = CommandHandler(cache, worker_id="bench")
    ack = h.handle({"type": "Cache", "block_hashes": hashes, "pin": True, "ttl_seconds": 600})
    if ack.status not in ("applied", "partial"):
        raise SystemExit(f"bench: pinning failed: {ack.to_dict()}")
    cache.take_events()


if __name__ == "__main__":
    sys.exit(main())
