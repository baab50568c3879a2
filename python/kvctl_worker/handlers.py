"""Commands -> tree operations -> Acks. Runs on the scheduler thread (design decision 1).

``CommandHandler.handle`` is the one command layer both front doors (HTTP, NATS) reach through
``scheduler_side.handle_command``: decode (strict, naming the field), dedupe by envelope id,
dispatch, count every outcome per status and per rejection field.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Dict, List, Optional

from . import tiers as T
from .ack import Ack
from .codec import Command, CommandError, decode, peek_id_type
from .hooks import state_for_cache
from .identity import get_worker_id



class Dedupe:
    """Envelope ids seen within the window (time and count bounded, oldest dropped first)."""

    def __init__(self, window_s: float = 600.0, max_ids: int = 100_000,
                 clock=time.monotonic):
        self.window_s, self.max_ids, self.clock = window_s, max_ids, clock
        self.seen: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()

    def _trim(self, now: float) -> None:
        while self.seen and (len(self.seen) > self.max_ids
                             or next(iter(self.seen.values()))[0] <= now - self.window_s):
            self.seen.popitem(last=False)

    def get(self, cid: str) -> Optional[dict]:
        self._trim(self.clock())
        hit = self.seen.get(cid)
        return None if hit is None else hit[1]

    def put(self, cid: str, ack: dict) -> None:
        self.seen[cid] = (self.clock(), ack)
        self._trim(self.clock())


def duplicate_ack(cid: str, first: dict) -> Ack:
    reason = f"duplicate of {cid}; first outcome: {first['status']}"
    if first.get("reason"):
        reason += f" ({first['reason']})"
    return Ack(type=first["type"], status="duplicate", id=cid, requested=first["requested"],
               affected=first["affected"], skipped=first["skipped"], missing=list(first["missing"]),
               reason=reason, tiers=dict(first["tiers"]), lease=first["lease"], epoch=first["epoch"])


@dataclasses.dataclass
class Purged:
    """What a purge did: blocks removed and skipped, each counted per tier."""
    affected: int = 0
    skipped: int = 0
    tiers: Dict[str, int] = dataclasses.field(default_factory=dict)
    skipped_tiers: Dict[str, int] = dataclasses.field(default_factory=dict)


def _bump(tiers: Dict[str, int], names) -> None:
    for t in names:
        tiers[t] = tiers.get(t, 0) + 1


class CommandHandler:
    def __init__(self, cache: Any, worker_id: Optional[str] = None):
        self.cache = cache
        cfg = state_for_cache(cache).config
        self.worker_id = worker_id or cfg.worker_id
        self.dedupe = Dedupe(cfg.dedupe_window_s, cfg.dedupe_max_ids)
        self.metrics: Dict[str, Any] = {"rejected": 0, "by_status": {}, "rejected_by_field": {},
                                        "by_type": {}}

    @property
    def state(self):
        return state_for_cache(self.cache)

    def handle(self, body: Any) -> Ack:
        t0 = time.perf_counter()
        try:
            cmd = body if isinstance(body, Command) else decode(body)
        except CommandError as e:
            cid, ctype = peek_id_type(body)
            ack = Ack(type=ctype, status="rejected", id=cid, reason=str(e))
            return self._count(self._done(ack, t0), e.field)
        except Exception as e:  # the decoder must never take the worker down
            return self._count(self._done(Ack(type=None, status="rejected",
                                              reason=f"body: undecodable ({e})"), t0), "body")
        if cmd.id is not None:
            first = self.dedupe.get(cmd.id)
            if first is not None:
                return self._count(self._done(duplicate_ack(cmd.id, first), t0))
        st = self.state
        field = None
        try:
            self._reap(st)
            ack = getattr(self, "_" + cmd.type.lower())(cmd)
        except CommandError as e:  # semantic refusals (unknown lease, stale epoch, bad keys)
            ack = Ack(type=cmd.type, status="rejected", reason=str(e))
            field = e.field
        except Exception as e:  # failed midway: say so, never raise into the scheduler
            import logging

            logging.getLogger(__name__).exception("kvctl: %s failed", cmd.type)
            ack = Ack(type=cmd.type, status="error", reason=f"failed midway: {type(e).__name__}: {e}")
        ack.id = cmd.id
        self._done(ack, t0)
        if cmd.id is not None:
            self._remember(cmd.id, ack)
        return self._count(ack, field)

    def _remember(self, cid: str, ack: Ack) -> None:
        d = ack.to_dict()
        d.pop("detail", None)  # a duplicate repeats counts, not Inspect's payload: keep it small
        self.dedupe.put(cid, d)

    def _count(self, ack: Ack, field: Optional[str] = None) -> Ack:
        m = self.metrics
        m["by_status"][ack.status] = m["by_status"].get(ack.status, 0) + 1
        m["by_type"][ack.type] = m["by_type"].get(ack.type, 0) + 1
        if ack.status == "rejected":
            m["rejected"] += 1
            key = field or "other"
            m["rejected_by_field"][key] = m["rejected_by_field"].get(key, 0) + 1
        return ack

    def _reap(self, st) -> None:
        st.pins.reap()
        st.sessions.reap()

    def _done(self, ack: Ack, t0: float) -> Ack:
        ack.worker_id = self.worker_id if self.worker_id is not None else get_worker_id()
        ack.elapsed_us = int((time.perf_counter() - t0) * 1e6)
        return ack

    def _cache(self, cmd: Command) -> Ack:
        hashes = cmd.fields["block_hashes"]
        pins = self.state.pins
        if cmd.fields["pin"]:
            r = pins.pin(hashes, cmd.fields.get("ttl_seconds"))
        else:
            r = pins.unpin(hashes)
        if r.affected == 0:
            status = "noop"
        elif r.skipped or r.missing or r.noop:
            status = "partial"
        else:
            status = "applied"
        if r.affected == 0 and r.skipped:
            status = "rejected"
        return Ack(type="Cache", status=status, requested=len(hashes), affected=r.affected,
                   skipped=r.skipped + r.noop, missing=r.missing, reason=r.reason, tiers=r.tiers)

    # ---- helpers ---------------------------------------------------------------------------
    def _unified(self, cmd: Command):
        st = self.state
        if not hasattr(st.ops, "core") or getattr(self.cache, "tree_core", None) is None:
            raise CommandError("command.type", f"{cmd.type} needs a UnifiedRadixCache (this worker "
                               "runs a plain RadixCache)")
        return st

    def _host_tier(self, cmd: Command):
        """Pause and ToolStart: a UnifiedRadixCache with HiCache (a host tier)."""
        st = self._unified(cmd)
        if not st.ops.tier_aware:
            raise CommandError("command.type", f"{cmd.type} needs HiCache (a host tier) on this worker")
        return st

    def _lookup_nodes(self, st, hashes):
        found, missing = st.index.lookup(hashes, st.ops.root())
        nodes = {}
        for _, n in found:
            nodes[id(n)] = n
        return found, missing, list(nodes.values())

    def _purge(self, st, roots, include_self: bool, force: bool) -> Purged:
        """Remove the subtrees under ``roots`` from every tier, leaves first; pinned/held nodes
        skipped unless ``force``; in-use nodes always skipped, and so are their ancestors (a
        prefix never goes before its suffixes)."""
        root = st.ops.root()
        affected = skipped = 0
        tiers_aff: Dict[str, int] = {}
        tiers_skip: Dict[str, int] = {}
        blocked = set()
        order = []
        seen = set()
        for r in roots:
            for n in T.subtree_leaves_first(r, include_self=include_self):
                if id(n) not in seen:
                    seen.add(id(n))
                    order.append(n)
        for n in order:
            if not st.index.reachable(n, root):
                continue  # already gone with a tombstone cascade
            pages = len(getattr(n, "kvctl_hashes", None) or ()) or 1
            names = T.tier_names(n)

            def skip():
                nonlocal skipped
                skipped += pages
                for t in names:
                    tiers_skip[t] = tiers_skip.get(t, 0) + pages
                blocked.update(id(a) for a in T._ancestors(n, root))

            if id(n) in blocked or T.in_use(n):
                skip()
                continue
            if getattr(n, "pin_count", 0) or T.host_locked(n):
                if not force:
                    skip()
                    continue
                st.pins.release_hashes(list(getattr(n, "kvctl_hashes", None) or ()))
            gone = T.purge_leaf(self.cache, n)
            if gone is None:
                skip()
                continue
            affected += pages
            for t in gone:
                tiers_aff[t] = tiers_aff.get(t, 0) + pages
        return Purged(affected, skipped, tiers_aff, tiers_skip)

    @staticmethod
    def _status(affected: int, skipped: int, missing: List[int]) -> str:
        if affected == 0:
            return "noop"
        return "partial" if (skipped or missing) else "applied"

    # ---- Prune / Think ---------------------------------------------------------------------
    def _prune(self, cmd: Command) -> Ack:
        st = self.state  # Prune and Think(transient=false) also run on a plain RadixCache (one tier)
        h = cmd.fields["after_block_hash"]
        node = T.node_ending_at(self.cache, st, h)
        if node is None:
            return Ack(type="Prune", status="noop", requested=1, missing=[h],
                       reason="after_block_hash: not held by this worker")
        p = self._purge(st, [node], include_self=False, force=bool(cmd.fields["force"]))
        a, sk, ta, ts = p.affected, p.skipped, p.tiers, p.skipped_tiers
        ack = Ack(type="Prune", status=self._status(a, sk, []), requested=1, affected=a, skipped=sk,
                  tiers=ta, detail={"skipped_tiers": ts})
        if sk:
            ack.reason = f"skipped {sk} pinned or in-use block(s)" + ("" if cmd.fields["force"] else
                                                                        " (force=false)")
        return ack

    def _think(self, cmd: Command) -> Ack:
        st = self._unified(cmd) if cmd.fields["transient"] else self.state
        hashes = cmd.fields["block_hashes"]
        found, missing, _ = self._lookup_nodes(st, hashes)
        # each listed block starts its own node: what follows it in the node is its suffix
        nodes = {}
        listed = {h for h, _ in found}
        for h, n0 in found:
            i = n0.kvctl_hashes.index(h) if h in (getattr(n0, "kvctl_hashes", None) or ()) else 0
            if i > 0 and n0.kvctl_hashes[i - 1] in listed:
                continue  # its predecessor in the node is listed too: same run, one split
            n = T.node_starting_at(self.cache, st, h)
            if n is not None:
                nodes[id(n)] = n
        nodes = list(nodes.values())
        found = [(h, st.index.get(h, st.ops.root())) for h, _ in found]
        if cmd.fields["transient"]:
            tiers: Dict[str, int] = {}
            affected = 0
            # the marked blocks and everything below them (their suffixes)
            nodes = list({id(x): x for n in nodes for x in T.subtree_leaves_first(n)}.values())
            for n in nodes:
                n.kvctl_transient = True
            if nodes:
                st.has_transient = True
            for n in sorted(nodes, key=lambda n: -_depth(n)):
                if st.index.reachable(n, st.ops.root()) and not self._release_transient_host(st, n, tiers):
                    st.transient_host_pending[id(n)] = n
            affected = len(found)
            pending = len(st.transient_host_pending)
            return Ack(type="Think", status=self._status(affected, 0, missing), requested=len(hashes),
                       affected=affected, missing=missing, tiers=tiers,
                       reason=(f"{pending} node(s) held by an in-flight backup: their host copies go "
                               "as soon as it completes") if pending else None)
        p = self._purge(st, nodes, include_self=True, force=False)
        a, sk, ta, ts = p.affected, p.skipped, p.tiers, p.skipped_tiers
        return Ack(type="Think", status=self._status(a, sk, missing), requested=len(hashes),
                   affected=a, skipped=sk, missing=missing, tiers=ta, detail={"skipped_tiers": ts},
                   reason=f"skipped {sk} pinned or in-use block(s)" if sk else None)

    def _release_transient_host(self, st, n, tiers: Dict[str, int]) -> bool:
        """Takes a transient node's KV off the host tier; False while an in-flight backup holds it."""
        if n.evicted:
            # only on host already: transient KV may not live there; it goes now
            p = self._purge(st, [n], include_self=True, force=False)
            for t, c in p.tiers.items():
                tiers[t] = tiers.get(t, 0) + c
            return p.skipped == 0
        if not n.backuped:
            return True
        if T.drop_host_copy(self.cache, n):  # already written through: take it back
            _bump(tiers, ["CPU_PINNED"] * len(n.kvctl_hashes))
            return True
        return False

    def retry_transient_host_releases(self) -> int:
        """Scheduler tick: retry the host releases Think(transient=true) could not do at once.
        Returns how many nodes are still pending."""
        st = state_for_cache(self.cache)
        root = st.ops.root()
        for key, n in sorted(st.transient_host_pending.items(), key=lambda kv: -_depth(kv[1])):
            gone = not st.index.reachable(n, root) or not getattr(n, "kvctl_transient", False)
            if gone or self._release_transient_host(st, n, {}):
                del st.transient_host_pending[key]
        return len(st.transient_host_pending)

    # ---- Pause / leases ----------------------------------------------------------------------
    def _offload(self, st, found, nodes, owner: str):
        """Hold the host copies for ``owner`` (backs up first), then free the GPU copies."""
        held = st.pins.hold(found, owner)
        skipped = held.skipped
        if self.cache.cache_controller is not None:
            for n in sorted(nodes, key=lambda n: -_depth(n)):
                if not n.evicted and n.pin_count:
                    _, sk = T.demote_subtree(self.cache, n)
                    skipped += sum(1 for x in sk if x is n)
        return held, skipped

    def _tiers_of(self, st, found) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for h, n in found:
            if st.index.get(h, st.ops.root()) is not None:
                _bump(out, T.tier_names(n))
        return out

    def _lease_dict(self, hold) -> dict:
        return {"lease_id": hold.key, "expires_at_ms": hold.expires_at_ms}

    def _pause(self, cmd: Command) -> Ack:
        st = self._host_tier(cmd)
        hashes, lid = cmd.fields["block_hashes"], cmd.fields["lease_id"]
        found, missing, nodes = self._lookup_nodes(st, hashes)
        if any(getattr(n, "kvctl_transient", False) for n in nodes):
            raise CommandError("command.block_hashes", "transient blocks cannot be paused to host")
        hold = st.sessions.lease(lid, [h for h, _ in found], cmd.fields["ttl_seconds"])
        held, skipped = self._offload(st, found, nodes, "lease:" + lid)
        if getattr(self.cache, "enable_storage", False):
            for n in sorted(nodes, key=_depth):
                if n.backuped:
                    self.cache.write_backup_storage(n.id)
        affected = held.affected + held.noop
        ack = Ack(type="Pause", status=self._status(affected, skipped, missing), requested=len(hashes),
                  affected=affected, skipped=skipped, missing=missing, tiers=self._tiers_of(st, found),
                  lease=self._lease_dict(hold), reason=held.reason)
        if not hold.hashes:
            st.sessions.leases.pop(lid, None)
        return ack

    def _lease_or_reject(self, st, lid: str):
        hold = st.sessions.leases.get(lid)
        if hold is None:
            raise CommandError("command.lease_id", f"unknown lease {lid!r}")
        return hold

    def _renewlease(self, cmd: Command) -> Ack:
        st = self.state
        hold = self._lease_or_reject(st, cmd.fields["lease_id"])
        st.sessions.lease(hold.key, [], cmd.fields["new_ttl_seconds"])
        return Ack(type="RenewLease", status="applied", requested=len(hold.hashes),
                   affected=len(hold.hashes), lease=self._lease_dict(hold))

    def _revokelease(self, cmd: Command) -> Ack:
        st = self._unified(cmd)
        hold = self._lease_or_reject(st, cmd.fields["lease_id"])
        st.sessions.end_lease(hold.key)
        found, missing, nodes = self._lookup_nodes(st, hold.hashes)
        p = self._purge(st, nodes, include_self=True, force=False)
        a, sk, ta, ts = p.affected, p.skipped, p.tiers, p.skipped_tiers
        return Ack(type="RevokeLease", status="applied" if not sk else "partial",
                   requested=len(hold.hashes), affected=a, skipped=sk, missing=missing, tiers=ta,
                   lease={"lease_id": hold.key, "expires_at_ms": None}, detail={"skipped_tiers": ts},
                   reason=f"lease released; {sk} block(s) held elsewhere or in use kept" if sk else None)

    # ---- tool offload / restore ------------------------------------------------------------------
    def _toolstart(self, cmd: Command) -> Ack:
        st = self._host_tier(cmd)
        sid, hashes = cmd.fields["session_id"], cmd.fields["block_hashes"]
        found, missing, nodes = self._lookup_nodes(st, hashes)
        hold = st.sessions.start_tool(sid, [h for h, _ in found])
        held, skipped = self._offload(st, found, nodes, "tool:" + sid)
        affected = held.affected + held.noop
        return Ack(type="ToolStart", status=self._status(affected, skipped, missing) if found else "noop",
                   requested=len(hashes), affected=affected, skipped=skipped, missing=missing,
                   tiers=self._tiers_of(st, found), epoch=hold.epoch, reason=held.reason)

    def _toolend(self, cmd: Command) -> Ack:
        st = self._unified(cmd)
        sid, epoch = cmd.fields["session_id"], cmd.fields["epoch"]
        hold = st.sessions.tools.get(sid)
        if hold is None:
            raise CommandError("command.session_id", f"no tool offload in flight for session {sid!r}")
        if epoch != hold.epoch:
            raise CommandError("command.epoch", f"stale epoch {epoch} (current {hold.epoch})")
        ok, why = True, None
        try:
            # stale session -> node mappings: the index answers only for nodes still in the tree
            found, missing = st.index.lookup(hold.hashes, st.ops.root())
            for h, n in reversed(found):  # the path's last block last: load the deepest
                if n.evicted and not T.load_path(self.cache, n):
                    ok, why = False, f"load_back of block {h} refused (device pool full?)"
                    break
        except Exception as e:
            ok, why, found, missing = False, f"{type(e).__name__}: {e}", [], []
        finally:
            st.sessions.end_tool(sid)  # the host protection goes whatever happened (defect 1)
        if not ok:
            return Ack(type="ToolEnd", status="error", requested=len(hold.hashes), epoch=epoch,
                       missing=missing, reason=f"restore failed: {why}; host protection released, "
                       "blocks stay on host as ordinary cache")
        return Ack(type="ToolEnd", status=self._status(len(found), 0, missing) if found else "noop",
                   requested=len(hold.hashes), affected=len(found), missing=missing,
                   tiers=self._tiers_of(st, found), epoch=epoch)

    # ---- Warm -------------------------------------------------------------------------------------
    def _warm(self, cmd: Command) -> Ack:
        from .warm import warm

        return warm(self, self._unified(cmd), cmd)

    # ---- Inspect -----------------------------------------------------------------------------
    def _inspect(self, cmd: Command) -> Ack:
        st = self.state
        root = st.ops.root()
        f = cmd.fields
        hashes = f.get("block_hashes")
        lease = epoch = None
        if f.get("lease_id") is not None:
            hold = st.sessions.leases.get(f["lease_id"])
            if hold is not None:
                lease = self._lease_dict(hold)
                hashes = (hashes or []) + [h for h in hold.hashes if h not in (hashes or [])]
        if f.get("session_id") is not None:
            hold = st.sessions.tools.get(f["session_id"])
            if hold is not None:
                epoch = hold.epoch
                hashes = (hashes or []) + [h for h in hold.hashes if h not in (hashes or [])]
        if hashes is None:
            hashes = [] if (f.get("lease_id") or f.get("session_id")) else [h for h, _ in st.index.items()]
        blocks, missing, tiers = [], [], {}
        for h in hashes:
            node = st.index.get(h, root)
            if node is None:
                missing.append(h)
                continue
            node_tiers = st.ops.tiers(node)
            for t in node_tiers:
                tiers[t] = tiers.get(t, 0) + 1
            blocks.append({"block_hash": h, "tiers": node_tiers, "pin_count": st.pins.pin_count_of_hash(h),
                           "node_pin_count": getattr(node, "pin_count", 0),
                           "transient": bool(getattr(node, "kvctl_transient", False)),
                           "lease": st.sessions.lease_of_hash(h),
                           "tool_sessions": st.sessions.sessions_of_hash(h)})
        detail = {"blocks": blocks, "pool": self._pool(st), "pool_tokens": st.ops.pool_tokens(),
                  "pinned_tokens": st.pins.pinned_tokens(), "budget_tokens": st.pins.budget_tokens(),
                  "indexed_blocks": len(st.index), "metrics": dict(st.pins.metrics)}
        return Ack(type="Inspect", status="applied", requested=len(hashes), affected=0,
                   missing=missing, tiers=tiers, lease=lease, epoch=epoch, detail=detail)

    def _pool(self, st) -> dict:
        out: Dict[str, Any] = {"pinned_tokens": st.pins.pinned_tokens(),
                               "budget_tokens": st.pins.budget_tokens(),
                               "leases": len(st.sessions.leases), "tool_offloads": len(st.sessions.tools),
                               **self.counters(st)}
        alloc = getattr(self.cache, "token_to_kv_pool_allocator", None)
        if alloc is not None:
            out["device"] = {"size": int(alloc.size), "available": int(alloc.available_size())}
        ctrl = getattr(self.cache, "cache_controller", None)
        if ctrl is not None:
            hp = ctrl.mem_pool_host
            out["host"] = {"size": int(hp.size), "available": int(hp.available_size())}
        return out

    def counters(self, st) -> dict:
        """Copies of the command layer's, the pins' and the sessions' counters."""
        return {"commands": {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.metrics.items()},
                "pins": dict(st.pins.metrics), "sessions": dict(st.sessions.metrics)}

    def flush(self) -> Ack:
        """Pin-aware flush_cache: evict everything unpinned, keep pinned blocks (on host under
        HiCache) and their index entries (lessons.md #3)."""
        t0 = time.perf_counter()
        st = self.state
        st.pins.reap()
        evicted = st.ops.flush_unpinned()
        kept = sum(1 for pins in st.pins.records.values() if pins)
        return self._done(Ack(type=None, status="applied", affected=evicted, skipped=kept,
                              reason=f"kept {kept} pinned block(s)"), t0)


def _depth(node) -> int:
    d = 0
    while node.parent is not None:
        d += 1
        node = node.parent
    return d

