"""IPC messages tokenizer -> scheduler for kvctl commands, registered with SGLang's own
``hook_custom_types`` so its msgpack IPC decoder knows them (no io_struct edit needed)."""
from __future__ import annotations

from sglang.srt.managers.io_struct import BaseReq, hook_custom_types


class KvctlCommandReqInput(BaseReq, kw_only=True):
    # "command" (a docs/protocol.md body), "pin", "unpin", "inspect", "flush" (HTTP, `body`);
    # "commands" (NATS): `commands`, decoded by the subscriber (codec.Command.to_wire), in order
    op: str
    body: str = ""
    commands: list = []


class KvctlCommandReqOutput(BaseReq, kw_only=True):
    ack_json: str = ""  # ops with a `body`: the contract-shaped ack's bytes
    acks: list = []  # op "commands": one contract-shaped ack dict per command, in order


hook_custom_types(KvctlCommandReqInput, KvctlCommandReqOutput)
