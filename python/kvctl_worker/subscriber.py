"""The control subscriber: NATS (nats-py) -> the scheduler's command path -> Ack reply.

Lives beside the HTTP server, in the tokenizer process (design decision 1). It never touches the
radix tree: every command goes to the scheduler through ``send``, which in SGLang is the tokenizer
manager's ``kvctl_command_communicator`` the /hicache/* HTTP endpoints also use (tokenizer -> every
DP scheduler -> scheduler thread; ``kvctl.http.send_decoded``). The worker harness passes a path
that queues the commands to its scheduler thread.
The communicator carries one request per scheduler turn, and a busy scheduler's turn lasts a whole
batch: commands that queued up meanwhile travel together, applied in order in the next turn, so a
busy worker's command latency stays one turn instead of growing with the queue.

Per message:
  1. decode + validate with the same codec the scheduler uses (``codec.decode``), once; a malformed
     body is answered right here with a ``rejected`` ack naming the field, and counted. Nothing is
     sent to the scheduler, so state cannot change.
  2. a valid command goes to the scheduler as decoded (``CommandPath``: the real server's and the
     harness's path; the envelope's ``id`` travels with it: the idempotency dedupe lives in the
     scheduler-side command layer, shared with HTTP). Any other ``send`` callable gets the body text.
  3. the Ack is stamped with this worker's id (a ``CommandPath`` answers it contract-shaped already;
     another ``send``'s answer is made so here) and encoded once, then sent exactly once to the reply
     subject when there is one. A message without a reply subject is still applied and counted
     (``fire_and_forget``).

Both subjects (``{prefix}-{worker_id}``, ``{prefix}-broadcast``) are subscribed in the queue group
``kvctl-{worker_id}``: with several tokenizer processes (``--tokenizer-worker-num``) exactly one
of them takes each message, so a command is applied and acknowledged once per worker. Valid
messages go through one FIFO to the scheduler (whose communicator serialises them anyway), so each
subject's commands are applied in publish order; across the two subjects NATS promises no order.

The subscriber never dies on a message (every step is guarded and counted) and outlives NATS
restarts: the first connection is retried in the background with backoff, later drops are handled
by nats-py's reconnect (forever), which re-subscribes.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional

from . import identity
from .ack import contract_ack, encode_ack
from .codec import Command, CommandError, decode, peek_id_type
from .server_args import ControlArgs

logger = logging.getLogger(__name__)

SendFn = Callable[[List[str]], Awaitable[List[dict]]]


class CommandPath:
    """A path to the scheduler that takes the decoded Commands and answers one contract-shaped ack
    per command (``http.send_decoded``, the harness's): the subscriber then neither hands on a body
    to decode again nor reshapes the ack."""

    def __init__(self, send: Callable[[List[Command]], Awaitable[List[dict]]]):
        self.send = send

MAX_QUEUE = 65536
MAX_BATCH = 256  # commands per trip to the scheduler


class ControlSubscriber:
    def __init__(self, args: ControlArgs, send: "SendFn | CommandPath", *, send_timeout_s: float = 30.0,
                 connect_retry_s: float = 0.25, reconnect_time_wait_s: float = 0.25):
        self.args = args.validate()
        self.send = send
        self.send_timeout_s = send_timeout_s
        self.connect_retry_s = connect_retry_s
        self.reconnect_time_wait_s = reconnect_time_wait_s
        self.nc = None
        self.metrics: Dict[str, Any] = {
            "received": 0, "replied": 0, "fire_and_forget": 0, "rejected_invalid": 0,
            "errors": 0, "reply_failures": 0, "connects": 0, "disconnects": 0, "reconnects": 0,
            "by_status": {}, "by_type": {}, "batches": 0, "batched_commands": 0,
        }
        self._queue: Optional[asyncio.Queue] = None
        self._tasks = []
        self._connected = asyncio.Event()
        self._closing = False
        self._unreachable_said = False  # one clear line per outage, not one per retry
        self._batching_said = False

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> "ControlSubscriber":
        """Returns at once; connecting (with retries) and serving run in the background."""
        self._queue = asyncio.Queue(maxsize=MAX_QUEUE)
        self._tasks = [asyncio.ensure_future(self._connect_loop()), asyncio.ensure_future(self._serve())]
        return self

    async def wait_connected(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def stop(self) -> None:
        self._closing = True
        nc, self.nc = self.nc, None
        if nc is not None:
            try:
                await asyncio.wait_for(nc.drain(), 2.0)
            except Exception:
                try:
                    await nc.close()
                except Exception:
                    pass
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except BaseException:
                pass
        self._tasks = []

    def _connect_options(self) -> dict:
        a = self.args
        opts = dict(servers=a.servers, name=f"kvctl-worker-{a.worker_id}", allow_reconnect=True,
                    max_reconnect_attempts=-1, reconnect_time_wait=self.reconnect_time_wait_s,
                    connect_timeout=2, error_cb=self._on_error, disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected)
        if a.creds:
            opts["user_credentials"] = a.creds
        if a.user is not None:
            opts["user"] = a.user
        if a.password is not None:
            opts["password"] = a.password
        if a.token is not None:
            opts["token"] = a.token
        return opts

    async def _connect_loop(self) -> None:
        import nats

        delay = self.connect_retry_s
        while not self._closing:
            try:
                nc = await nats.connect(**self._connect_options())
            except Exception as e:
                logger.warning("kvctl subscriber: cannot reach NATS %s (%s); retrying in %.2fs",
                               self.args.servers, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            queue = f"kvctl-{self.args.worker_id}"
            self.nc = nc  # before subscribing: a message may arrive before flush() returns
            try:
                await nc.subscribe(self.args.worker_subject, queue=queue, cb=self._on_msg)
                await nc.subscribe(self.args.broadcast_subject, queue=queue, cb=self._on_msg)
                await nc.flush()
            except Exception as e:  # e.g. no subscribe permission: say so, retry
                logger.error("kvctl subscriber: cannot subscribe to %s / %s: %s; retrying in %.2fs",
                             self.args.worker_subject, self.args.broadcast_subject, e, delay)
                self.nc = None
                try:
                    await nc.close()
                except Exception:
                    pass
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.metrics["connects"] += 1
            self._unreachable_said = False
            self._connected.set()
            logger.info("kvctl subscriber: worker %s listening on %s and %s", self.args.worker_id,
                        self.args.worker_subject, self.args.broadcast_subject)
            return

    async def _on_error(self, e) -> None:
        # nats-py keeps retrying an unreachable server inside connect() without raising: say so
        # once (URL and why) while never connected; the server serves on meanwhile
        if self.nc is None and not self._unreachable_said:
            self._unreachable_said = True
            logger.warning("kvctl subscriber: cannot reach NATS %s (%s); retrying quietly, the server keeps serving",
                           self.args.servers, e)
        else:
            logger.debug("kvctl subscriber: NATS error %s", e)

    async def _on_disconnected(self) -> None:
        self.metrics["disconnects"] += 1
        if not self._closing:
            logger.warning("kvctl subscriber: disconnected from NATS; reconnecting")

    async def _on_reconnected(self) -> None:
        self.metrics["reconnects"] += 1
        logger.info("kvctl subscriber: reconnected to NATS")

    # ---- messages -------------------------------------------------------------------------
    async def _on_msg(self, msg) -> None:
        """nats-py callback: validate; answer malformed bodies here; queue the rest in order."""
        try:
            self.metrics["received"] += 1
            reply = msg.reply or None
            if reply is None:
                self.metrics["fire_and_forget"] += 1
            t0 = time.perf_counter()
            text = None
            try:
                text = bytes(msg.data).decode("utf-8")
                cmd = decode(text)
            except Exception as e:  # CommandError names the field; anything else is the body's fault
                if isinstance(e, CommandError):
                    reason = str(e)
                elif isinstance(e, UnicodeDecodeError):
                    reason = "body: not JSON: body is not valid UTF-8"
                else:
                    reason = f"body: undecodable ({type(e).__name__})"
                self.metrics["rejected_invalid"] += 1
                cid, ctype = peek_id_type(text)  # the ack echoes them when it can
                ack = {"id": cid, "type": ctype, "status": "rejected", "reason": reason,
                       "elapsed_us": int((time.perf_counter() - t0) * 1e6)}
                await self._reply(reply, contract_ack(ack, self.args.worker_id))
                return
            try:
                self._queue.put_nowait((text, cmd, reply, t0))
            except asyncio.QueueFull:
                ack = {"id": cmd.id, "type": cmd.type, "status": "rejected",
                       "reason": f"worker busy: {MAX_QUEUE} commands queued"}
                await self._reply(reply, contract_ack(ack, self.args.worker_id))
        except Exception:  # never die on a message
            self.metrics["errors"] += 1
            logger.exception("kvctl subscriber: message handling failed")

    async def _serve(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self.metrics["batches"] += 1
            self.metrics["batched_commands"] += len(batch)
            if len(batch) > 1 and not self._batching_said:
                self._batching_said = True
                logger.info("kvctl subscriber: %d commands queued behind a busy scheduler go in one "
                            "trip (said once)", len(batch))
            try:
                acks = await self._send_batch(batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.metrics["errors"] += 1
                logger.exception("kvctl subscriber: sending %d command(s) to the scheduler failed", len(batch))
                acks = [{"id": cmd.id, "type": cmd.type, "status": "error",
                         "reason": f"scheduler path failed: {type(e).__name__}: {e}; the command "
                                   "may or may not have been applied (retry with the same id)",
                         "elapsed_us": int((time.perf_counter() - t0) * 1e6)}
                        for _text, cmd, _reply, t0 in batch]
                shaped = False
            else:
                shaped = isinstance(self.send, CommandPath)
            for (_text, cmd, reply, _t0), ack in zip(batch, acks):
                await self._answer(cmd.id, cmd.type, reply, ack, shaped)

    async def _send_batch(self, batch: list) -> List[dict]:
        if isinstance(self.send, CommandPath):
            trip = self.send.send([cmd for _text, cmd, _reply, _t0 in batch])
        else:
            trip = self.send([text for text, _cmd, _reply, _t0 in batch])
        acks = await asyncio.wait_for(trip, self.send_timeout_s)
        if not isinstance(acks, list) or len(acks) != len(batch):
            raise TypeError(f"scheduler answered {type(acks).__name__}, not {len(batch)} acks")
        for ack in acks:
            if not isinstance(ack, dict):
                raise TypeError(f"scheduler answered {type(ack).__name__}, not an ack")
        return acks

    async def _answer(self, cid, ctype, reply, ack: dict, shaped: bool) -> None:
        """Exactly one contract-shaped reply per command, whatever the scheduler answered.
        ``shaped``: a CommandPath's ack, contract-shaped already; it only takes this worker's id."""
        try:
            try:
                if shaped:
                    ack["worker_id"] = self.args.worker_id
                else:
                    ack = contract_ack(ack, self.args.worker_id, fallback_id=cid, fallback_type=ctype)
            except Exception as e:  # still exactly one (error) reply
                self.metrics["errors"] += 1
                ack = contract_ack({"id": cid, "type": ctype, "status": "error",
                                    "reason": f"worker returned a malformed ack ({type(e).__name__}: {e})"},
                                   self.args.worker_id)
            by = self.metrics["by_status"]
            by[ack["status"]] = by.get(ack["status"], 0) + 1
            bt = self.metrics["by_type"]
            bt[ctype] = bt.get(ctype, 0) + 1
            await self._reply(reply, ack)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics["errors"] += 1
            logger.exception("kvctl subscriber: serving a command failed")

    async def _reply(self, reply: Optional[str], ack: dict) -> None:
        if reply is None:
            return
        nc = self.nc
        try:
            await nc.publish(reply, encode_ack(ack))
            self.metrics["replied"] += 1
        except Exception as e:
            self.metrics["reply_failures"] += 1
            logger.warning("kvctl subscriber: could not reply to %s: %s", reply, e)


# ---- SGLang wiring (patch 0011 calls these from http_server.lifespan) ----------------------

def tokenizer_send(tokenizer_manager: Any) -> CommandPath:
    """The HTTP endpoints' path: tokenizer manager communicator -> every DP scheduler."""
    from .http import send_decoded

    return CommandPath(functools.partial(send_decoded, tokenizer_manager))


async def start_for_server(server_args: Any, tokenizer_manager: Any) -> Optional[ControlSubscriber]:
    """Starts the subscriber when --kv-control-nats-url (or KVCTL_NATS_URL) is set; else None
    and nothing else happens. Never raises into SGLang's startup for a NATS problem: a bad
    setting is logged and the server runs without the control plane."""
    from .server_args import from_server_args

    try:
        args = from_server_args(server_args)
    except ValueError as e:
        logger.error("kvctl subscriber disabled: %s", e)
        return None
    if args is None:
        return None
    identity.set_worker_id(args.worker_id)
    sub = ControlSubscriber(args, tokenizer_send(tokenizer_manager))
    await sub.start()
    return sub


async def stop_for_server(sub: Optional[ControlSubscriber]) -> None:
    if sub is not None:
        await sub.stop()
