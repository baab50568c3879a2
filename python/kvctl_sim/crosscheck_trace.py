"""A Mooncake-shaped trace that both kvctl sim and Dynamo's replay run: the cross-check workload.

    .venv/bin/python python/kvctl_sim/crosscheck_trace.py --out T.jsonl [--conversations 48]
        [--turns 6] [--rate 4] [--seed 1] [--block 64]

Plain KV routing, as the cross-check asks: no sessions, no commands, every row an independent
request (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of ``--block``
tokens). Reuse comes from shared prefixes only: conversations of one tenant share a system prompt
and tool schemas, and each turn repeats its conversation's history and adds a user message.
Conversations start at Poisson arrivals; their turns arrive a think time apart, open loop (a turn
does not wait for the previous answer, since nothing ties them together but their prefix). The
same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def rows(conversations: int, turns: int, rate: float, seed: int, block: int) -> list[dict]:
    rng = random.Random(seed)
    next_id = 0

    def blocks(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    systems = [blocks(rng.randint(16, 48)) for _ in range(4)]  # 1-3K-token shared prompts
    out, start = [], 0.0
    for _ in range(conversations):
        start += rng.expovariate(rate) * 1000.0
        history, at = list(rng.choice(systems)), start
        for _ in range(turns):
            history += blocks(rng.randint(1, 12))  # the user's message or a tool result
            answer = rng.randint(32, 400)
            out.append(
                {
                    "timestamp": round(at),
                    "input_length": len(history) * block,
                    "output_length": answer,
                    "hash_ids": list(history),
                }
            )
            history += blocks(-(-answer // block))  # the answer, replayed in the next turn
            at += rng.uniform(2.0, 20.0) * 1000.0
    out.sort(key=lambda r: (r["timestamp"], r["input_length"]))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--conversations", type=int, default=48)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--rate", type=float, default=4.0, help="conversations started per second")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--block", type=int, default=64, help="tokens per hash id")
    args = ap.parse_args(argv)
    for name in ("conversations", "turns", "block"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if not args.rate > 0:
        ap.error("--rate must be positive")
    trace = rows(args.conversations, args.turns, args.rate, args.seed, args.block)
    args.out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in trace))
    print(json.dumps({"trace": str(args.out), "requests": len(trace), "block": args.block}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
