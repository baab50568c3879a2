"""The Ack of docs/protocol.md, field for field, and its one byte encoding.

``encode_ack`` writes the bytes both front doors (HTTP, NATS) answer with: the contract's field
order, compact separators, non-ASCII as is; the same bytes as ``encodeAck`` in src/protocol/ack.ts
(the conformance corpus holds the two to it). ``decode_ack`` reads an ack by the rules of the
commands, a repeated key included (refused, naming it).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional

from .codec import KNOWN_TYPES, SAFE_INT_MAX, CommandError, ident, parse_body, to_int64
# STATUSES and ACK_KEYS (the contract's order; keys beyond it, Inspect's detail and ranks, follow)
# are generated from docs/protocol.schema.json.
from .wire_tables import ACK_KEYS, STATUSES


@dataclasses.dataclass
class Ack:
    type: Optional[str]
    status: str
    id: Optional[str] = None
    worker_id: Optional[str] = None
    requested: int = 0
    affected: int = 0
    skipped: int = 0
    missing: List[int] = dataclasses.field(default_factory=list)
    reason: Optional[str] = None
    tiers: Dict[str, int] = dataclasses.field(default_factory=dict)
    lease: Optional[dict] = None  # {"lease_id": str, "expires_at_ms": int | None}
    epoch: Optional[int] = None
    elapsed_us: int = 0
    # Inspect only (read-only detail); omitted from the wire when None.
    detail: Optional[dict] = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown ack status {self.status!r}")

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ACK_KEYS}
        d["missing"] = list(self.missing)
        d["tiers"] = dict(self.tiers)
        if self.detail is not None:
            d["detail"] = self.detail
        return d


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= SAFE_INT_MAX else 0


def contract_ack(ack: Dict[str, Any], worker_id: Optional[str] = None, fallback_id: Optional[str] = None,
                 fallback_type: Optional[str] = None) -> Dict[str, Any]:
    """An ack dict made contract-shaped, in contract order: ``worker_id`` when given (else the
    ack's own), a known type or null, every field present and typed. Extra keys stay, last."""
    a = dict(ack)
    out: Dict[str, Any] = {}
    out["id"] = a.get("id") if a.get("id") is not None else fallback_id
    out["worker_id"] = worker_id or a.get("worker_id") or "unknown"
    t = a.get("type")
    out["type"] = t if t in KNOWN_TYPES else (fallback_type if fallback_type in KNOWN_TYPES else None)
    status, reason = a.get("status"), a.get("reason")
    if status not in STATUSES:
        reason = f"worker returned status {status!r}; {reason or ''}".strip("; ")
        status = "error"
    out["status"] = status
    for k in ("requested", "affected", "skipped"):
        out[k] = _count(a.get(k))
    out["missing"] = [int(h) for h in (a.get("missing") or [])]
    out["reason"] = reason if isinstance(reason, str) else None
    tiers = a.get("tiers") or {}
    if not isinstance(tiers, dict) or not all(_is_count(v) for v in tiers.values()):
        raise ValueError(f"tiers: expected counts per tier, got {tiers!r}")
    out["tiers"] = {str(k): v for k, v in tiers.items()}
    lease = a.get("lease")
    if isinstance(lease, str):  # a bare lease id
        lease = {"lease_id": lease, "expires_at_ms": None}
    out["lease"] = lease if isinstance(lease, dict) else None
    ep = a.get("epoch")
    out["epoch"] = ep if isinstance(ep, int) and not isinstance(ep, bool) and ep >= 0 else None
    out["elapsed_us"] = _count(a.get("elapsed_us"))
    for k, v in a.items():
        if k not in ACK_KEYS:
            out[k] = v
    return out


def encode_ack(ack: Dict[str, Any]) -> bytes:
    """A contract-shaped ack dict -> its canonical bytes (what HTTP and NATS both send)."""
    ordered = {k: ack[k] for k in ACK_KEYS}
    for k, v in ack.items():
        if k not in ordered:
            ordered[k] = v
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _need(cond: bool, field: str, message: str) -> None:
    if not cond:
        raise CommandError(field, message)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= SAFE_INT_MAX


def decode_ack(body: Any) -> Dict[str, Any]:
    """Ack bytes / text -> the validated ack dict (src/protocol/ack.ts AckSchema); CommandError
    naming the field. Extra keys are kept (loose), the contract's own are required and typed."""
    a = parse_body(body)
    _need(isinstance(a, dict), "body", "expected a JSON object")
    for k in ACK_KEYS:
        _need(k in a, k, "missing")
    if a["id"] is not None:
        ident(a["id"], "id")
    _need(isinstance(a["worker_id"], str) and a["worker_id"] != "", "worker_id", "expected a non-empty string")
    _need(a["type"] is None or (isinstance(a["type"], str) and a["type"] in KNOWN_TYPES), "type", "unknown type")
    _need(isinstance(a["status"], str) and a["status"] in STATUSES, "status", "unknown status")
    for k in ("requested", "affected", "skipped"):
        _need(_is_count(a[k]), k, "expected a count")
    _need(isinstance(a["missing"], list), "missing", "expected an array of int64")
    a["missing"] = [to_int64(h, f"missing[{i}]") for i, h in enumerate(a["missing"])]
    _need(a["reason"] is None or isinstance(a["reason"], str), "reason", "expected a string or null")
    _need(isinstance(a["tiers"], dict), "tiers", "expected an object")
    for k, v in a["tiers"].items():
        _need(k != "" and _is_count(v), f"tiers.{k}", "expected a count")
    lease = a["lease"]
    if lease is not None:
        _need(isinstance(lease, dict), "lease", "expected an object or null")
        _need("lease_id" in lease, "lease.lease_id", "missing")
        ident(lease["lease_id"], "lease.lease_id")
        _need("expires_at_ms" in lease, "lease.expires_at_ms", "missing")
        _need(lease["expires_at_ms"] is None or _is_count(lease["expires_at_ms"]), "lease.expires_at_ms",
              "expected a count or null")
    _need(a["epoch"] is None or _is_count(a["epoch"]), "epoch", "expected a count or null")
    _need(_is_count(a["elapsed_us"]), "elapsed_us", "expected a count")
    return a


def merge_rank_acks(acks: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One ack for a command every DP rank applied to its own tree (python/README.md, "DP ranks").

    - ``requested``: the command's size (the same on every rank); ``affected``/``skipped`` and the
      per-tier counts are summed; ``missing``: hashes no rank holds (rank 0's order); ``elapsed_us``:
      the slowest rank; ``lease``/``epoch``/``detail``: the first rank's that has one.
    - ``status``: the ranks' common status when they agree; otherwise ``error`` when any rank
      failed or refused what another applied (the ranks now differ: ``reason`` says which did
      what); otherwise ``noop`` when every rank was a no-op, ``applied`` when nothing is missing and
      no rank was partial, else ``partial``.
    - ``reason``: every rank's reason, prefixed with its rank, when they differ; ``ranks``: each
      rank's status, counts and reason, so no rank's outcome is lost.
    """
    if len(acks) == 1:
        return acks[0]
    first = dict(acks[0])
    statuses = [a["status"] for a in acks]
    others = [set(a["missing"]) for a in acks[1:]]
    missing = [h for h in first["missing"] if all(h in m for m in others)]
    if len(set(statuses)) == 1:
        status = statuses[0]
    elif any(s in ("error", "rejected") for s in statuses):
        status = "error"
    elif all(s in ("noop", "duplicate") for s in statuses):
        status = "noop"
    elif not missing and "partial" not in statuses:
        status = "applied"
    else:
        status = "partial"
    tiers: Dict[str, int] = {}
    for a in acks:
        for k, v in a["tiers"].items():
            tiers[k] = tiers.get(k, 0) + v
    reasons = [a["reason"] for a in acks]
    if len(set(reasons)) == 1:
        reason = reasons[0]
    else:
        reason = "; ".join(f"rank {r}: {text}" for r, text in enumerate(reasons) if text) or None
    out = dict(first)
    out.update(
        status=status,
        requested=max(a["requested"] for a in acks),
        affected=sum(a["affected"] for a in acks),
        skipped=sum(a["skipped"] for a in acks),
        missing=missing,
        reason=reason,
        tiers=tiers,
        lease=next((a["lease"] for a in acks if a["lease"] is not None), None),
        epoch=next((a["epoch"] for a in acks if a["epoch"] is not None), None),
        elapsed_us=max(a["elapsed_us"] for a in acks),
    )
    out["ranks"] = [{"status": a["status"], "affected": a["affected"], "skipped": a["skipped"],
                     "missing": a["missing"], "reason": a["reason"]} for a in acks]
    return out
