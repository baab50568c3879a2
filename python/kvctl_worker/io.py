"""IPC messages tokenizer -> scheduler for kvctl commands, registered with SGLang's own
``hook_custom_types`` so its msgpack IPC decoder knows them (no io_struct edit needed)."""
from __future__ import annotations

from sglang.srt.managers.io_struct import BaseReq, hook_custom_types


class KvctlCommandReqInput(BaseReq, kw_only=True):
    op: str  # "command" (a docs/protocol.md body), "pin", "unpin", "inspect", "flush"
    body: str = ""


class KvctlCommandReqOutput(BaseReq, kw_only=True):
    ack_json: str


hook_custom_types(KvctlCommandReqInput, KvctlCommandReqOutput)
