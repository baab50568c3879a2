"""Warm: HiCache storage backend -> host pool -> radix tree (-> GPU).

The pages are placed with their tokens: ``block_keys`` must be the storage-key chain of the
sequence from its first page (what the router's index holds), and ``token_ids`` its tokens. The
keys are recomputed from the tokens with SGLang's own chain (``get_storage_hash_str``, the
function ``compute_node_hash_values`` uses for ``node.hash_value``, which is what the storage
backend is keyed by); a mismatch is rejected naming the first bad key, with nothing changed.
Without ``token_ids`` the worker uses the tokens of the tree path that already carries the keys,
or rejects.

The fetch is SGLang's own storage read (``storage_backend.batch_exists`` / ``batch_get_v2`` into
host pages from ``mem_pool_host.alloc``), the insert is ``UnifiedTreeCore.insert_host`` (what the
storage prefetch uses; it records BlockStored CPU_PINNED), and ``target_tier: "GPU"`` then goes
through ``load_back`` (BlockStored GPU). Runs synchronously on the scheduler thread.
"""
from __future__ import annotations

import dataclasses
from array import array
from typing import List, Optional

from . import tiers as T
from .ack import Ack
from .codec import CommandError


def _chain(tokens: List[int], page_size: int) -> List[str]:
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    if not tokens:
        return []
    return list(get_storage_hash_str(RadixKey(array("q", tokens)), None, page_size=page_size))


def _known_tokens(core, keys: List[str], page_size: int) -> Optional[List[int]]:
    """Tokens of the tree path whose storage keys are ``keys`` from its first page, if any."""
    last = keys[-1]
    stack = [core.root_node]
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        hv = getattr(n, "hash_value", None) or []
        if last in hv:
            i = hv.index(last)
            toks: List[int] = list(n.key.token_ids[: (i + 1) * page_size])
            cur = n.parent
            while cur is not None and cur is not core.root_node:
                toks = list(cur.key.token_ids) + toks
                cur = cur.parent
            return toks
    return None


def _walk(core, tokens: List[int], page_size: int):
    """Deepest node whose root path is a full-node prefix of ``tokens``; (node, matched)."""
    from sglang.srt.mem_cache.radix_cache import RadixKey

    node, pos = core.root_node, 0
    key = RadixKey(array("q", tokens))
    while pos < len(tokens):
        child = node.children.get(key[pos:].child_key(page_size))
        if child is None:
            break
        n = child.key.match(key[pos:], page_size=page_size)
        if n < len(child.key):
            break
        node, pos = child, pos + n
    return node, pos


@dataclasses.dataclass
class Fetched:
    """What a storage read placed on the host tier and in the tree."""
    got: int = 0
    missing_keys: List[str] = dataclasses.field(default_factory=list)
    inserted: Optional[int] = None  # the tree core's id of the inserted host node
    reason: Optional[str] = None
    host_full: bool = False


def _checked_tokens(cache, moves, f, page_size: int) -> List[int]:
    """The tokens of ``block_keys``, given or known, checked against the keys (nothing changes on
    a mismatch: it is rejected naming the first bad key)."""
    keys, toks = f["block_keys"], f["token_ids"]
    if toks is None:
        toks = moves.known_tokens(cache, keys)
        if toks is None:
            raise CommandError("command.token_ids", "missing, and this worker does not know the "
                               "block_keys: pages cannot be placed in the prefix tree without tokens")
    if len(toks) != len(keys) * page_size:
        raise CommandError("command.token_ids", f"expected {len(keys)} x {page_size} = "
                           f"{len(keys) * page_size} tokens for {len(keys)} block_keys, got {len(toks)}")
    for i, (k, e) in enumerate(zip(keys, _chain(toks, page_size))):
        if k != e:
            raise CommandError(f"command.block_keys[{i}]", "does not match token_ids (the storage key "
                               "recomputed from the tokens differs)")
    return toks


def _fetch(cache, anchor, toks: List[int], have: int, need: List[str], ps: int) -> Fetched:
    """Reads the pages ``need`` (after ``have`` tokens already in the tree) from storage into host
    pages and inserts them under ``anchor``; every host page not kept is freed."""
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
    from sglang.srt.mem_cache.radix_cache import RadixKey

    ctrl = cache.cache_controller
    backend, host, core = ctrl.storage_backend, ctrl.mem_pool_host, cache.tree_core
    avail = backend.batch_exists(need)
    out = Fetched(missing_keys=need[avail:])
    if not avail:
        return out
    idx = host.alloc(avail * ps)
    if idx is None:
        cache.evict_host(avail * ps)
        idx = host.alloc(avail * ps)
    if idx is None:
        out.host_full = True
        return out
    try:
        res = backend.batch_get_v2([PoolTransfer(name=PoolName.KV, host_indices=idx, keys=need[:avail])])
        oks = next(iter(res.values())) if res else []
        while out.got < avail and out.got < len(oks) and oks[out.got]:
            out.got += 1
        out.missing_keys = need[out.got:]
        if out.got:
            ins = core.insert_host(anchor.id, RadixKey(array("q", toks[have:have + out.got * ps])),
                                   idx[: out.got * ps], list(need[:out.got]))
            cache._apply_cache_actions(ins.cache_actions)
            if ins.host_insert_dropped:
                out.reason = "the tree refused the host pages (un-backed-up prefix under write-through)"
                host.free(idx[: out.got * ps])
                out.got = 0
            else:
                if ins.prefix_len:
                    host.free(idx[: ins.prefix_len])
                out.inserted = ins.inserted_host_node
    finally:
        if out.got * ps < len(idx):
            host.free(idx[out.got * ps:])
    return out


def warm(cache, st, cmd) -> Ack:
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import hash_str_to_int64

    f = cmd.fields
    keys, target = f["block_keys"], f["target_tier"]
    ctrl = getattr(cache, "cache_controller", None)
    backend = getattr(ctrl, "storage_backend", None) if ctrl is not None else None
    if backend is None or not getattr(cache, "enable_storage", False):
        raise CommandError("command.type", "Warm needs a HiCache storage backend on this worker")
    ps = st.index.page_size
    if not keys:
        return Ack(type="Warm", status="noop")
    toks = _checked_tokens(cache, st.moves, f, ps)
    # what the tree already holds (any tier) is not fetched again
    match = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", toks))))  # splits at page edges
    anchor, have = st.moves.anchor(cache, match, toks)
    have_pages = have // ps
    got = _fetch(cache, anchor, toks, have, keys[have_pages:], ps) if keys[have_pages:] else Fetched()
    if got.host_full:
        return Ack(type="Warm", status="error", requested=len(keys), skipped=have_pages,
                   reason="host pool full: nothing fetched, state unchanged")
    tiers: dict = {"CPU_PINNED": got.got} if got.got else {}
    reason = got.reason
    if got.inserted is not None and target == "GPU":
        if T.load_path(cache, st.moves.node(cache, got.inserted)):
            tiers["GPU"] = got.got
        else:
            reason = "fetched to host; load to GPU refused (device pool full?)"
    if got.got == 0:
        status = "noop"
    elif got.missing_keys or reason:
        status = "partial"
    else:
        status = "applied"
    return Ack(type="Warm", status=status, requested=len(keys), affected=got.got, skipped=have_pages,
               missing=[hash_str_to_int64(k) for k in got.missing_keys], tiers=tiers, reason=reason,
               detail={"found_pages": got.got, "already_cached_pages": have_pages,
                       "missing_keys": got.missing_keys})
