"""A request on a simulated worker, and the cache calls SGLang's scheduler makes for it, in its
order (0.5.23: ``mem_cache/common.py`` match_kv_cache / release_kv_cache,
``UnifiedRadixCache.init_load_back`` / ``checkpoint_into_tree``,
``mem_cache/allocation.py``):

  admit       match the prompt (at most its length - 1 tokens, as ``_compute_max_prefix_len``);
              load its host hit back to the device; lock the matched node; allocate the rest,
              evicting what the allocator lacks (``evict_from_tree_cache``);
  checkpoint  after a prefill chunk: insert what the request has computed so far and move its
              lock onto the node the insert ended on (``checkpoint_kv_cache``);
  finish      insert the prompt and the output's KV, split the leaf at the prompt's end with a
              priority one higher (so eviction drops an answer before its prompt), move the lock
              there and release it, free what the tree did not keep, and register the session's
              reference (session radix cache).

The request keeps its own row of device indices (SGLang keeps it in ``req_to_token_pool``): the
prefix's from the tree, then its own slots. Output slots are allocated with the prompt's, not one
per decode step: admission here reserves a request's whole output, which SGLang estimates
(``new_token_ratio``) and corrects by retraction; a simulated request is never retracted.
"""
from __future__ import annotations

from array import array
from typing import Any, Optional

import torch


class SimRequest:
    __slots__ = (
        "rid", "prompt", "output", "session", "priority", "arrival", "generation",
        "row", "protected", "inserted", "done", "lock", "cached", "host_loaded",
        "generated", "first_token_at", "admitted_at", "computed", "handle", "storage_hit",
    )

    def __init__(self, rid: str, prompt: array, output: array, arrival: float,
                 session: Optional[str] = None, priority: int = 0):
        self.rid = rid
        self.prompt = prompt
        self.output = output
        self.session = session
        self.priority = priority
        self.arrival = arrival
        self.generation: Optional[int] = None
        self.row: Optional[torch.Tensor] = None  # device indices of [0, done) then its own slots
        self.protected = 0  # tokens of the row the tree owns (cache_protected_len)
        self.inserted = 0  # cache_inserted_len
        self.done = 0  # prompt tokens whose KV exists
        self.lock: Any = None  # (node id, dec params)
        self.cached = 0  # prompt tokens served from cache (device + loaded from host)
        self.host_loaded = 0
        self.computed = 0  # prompt tokens prefilled
        self.generated = 0
        self.first_token_at: Optional[float] = None
        self.admitted_at: Optional[float] = None
        self.handle: Any = None  # its L3 prefetch's CacheRequestHandle while one is under way
        self.storage_hit = 0  # prompt tokens its L3 prefetch brought to the host tier

    @property
    def origin_input_ids(self) -> array:
        """The prompt, under the name SGLang's ``Req`` gives it: kvctl's scheduler tick reads the
        head of the waiting queue's to free pinned GPU memory it cannot fit past (the safety net)."""
        return self.prompt

    @property
    def need(self) -> int:
        """Prompt tokens still to prefill."""
        return len(self.prompt) - self.done

    @property
    def kv_tokens(self) -> int:
        return self.done + self.generated


def radix_key(tokens: array, limit: Optional[int] = None):
    from sglang.srt.mem_cache.radix_cache import RadixKey

    return RadixKey(tokens, limit=limit)


def page_floor(n: int, page: int) -> int:
    return n // page * page


def page_ceil(n: int, page: int) -> int:
    return -(-n // page) * page


class RequestCache:
    """The cache calls for requests on one worker (see the module docstring)."""

    def __init__(self, cache: Any, allocator: Any, page: int, session_radix: bool):
        self.cache = cache
        self.alloc = allocator
        self.page = page
        self.session_radix = session_radix

    def match(self, req: SimRequest):
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        key = radix_key(req.prompt, limit=len(req.prompt) - 1)
        return self.cache.match_prefix(MatchPrefixParams(key=key))

    def free_tokens(self) -> int:
        """What the allocator can hand out now, evictions included (PrefillAdder's rem_total_tokens
        without the running requests' reservation: theirs is allocated already)."""
        return self.alloc.available_size() + self.cache.evictable_size()

    def on_arrival(self, req: SimRequest) -> None:
        if self.session_radix and req.session is not None:
            req.generation = self.cache.ensure_session_generation(req.session)

    def admit(self, req: SimRequest, chunk: int) -> bool:
        """Matches, loads back, locks and allocates for the first ``chunk`` tokens still to prefill
        (and the whole output once the chunk ends the prompt). False: no room (nothing held)."""
        m = self.match(req)
        prefix = m.device_prefix_len
        if m.host_hit_length > 0 and self.cache.load_back(m.best_match_node, req=None):
            m2 = self.match(req)
            req.host_loaded = m2.device_prefix_len - prefix
            prefix, m = m2.device_prefix_len, m2
        node = m.last_device_node
        req.lock = (node, self.cache.inc_lock_ref(node).to_dec_params())
        req.done = req.protected = req.inserted = req.cached = prefix
        prefix_row = self.cache.path_device_indices(node)
        ok = self._allocate(req, prefix_row, min(chunk, req.need))
        if not ok:
            self.unlock(req)
        return ok

    def _allocate(self, req: SimRequest, prefix_row: torch.Tensor, chunk: int) -> bool:
        ends_prompt = chunk >= req.need
        want = page_ceil(chunk + (len(req.output) if ends_prompt else 0), self.page)
        return self._grow(req, prefix_row, want)

    def _grow(self, req: SimRequest, row: torch.Tensor, want: int) -> bool:
        if want > self.free_tokens():
            return False  # PrefillAdder's NO_TOKEN: nothing is evicted for a request that cannot fit
        if want > self.alloc.available_size():
            from sglang.srt.mem_cache.base_prefix_cache import EvictParams

            self.cache.evict(EvictParams(num_tokens=want - self.alloc.available_size()))
        new = self.alloc.alloc(want) if want else torch.empty(0, dtype=torch.int64)
        if new is None:
            return False
        req.row = torch.cat([row.to(torch.int64), new.to(torch.int64)])
        return True

    def next_chunk(self, req: SimRequest, chunk: int) -> bool:
        """A chunked request's next chunk: its slots (and the output's, once it ends the prompt)."""
        ends_prompt = chunk >= req.need
        owned = len(req.row) - req.done  # slots past what is computed, still free to use
        want = page_ceil(chunk + (len(req.output) if ends_prompt else 0), self.page) - owned
        if want <= 0:
            return True
        return self._grow(req, req.row, want)

    def unlock(self, req: SimRequest) -> None:
        if req.lock is not None:
            self.cache.dec_lock_ref(req.lock[0], req.lock[1])
            req.lock = None

    def checkpoint(self, req: SimRequest, upto: int, priority: int) -> Any:
        """Inserts [protected, upto) of the request's tokens, page-aligned; moves its lock onto the
        insert's last node. Returns that node."""
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams

        seq = req.prompt if upto <= len(req.prompt) else req.prompt + req.output
        aligned = page_floor(upto, self.page)
        if aligned <= req.protected:
            return req.lock[0] if req.lock else None
        key = radix_key(seq[:aligned])
        params = InsertParams(key=key, value=req.row[:aligned].clone(), prev_prefix_len=req.protected,
                              inserted_len=req.inserted, priority=priority, session_id=req.session)
        result = self.cache.insert(params)
        req.inserted = max(req.inserted, aligned)
        node = result.last_device_node
        tree_row = self.cache.path_device_indices(node)
        req.row[req.protected:len(tree_row)] = tree_row[req.protected:]
        self.unlock(req)
        req.lock = (node, self.cache.inc_lock_ref(node).to_dec_params())
        req.protected = len(tree_row)
        return node

    def finish(self, req: SimRequest) -> None:
        """Caches the request's prompt and output (the last output token has no KV yet) and lets
        the request's row go."""
        owned = req.done + max(0, req.generated - 1)
        node = self.checkpoint(req, owned, req.priority)
        self._split_at_prompt(req)
        self.unlock(req)
        if req.row is not None and len(req.row) > req.protected:
            self.alloc.free(req.row[req.protected:])
        req.row = None
        if self.session_radix and req.session is not None and node is not None:
            self.cache.session_refs.register_session_ref(_SessionReq(req), leaf=node)

    def _split_at_prompt(self, req: SimRequest) -> None:
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams

        prompt_len = page_floor(len(req.prompt), self.page)
        if not 0 < prompt_len < req.inserted:
            return
        self.cache.insert(InsertParams(
            key=radix_key(req.prompt[:prompt_len]), value=req.row[:prompt_len].clone(),
            prev_prefix_len=prompt_len, inserted_len=prompt_len, priority=req.priority + 1,
            session_id=req.session))


class _SessionReq:
    """What ``UnifiedSessionRefTracker.register_session_ref`` reads of a finished request."""

    __slots__ = ("session_id", "session", "session_generation", "finished_reason")

    def __init__(self, req: SimRequest):
        self.session_id = req.session
        self.session = None
        self.session_generation = req.generation
        self.finished_reason = None
