"""What SGLang's HTTP server lifespan calls (patch 0011): with kvctl configured, register the HTTP
routes (http.ROUTES) and start the NATS control subscriber; with kvctl off, nothing at all."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from . import identity
from .config import KvctlConfig, from_server_args

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Running:
    config: KvctlConfig
    subscriber: Optional[Any] = None


async def start(server_args: Any, tokenizer_manager: Any, app: Any = None) -> Optional[Running]:
    """Never raises into SGLang's startup for a kvctl problem: a bad setting is logged and the
    server runs without the control plane; a missing NATS server is retried in the background."""
    try:
        cfg = from_server_args(server_args)
    except ValueError as e:
        logger.error("kvctl disabled: %s", e)
        return None
    if cfg is None:
        return None
    identity.set_worker_id(cfg.worker_id)
    running = Running(cfg)
    if cfg.http and app is not None:
        from .http import register_routes

        register_routes(app, lambda: tokenizer_manager, cfg.worker_id,
                        admin_api_key=getattr(server_args, "admin_api_key", None), http_open=cfg.http_open)
    if cfg.control is not None:
        from .subscriber import ControlSubscriber, tokenizer_send

        running.subscriber = await ControlSubscriber(cfg.control, tokenizer_send(tokenizer_manager)).start()
    logger.info("kvctl on: worker %s, HTTP routes %s, NATS %s", cfg.worker_id, "on" if cfg.http and app is not None else "off",
                ",".join(cfg.control.servers) if cfg.control else "off")
    return running


async def stop(running: Optional[Running]) -> None:
    if running is not None and running.subscriber is not None:
        await running.subscriber.stop()
