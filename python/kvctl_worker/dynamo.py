"""The patched SGLang worker under NVIDIA Dynamo: ``python -m kvctl_worker.dynamo [dynamo.sglang flags]``
(or ``python -m sglang.srt.kvctl.dynamo`` from a tree patched by ``kvctl patch apply``, which places
this file there).

``dynamo.sglang`` runs SGLang in process (``sgl.Engine``) and starts no HTTP server, so the
lifespan hunk that starts the kvctl control subscriber never runs there. This module does what
``python -m dynamo.sglang`` does, with one addition: every engine it builds starts
``sglang.srt.kvctl.lifespan.start(server_args, tokenizer_manager)`` (no app, so no kvctl HTTP
routes) on the worker's event loop, and stops it when the engine shuts down. ``lifespan.start``
does nothing unless a ``--kv-control-*`` flag (or its environment fallback) is set, so without
kvctl flags the worker is ``dynamo.sglang`` unchanged.

Worker ids: Dynamo names the worker by its endpoint's connection id (the ``worker_id`` of its KV
events and of its router's decisions). With kvctl on and no kvctl worker id given, the kvctl
worker id is that number in decimal, so a router maps the two by identity; with an explicit
``--kv-control-worker-id`` the worker logs the pair ("kvctl: Dynamo worker <id> is kvctl worker
<id>") for the router's mapping (docs/dynamo.md).

The subscriber must come from the patched tree (``sglang.srt.kvctl``), not from this package:
the scheduler dispatches kvctl requests by the classes of ``sglang.srt.kvctl.io``.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import sys
from typing import Any

logger = logging.getLogger("kvctl.dynamo")

PATCHED_LIFESPAN = "sglang.srt.kvctl.lifespan"


def _lifespan() -> Any:
    """The patched tree's lifespan module, or None on a stock SGLang (which also rejects every
    --kv-control-* flag with its own "unrecognized arguments")."""
    try:
        return importlib.import_module(PATCHED_LIFESPAN)
    except ImportError:
        return None


def _start_kvctl(engine: Any, lifespan: Any) -> None:
    """Starts the subscriber on the running loop (dynamo.sglang builds engines inside its async
    worker). A kvctl failure is logged and never takes the worker down, as in the HTTP lifespan."""
    loop = asyncio.get_running_loop()

    async def run() -> None:
        try:
            engine._kvctl_running = await lifespan.start(engine.server_args, engine.tokenizer_manager)
        except Exception:
            logger.exception("kvctl: control subscriber did not start")

    engine._kvctl_task = loop.create_task(run())


def _explicit_worker_id(server_args: Any) -> bool:
    if getattr(server_args, "kv_control_worker_id", None) or os.environ.get("KVCTL_WORKER_ID"):
        return True
    raw = getattr(server_args, "kv_control_config", None)
    try:
        return isinstance(raw, str) and "worker_id" in json.loads(raw)
    except ValueError:  # the config module reports a bad config by name when kvctl starts
        return False


def _name_after_dynamo(lifespan: Any) -> None:
    """Wraps dynamo.sglang's last call before it builds the engine, which hands over the serving
    endpoint: the scheduler processes read the kvctl worker id from the server args, so it is
    set before they start."""
    import dynamo.sglang.init_llm as init_llm

    config = importlib.import_module(lifespan.__name__.rsplit(".", 1)[0] + ".config")
    original = init_llm.set_forward_pass_metrics_worker_id

    def set_ids(server_args: Any, generate_endpoint: Any) -> None:
        original(server_args, generate_endpoint)
        try:
            on = config.from_server_args(server_args) is not None
        except ValueError:
            on = False
        if not on:
            return
        dynamo_id = str(generate_endpoint.connection_id())
        if not _explicit_worker_id(server_args):
            server_args.kv_control_worker_id = dynamo_id
        logger.info("kvctl: Dynamo worker %s is kvctl worker %s", dynamo_id, server_args.kv_control_worker_id)

    init_llm.set_forward_pass_metrics_worker_id = set_ids


def install_engine_hook() -> bool:
    """Makes ``sglang.Engine`` (what dynamo.sglang constructs) the kvctl engine. Returns False on
    a stock SGLang tree, where nothing is changed."""
    lifespan = _lifespan()
    if lifespan is None:
        return False
    import sglang
    from sglang.srt.entrypoints.engine import Engine

    class KvctlEngine(Engine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._kvctl_running = None
            _start_kvctl(self, lifespan)

        def shutdown(self) -> None:
            running, self._kvctl_running = self._kvctl_running, None
            if running is not None:
                try:
                    asyncio.get_running_loop().create_task(lifespan.stop(running))
                except RuntimeError:  # no loop left: the process is exiting and takes the socket along
                    pass
            super().shutdown()

    KvctlEngine.__name__ = KvctlEngine.__qualname__ = "Engine"
    sglang.Engine = KvctlEngine
    _name_after_dynamo(lifespan)
    return True


def main() -> None:
    # What `python -m dynamo.sglang` does first (dynamo/sglang/__main__.py), in the same order.
    if "PYTHONHASHSEED" not in os.environ:
        os.environ["PYTHONHASHSEED"] = "0"
    from dynamo.common.snapshot.restore_context import maybe_run_restore_standby_mode

    maybe_run_restore_standby_mode()
    install_engine_hook()
    from dynamo.sglang.main import main as dynamo_main

    dynamo_main()


if __name__ == "__main__":
    sys.exit(main())
