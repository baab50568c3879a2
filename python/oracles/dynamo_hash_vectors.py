#!/usr/bin/env python3
"""Write Dynamo KV-router hash test vectors.

    python python/oracles/dynamo_hash_vectors.py OUT.json [--fetch] [--seed N]

Oracle, in order of preference:
  1. "ai-dynamo-runtime": Dynamo's own Rust hash function as shipped in the ai-dynamo-runtime
     wheel (`dynamo._core.compute_block_hash_for_seq`, LocalBlockHash with lora_name /
     cache_namespace / is_eagle). The wheel is used unpacked from KVCTL_DYNAMO_RUNTIME_DIR or
     ~/.cache/kvctl/ai-dynamo-runtime-<ver>/ (never installed into the venv); --fetch gets it
     there with `pip download --no-deps` if missing. The wheel exposes no SequenceHash function,
     so sequence hashes always come from (2).
  2. "xxhash-spec": the `xxhash` PyPI package driven by Dynamo's published spec
     (lib/kv-router protocols.rs; design/hashing.md §2).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import xxhash

DYNAMO_RUNTIME_VERSION = "1.6.1"
XXH3_SEED = 1337
U64 = 2**64
U32_MAX = 2**32 - 1


def runtime_dir() -> Path:
    env = os.environ.get("KVCTL_DYNAMO_RUNTIME_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "kvctl" / f"ai-dynamo-runtime-{DYNAMO_RUNTIME_VERSION}"


def fetch_runtime(dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp,
             f"ai-dynamo-runtime=={DYNAMO_RUNTIME_VERSION}"],
            check=True, timeout=600,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(part)
        part.rename(dest)


def load_dynamo(fetch: bool):
    """Dynamo's own compute_block_hash_for_seq, or (None, reason)."""
    d = runtime_dir()
    if not (d / "dynamo" / "_core.pyi").exists() and fetch:
        try:
            fetch_runtime(d)
        except Exception as e:  # offline, no wheel for this platform, ...
            return None, f"could not fetch ai-dynamo-runtime: {e}"
    if not (d / "dynamo" / "_core.pyi").exists():
        return None, f"ai-dynamo-runtime not found at {d} (pass --fetch)"
    sys.path.insert(0, str(d))
    try:
        from dynamo._core import compute_block_hash_for_seq  # type: ignore
    except Exception as e:
        return None, f"ai-dynamo-runtime does not import here: {e}"
    return compute_block_hash_for_seq, None


# ---- Dynamo's spec over the xxhash package (used for sequence hashes, and as the fallback) ---
def spec_seed(lora_name, cache_namespace) -> int:
    s = XXH3_SEED
    if lora_name:
        s = (s + xxhash.xxh3_64_intdigest(lora_name.encode(), 0)) % U64
    if cache_namespace:
        s = (s + xxhash.xxh3_64_intdigest(cache_namespace.encode(), 1)) % U64
    return s


def spec_local(tokens, bs, lora_name=None, cache_namespace=None, is_eagle=False):
    seed = spec_seed(lora_name, cache_namespace)
    window = bs + (1 if is_eagle else 0)
    out, i = [], 0
    while i + window <= len(tokens):
        data = b"".join(t.to_bytes(4, "little") for t in tokens[i:i + window])
        out.append(xxhash.xxh3_64_intdigest(data, seed))
        i += bs
    return out


def spec_seq(local):
    out = []
    for i, h in enumerate(local):
        if i == 0:
            out.append(h)
        else:
            data = out[-1].to_bytes(8, "little") + h.to_bytes(8, "little")
            out.append(xxhash.xxh3_64_intdigest(data, XXH3_SEED))
    return out


def corpus(rng: random.Random):
    def rand_tokens(n):
        return [rng.choice([0, U32_MAX, rng.randrange(0, 2**32), rng.randrange(0, 200_000)])
                for _ in range(n)]

    cases = [("tokens 1..12, block 4", list(range(1, 13)), 4, {}),
             ("tokens 0..3, block 4", [0, 1, 2, 3], 4, {}),
             ("empty", [], 4, {}),
             ("eagle [10..14] block 2", [10, 11, 12, 13, 14], 2, {"is_eagle": True})]
    for bs in (1, 16, 64):
        for blocks in (1, 2, 5):
            tail = rng.randrange(0, bs)
            cases.append((f"random bs={bs} blocks={blocks} tail={tail}", rand_tokens(bs * blocks + tail), bs, {}))
            cases.append((f"eagle bs={bs} blocks={blocks}", rand_tokens(bs * blocks + 1 + tail), bs, {"is_eagle": True}))
    for kw in ({"lora_name": "adapter-a"}, {"cache_namespace": "tenant-a"},
               {"lora_name": "adapter-a", "cache_namespace": "tenant-a"},
               {"lora_name": "", "cache_namespace": ""}, {"cache_namespace": "t\u00e9nant-\u2603"}):
        label = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        cases.append((f"{label} bs=16", rand_tokens(16 * 3 + 5), 16, kw))
        cases.append((f"{label} eagle bs=4", rand_tokens(4 * 3 + 1), 4, {**kw, "is_eagle": True}))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--fetch", action="store_true", help="pip download the runtime wheel if missing")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    dynamo_fn, why = load_dynamo(args.fetch)
    oracle = "ai-dynamo-runtime" if dynamo_fn else "xxhash-spec"
    cases = []
    for name, tokens, bs, kw in corpus(random.Random(args.seed)):
        spec = spec_local(tokens, bs, kw.get("lora_name"), kw.get("cache_namespace"), kw.get("is_eagle", False))
        if dynamo_fn is not None:
            local = dynamo_fn(tokens, bs, None, kw.get("lora_name"), kw.get("is_eagle"), kw.get("cache_namespace")) if tokens else []
        else:
            local = spec
        cases.append({
            "name": name, "tokens": tokens, "block_size": bs,
            "lora_name": kw.get("lora_name"), "cache_namespace": kw.get("cache_namespace"),
            "eagle": kw.get("is_eagle", False),
            "local": [str(h) for h in local], "sequence": [str(h) for h in spec_seq(local)],
            "spec_local_agrees": [str(h) for h in spec] == [str(h) for h in local],
        })
    doc = {
        "oracle": oracle,
        "local_oracle": oracle,
        "sequence_oracle": "xxhash-spec",
        "dynamo_runtime_version": DYNAMO_RUNTIME_VERSION if dynamo_fn else None,
        "fallback_reason": why,
        "cases": cases,
    }
    args.out.write_text(json.dumps(doc))
    print(f"wrote {len(cases)} cases (local hashes: {oracle}; sequence hashes: xxhash-spec)"
          + (f"; {why}" if why else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
