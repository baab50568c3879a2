"""HTTP endpoints (ROUTES: /hicache/* and /session/* for every command), wired like
/flush_cache: FastAPI route -> tokenizer manager communicator -> scheduler -> tree cache, each
answering a docs/protocol.md Ack.

Who may call them (route_refusal): these routes pin, prune and revoke cache other clients share,
so they are an admin surface. With SGLang's ``--admin-api-key`` set they need that key (the
inference ``--api-key`` does not unlock them); with no admin key they are refused (403) unless
``--kvctl-http-open`` (or ``http_open`` in ``--kv-control-config``, or env ``KVCTL_HTTP_OPEN=1``)
says to serve them as before: open, or behind ``--api-key`` when one is set. The check is made in
the endpoint itself, not left to SGLang's auth middleware, which SGLang installs only when a key
is set at startup (before these routes exist)."""

import json
import secrets
from http import HTTPStatus
from typing import Any, Callable, List, Optional

from .ack import contract_ack, encode_ack, merge_rank_acks
from .codec import Command
from .io import KvctlCommandReqInput

# path -> op. "pin"/"unpin"/"inspect" are shorthands; "type:<T>" posts a docs/protocol.md body
# (bare or enveloped) whose "type" may be left out (the path names it). Every route answers the Ack.
ROUTES = {
    "/hicache/pin_blocks": "pin",
    "/hicache/unpin_blocks": "unpin",
    "/hicache/inspect": "inspect",
    "/hicache/command": "command",          # any docs/protocol.md body, type included
    "/hicache/cache": "type:Cache",
    "/hicache/prune": "type:Prune",
    "/hicache/think": "type:Think",
    "/hicache/pause": "type:Pause",
    "/hicache/renew_lease": "type:RenewLease",
    "/hicache/revoke_lease": "type:RevokeLease",
    "/hicache/warm": "type:Warm",
    "/session/tool_start": "type:ToolStart",
    "/session/tool_end": "type:ToolEnd",
    "/hicache/prefetch": "type:Prefetch",
    "/session/kv_meta": "type:Inspect",     # {"session_id": ...}: the session's blocks and epoch
}


async def kvctl_command(tokenizer_manager: Any, op: str, body: str) -> dict:
    """Tokenizer side: send to every DP scheduler and merge their Acks into one contract-shaped
    ack (ack.merge_rank_acks: every rank's outcome kept)."""
    tokenizer_manager.auto_create_handle_loop()
    results = await tokenizer_manager.kvctl_command_communicator(KvctlCommandReqInput(op=op, body=body))
    return merge_rank_acks([contract_ack(json.loads(r.ack_json)) for r in results])


async def send_decoded(tokenizer_manager: Any, commands: List[Command]) -> List[dict]:
    """The NATS subscriber's entry point: commands it decoded, in one trip to every DP scheduler
    (applied in order in one scheduler turn) -> one contract-shaped ack per command, in order. The
    decoded commands cross the IPC as they are (nothing is decoded twice) and each rank's acks come
    back contract-shaped (built once, on the scheduler); several ranks' are merged here."""
    tokenizer_manager.auto_create_handle_loop()
    req = KvctlCommandReqInput(op="commands", commands=[c.to_wire() for c in commands])
    results = await tokenizer_manager.kvctl_command_communicator(req)
    return [merge_rank_acks([r.acks[i] for r in results]) for i in range(len(commands))]


def _status_code(ack: dict) -> int:
    return HTTPStatus.BAD_REQUEST if ack["status"] == "rejected" else HTTPStatus.OK


def route_refusal(authorization: Optional[str], admin_api_key: Optional[str], http_open: bool) -> Optional[tuple]:
    """(status, reason) when a call to a kvctl route must be refused, else None (see the module doc)."""
    if admin_api_key:
        parts = (authorization or "").split(" ", 1)
        if len(parts) == 2 and parts[0].lower() == "bearer" and secrets.compare_digest(parts[1].encode(), admin_api_key.encode()):
            return None
        return HTTPStatus.UNAUTHORIZED, "kvctl routes need the admin API key (Authorization: Bearer <--admin-api-key>)"
    if http_open:
        return None
    return HTTPStatus.FORBIDDEN, "kvctl routes are refused: no --admin-api-key is set (set one, or pass --kvctl-http-open to serve them without it)"


def register_routes(app: Any, get_tokenizer_manager: Callable[[], Any], worker_id: Optional[str] = None,
                    admin_api_key: Optional[str] = None, http_open: bool = False) -> None:
    """Adds ROUTES to the FastAPI app (lifespan.start, only while kvctl is on). ``worker_id``
    stamps every ack, as the NATS subscriber stamps its replies: one command, the same bytes.
    ``admin_api_key`` (SGLang's --admin-api-key) and ``http_open`` decide who may call them."""
    from fastapi import Request
    from fastapi.responses import Response

    from sglang.srt.utils.auth import AuthLevel, auth_level

    def make(op: str):
        @auth_level(AuthLevel.ADMIN_OPTIONAL)
        async def endpoint(request: Request):
            refused = route_refusal(request.headers.get("authorization"), admin_api_key, http_open)
            if refused is not None:
                status, reason = refused
                return Response(json.dumps({"error": {"message": reason, "type": "authentication_error" if status == 401 else "permission_error"}}),
                                status_code=status, media_type="application/json")
            raw = await request.body()
            try:
                body = raw.decode("utf-8")
            except UnicodeDecodeError:  # refused here, as the NATS subscriber refuses it: nothing sent
                ack = contract_ack({"status": "rejected", "reason": "body: not JSON: body is not valid UTF-8"}, worker_id)
                return Response(encode_ack(ack), status_code=HTTPStatus.BAD_REQUEST, media_type="application/json")
            ack = await kvctl_command(get_tokenizer_manager(), op, body)
            if worker_id:
                ack = contract_ack(ack, worker_id)
            # The very bytes the NATS subscriber replies with for the same command.
            return Response(encode_ack(ack), status_code=_status_code(ack), media_type="application/json")

        endpoint.__name__ = f"kvctl_{op}"
        return endpoint

    for path, op in ROUTES.items():
        app.add_api_route(path, make(op), methods=["POST"])
    from .tokenize import register as register_tokenize

    register_tokenize(app)
