"""The Ack of commands.md, field for field."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

STATUSES = ("applied", "partial", "noop", "duplicate", "rejected", "error")


@dataclasses.dataclass
class Ack:
    type: str
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
        d = dataclasses.asdict(self)
        if d["detail"] is None:
            del d["detail"]
        return d
