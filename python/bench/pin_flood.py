"""Pin flood benchmark (npm run bench:pin): the pin prototype's experiment replayed on the
patched SGLang cache, CPU only (lessons.md "results to match").

A 42 816-token KV cache (page 64) holds a VIP conversation at depth 0/2/6/10/16 (prompt tokens
3 158 / 4 810 / 7 347 / 10 826 / 15 002, synthetic token ids); a flood of
ceil(capacity*3/150) multi-turn requests (150 new tokens a turn on average) cycles the cache;
then the VIP's next-turn prompt is matched. Reported: tokens served from cache (device hit, plus
host hit under HiCache) over the VIP's page-aligned prior context, per request (lessons.md #7),
for: baseline (RadixCache, no pin), pinned (RadixCache, lock-based pin) and tier_pinned
(UnifiedRadixCache + HiCache, host ratio 2, tier-aware pin).
--smoke: the shallowest and deepest depths on a cache an eighth the size (prompts and flood
scaled with it): seconds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

CAPACITY = 42_816
PAGE = 64
DEPTHS = [0, 2, 6, 10, 16]
PROMPTS = [3158, 4810, 7347, 10826, 15002]
FLOOD_TURN_TOKENS = 150
CONVERSATION_MAX = 6000  # a flood conversation restarts past this many tokens


def cached_tokens(cache, tokens) -> int:
    """Tokens of this request's prompt served from cache: the match of this very request
    (device prefix + host hit), never a global counter (lessons.md #7)."""
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    m = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))
    return m.device_prefix_len + (getattr(m, "host_hit_length", 0) or 0)


class Serving:
    """Serves a request the way the scheduler does: match, lock the prefix, evict to make
    room, allocate, insert prompt KV into the tree, unlock."""

    def __init__(self, mode: str):
        import torch

        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        from sglang.srt.mem_cache.radix_cache import RadixCache

        self.mode = mode
        if mode == "tier_pinned":
            from helpers import make_unified

            self.cache, self.alloc, self.pool = make_unified(
                page_size=PAGE, size=CAPACITY, hicache=True, events=False, layers=1)
            self.unified = True
        else:
            self.pool = MHATokenToKVPool(size=CAPACITY, page_size=PAGE, dtype=torch.float16, head_num=1,
                                         head_dim=1, layer_num=1, device="cpu", enable_memory_saver=False)
            self.alloc = TokenToKVPoolAllocator(size=CAPACITY, dtype=torch.float16, device="cpu",
                                                kvcache=self.pool, need_sort=False)
            self.cache = RadixCache(CacheInitParams(disable=False, req_to_token_pool=None,
                                                    token_to_kv_pool_allocator=self.alloc, page_size=PAGE))
            self.unified = False

    def _match(self, tokens):
        from array import array

        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        return self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))

    def serve(self, tokens):
        import torch

        from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from array import array

        tokens = tokens[: len(tokens) // PAGE * PAGE]
        m = self._match(tokens)
        if self.unified and m.host_hit_length:
            from helpers import load_back

            load_back(self.cache, m.best_match_node)
            m = self._match(tokens)
        node = m.last_device_node
        if self.unified:
            core = self.cache.tree_core
            prefix = core.collect_full_device_indices(node, core.root_node.id)
            receipt = self.cache.inc_lock_ref(node).to_dec_params()
        else:
            prefix = self.cache.path_device_indices(node)
            self.cache.inc_lock_ref(node)
        need = len(tokens) - len(prefix)
        if need > self.alloc.available_size():
            self.cache.evict(EvictParams(num_tokens=need - self.alloc.available_size()))
        new = self.alloc.alloc(need) if need else torch.empty(0, dtype=torch.int64)
        if new is None:
            raise RuntimeError("request cannot be scheduled: cache full of protected tokens")
        value = torch.cat([prefix.to(torch.int64), new])
        # prev_prefix_len: the prefix slots are the tree's own, not duplicates to free
        self.cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value,
                                       prev_prefix_len=len(prefix)))
        if self.unified:
            self.cache.writing_check(write_back=True)
            self.cache.dec_lock_ref(node, receipt)
        else:
            self.cache.dec_lock_ref(node)

    def vip_hashes(self, tokens):
        from sglang.srt.kvctl.hooks import state_for_cache

        st = state_for_cache(self.cache)
        m = self._match(tokens)
        node = m.last_device_node
        if self.unified:
            node = self.cache.tree_core.node_by_id(node)
        out = []
        while node is not st.ops.root():
            out[:0] = node.kvctl_hashes
            node = node.parent
        return out


def flood(serving: Serving, n_requests: int, seed: int):
    rng = random.Random(seed)
    next_tok = [1_000_000]

    def fresh(n):
        start = next_tok[0]
        next_tok[0] += n
        return list(range(start, start + n))

    convs = []
    for _ in range(n_requests):
        if not convs or rng.random() < 0.08:
            convs.append(fresh(rng.randint(64, 512)))
        i = rng.randrange(len(convs))
        convs[i] = convs[i] + fresh(rng.randint(100, 200))  # ~150 new tokens a turn
        if len(convs[i]) > CONVERSATION_MAX:
            convs[i] = fresh(rng.randint(64, 512))
        serving.serve(convs[i])


def run_one(mode: str, prompt_tokens: int, seed: int):
    """Returns (fraction served from cache, fraction of it that came from the host tier)."""
    from sglang.srt.kvctl.handlers import CommandHandler

    s = Serving(mode)
    vip = list(range(10, 10 + prompt_tokens))  # synthetic VIP prior context
    s.serve(vip)
    prior_aligned = prompt_tokens // PAGE * PAGE
    if mode != "baseline":
        ack = CommandHandler(s.cache).handle({"type": "Cache", "block_hashes": s.vip_hashes(vip), "pin": True})
        assert ack.status == "applied", ack
    flood(s, math.ceil(CAPACITY * 3 / FLOOD_TURN_TOKENS), seed)
    next_turn = vip + list(range(900_000, 900_100))
    host = getattr(s._match(next_turn), "host_hit_length", 0) or 0
    return (min(cached_tokens(s.cache, next_turn), prior_aligned) / prior_aligned,
            host / prior_aligned)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tree", help="an already patched SGLang tree (default: build one)")
    ap.add_argument("--smoke", action="store_true", help="an eighth of the cache, prompts and flood (seconds)")
    args = ap.parse_args(argv)
    if args.smoke:
        global CAPACITY, DEPTHS, PROMPTS, CONVERSATION_MAX
        scale = 8
        CAPACITY = CAPACITY // scale // PAGE * PAGE
        DEPTHS, PROMPTS = [DEPTHS[0], DEPTHS[-1]], [PROMPTS[0] // scale, PROMPTS[-1] // scale]
        CONVERSATION_MAX //= scale

    import sglang_tree

    tree = args.tree or sglang_tree.build_patched_tree()
    sglang_tree.activate(tree)
    # kvctl is off unless configured; the bench builds caches outside a server (no published server
    # args), so it turns kvctl on for the process, as a --kv-control-config flag would.
    from sglang.srt.kvctl import config as kvctl_config

    kvctl_config.use(kvctl_config.KvctlConfig())
    import logging

    logging.disable(logging.WARNING)

    t0 = time.time()
    res = {"baseline": [], "pinned": [], "tier_pinned": []}
    from_host = []
    for mode in res:
        for p in PROMPTS:
            frac, host = run_one(mode, p, args.seed)
            res[mode].append(round(frac, 4))
            if mode == "tier_pinned":
                from_host.append(host)
    print(f"pin flood: capacity {CAPACITY} tokens, page {PAGE}, flood "
          f"{math.ceil(CAPACITY * 3 / FLOOD_TURN_TOKENS)} requests, {time.time() - t0:.1f}s (CPU)")
    print(f"{'depth':>5} {'prompt':>7} {'baseline':>9} {'pinned':>7} {'tier_pinned':>12} {'(from host)':>12}")
    for i, d in enumerate(DEPTHS):
        print(f"{d:>5} {PROMPTS[i]:>7} {res['baseline'][i]:>9.1%} {res['pinned'][i]:>7.1%} "
              f"{res['tier_pinned'][i]:>12.1%} {from_host[i]:>12.1%}")
    ok = all(x <= 0.05 for x in res["baseline"]) and all(
        x >= 0.9 for x in res["pinned"] + res["tier_pinned"])
    print("bar (baseline <= 5%, pinned >= 90%):", "met" if ok else "NOT met")
    if args.json:
        print(json.dumps({"bench": "pin", "capacity": CAPACITY, "depths": DEPTHS, "prompts": PROMPTS,
                          "baseline_cached": res["baseline"],
                          "pinned_cached": res["pinned"], "tier_pinned_cached": res["tier_pinned"]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
