"""What the scheduler patch calls: the command handler per scheduler, the loop tick (TTL reaper
and safety net) and the pin-aware flush."""
from __future__ import annotations

import logging
from typing import Any

from . import observer
from .ack import contract_ack, encode_ack
from .codec import Command
from .handlers import CommandHandler
from .strict_json import JsonError, loads
from .hooks import state_for_cache

logger = logging.getLogger(__name__)


def handler_of(scheduler: Any) -> CommandHandler:
    """The command handler of the scheduler's cache, kept by the cache's kvctl state."""
    st = state_for_cache(scheduler.tree_cache)
    if st.handler is None:
        st.handler = CommandHandler(scheduler.tree_cache)
    return st.handler


def _as_command(op: str, body: str):
    if op == "command":
        return body
    if op in ("pin", "unpin"):
        try:
            obj = loads(body) if body else {}
        except JsonError:
            return body  # the codec rejects it, naming the body or the repeated key
        if isinstance(obj, dict):
            obj = dict(obj)
            inner = obj.get("command", obj)
            inner = dict(inner) if isinstance(inner, dict) else inner
            if isinstance(inner, dict):
                inner.setdefault("type", "Cache")
                inner["pin"] = op == "pin"
            if "command" in obj:
                obj["command"] = inner
            else:
                obj = inner
        return obj
    if op.startswith("type:"):
        ctype = op[5:]
        try:
            obj = loads(body) if body.strip() else {}
        except JsonError:
            return body  # the codec rejects it, naming the body or the repeated key
        if isinstance(obj, dict):
            if "command" in obj and isinstance(obj["command"], dict):
                obj = {**obj, "command": {"type": ctype, **obj["command"]}}
            elif "command" not in obj and "version" not in obj:
                obj = {"type": ctype, **obj}
        return obj
    if op == "inspect":
        try:
            obj = loads(body) if body else {}
        except JsonError:
            return body  # the codec rejects it, naming the body or the repeated key
        if isinstance(obj, dict) and "command" not in obj:
            obj = {**obj, "type": "Inspect"}
        return obj
    return body


def handle_command(scheduler: Any, body: Any):
    """THE scheduler-side entry point: a docs/protocol.md body (bytes, str or parsed dict; bare command
    or envelope) -> Ack. Decoding, dedupe by envelope id, rejection counting and the handlers all
    sit behind it, so the HTTP and NATS front doors share one implementation."""
    return handler_of(scheduler).handle(body)


def metrics(scheduler: Any) -> dict:
    """Counters of the command layer (by_status, by_type, rejected_by_field, rejected) plus the
    pins' and sessions' counters; the same numbers Inspect reports under detail.pool."""
    h = handler_of(scheduler)
    return h.counters(h.state)


def scheduler_command(scheduler: Any, req: Any):
    from .io import KvctlCommandReqOutput

    h = handler_of(scheduler)
    if req.op == "commands":
        # Commands the NATS subscriber decoded, queued behind one another on the tokenizer side and
        # applied in their order in one scheduler turn (the communicator carries one request per
        # turn): each ack is the one it would have had alone, made contract-shaped here, once.
        acks = [contract_ack(h.handle(Command.from_wire(c)).to_dict(), h.worker_id) for c in req.commands]
        return KvctlCommandReqOutput(acks=acks)
    if req.op == "flush":
        ack = h.flush()
    else:
        ack = h.handle(_as_command(req.op, req.body))
    return KvctlCommandReqOutput(ack_json=encode_ack(contract_ack(ack.to_dict(), h.worker_id)).decode("utf-8"))


def on_scheduler_tick(scheduler: Any) -> None:
    """Once per scheduler loop iteration: expire TTL pins; if the head of the waiting queue
    could not fit because of pins, release the oldest ones."""
    cache = getattr(scheduler, "tree_cache", None)
    if cache is None or not observer.of(cache).enabled:
        return
    st = state_for_cache(cache)
    st.tick()  # the Rust core's events, when SGLang does not drain them
    if st.sessions.leases or st.sessions.tools:
        st.sessions.reap()  # leases and tool offloads expire with no caller
    if st.prefetch.holds:
        st.prefetch.reap(cache)  # a request now holds what was prefetched for it, or the hold ended
    if st.transient_host_pending:
        handler_of(scheduler).retry_transient_host_releases()
    if not st.pins.records:
        return
    st.pins.reap()
    waiting = getattr(scheduler, "waiting_queue", None)
    if waiting:
        req = waiting[0]
        need = len(getattr(req, "origin_input_ids", ()) or ())
        if need:
            st.pins.relieve(need)


def flush_keeping_pins(tree_cache: Any) -> bool:
    """Pin-aware flush_cache: with live pins, evict every unpinned block and keep the pinned
    ones (on host under HiCache) instead of resetting the tree. Returns True when it did so
    (the scheduler then skips its reset); False when there are no pins (a plain reset)."""
    if not observer.of(tree_cache).enabled:
        return False
    st = state_for_cache(tree_cache)
    st.pins.reap()
    if not any(st.pins.records.values()):
        return False
    ack = CommandHandler(tree_cache).flush()
    logger.info("kvctl: pin-aware flush_cache evicted %d tokens, %s", ack.affected, ack.reason)
    return True
