"""kvctl WORKER HARNESS: a test / demo stand-in for an SGLang server process, not part of SGLang
and never placed into an SGLang tree (``kvctl patch apply`` places only sglang.srt.kvctl).

Run with a patched SGLang tree (``kvctl patch apply``), this package's parent (python/) and the CPU
stand-ins of python/tests/stand_ins on PYTHONPATH (the e2e test and ``kvctl demo`` set this up):

    python -m kvctl_harness --kv-control-nats-url nats://127.0.0.1:4222 --kv-control-worker-id w0 \
        --events-port 5557 [--storage-dir DIR] [--page-size 4 --device-tokens 512 ...]

What is real: SGLang 0.5.23's UnifiedRadixCache (Python tree core) with HiCache
(HybridCacheController, direct io, layer-first host pool) and the file storage backend
(HiCacheFile), all on CPU; SGLang's own ZmqEventPublisher (EventPublisherFactory, as the
scheduler's SchedulerKvEventsPublisher builds it) fed from the cache's event recorder
(``take_events``) after every step; the kvctl command layer (``scheduler_side.scheduler_command``,
the very dispatcher target patch 0004 registers); the control subscriber (``subscriber.py``).

What stands in: there is no model and one process instead of tokenizer + scheduler. The
subscriber's ``send`` does not go through the tokenizer communicator (ZMQ IPC between processes):
it queues the command to a dedicated **scheduler thread** that owns the cache and runs a scheduler
loop (commands, simulated requests, the kvctl loop tick, HiCache event checks, KV event
publishing). The NATS asyncio loop never touches the tree, exactly as in the server.

Harness-only channel (clearly not part of the product): NATS request/reply on
``kvctl-harness-{worker_id}``, JSON ops: ``serve`` (a request with these token ids: match, load
back host hits, lock, allocate, write recognisable KV rows, insert, unlock; ``hold`` keeps it
locked until ``release``), ``flood`` (N requests of fresh tokens), ``kv`` (KV rows of blocks,
from whichever tier holds them), ``hashes`` (published block hashes of a token path), ``stats``,
``evict`` (device eviction, memory pressure) and ``shutdown``.
"""
