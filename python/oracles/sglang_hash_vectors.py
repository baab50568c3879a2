#!/usr/bin/env python3
"""Write SGLang page-hash test vectors computed by SGLang's OWN code from the pinned release.

    python python/oracles/sglang_hash_vectors.py OUT.json [--seed N]

Every expected value comes from the release's functions (see sglang_release.py for exactly
which files): node.hash_value / storage keys from utils.compute_node_hash_values, the KV-event
block hashes from events.KVCacheEventRecorder.record_store (which applies the 0.5.23 cache_salt
and LoRA namespacing), and the page digests from the release's native hash extension. Nothing
here re-implements a hash. Installs nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import types
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_release  # noqa: E402

U32_MAX = 2**32 - 1


class Node:
    """The TreeNode fields the hash and event code read."""

    def __init__(self, key, parent):
        self.key = key
        self.parent = parent
        self.hash_value = None
        self.event_hash_value = None


def make_root(sg):
    root = Node(sg.RadixKey(array("q")), None)
    root.hash_value = []
    return root


def aligned(tokens, page_size, bigram):
    """The page-aligned key the engine inserts (only full pages are hashed and published)."""
    if bigram:
        units = max(len(tokens) - 1, 0) // page_size * page_size
        return tokens[: units + 1] if units else []
    return tokens[: len(tokens) // page_size * page_size]


def run_case(sg, name, tokens, page_size, *, bigram=False, extra_key=None, cache_salt=None,
             lora_registered=False, dynamo_format=False, split_pages=None):
    """One request's tokens inserted as one node (or a parent + child when split_pages is set)."""
    recorder = sg.events.KVCacheEventRecorder(
        enabled=True, page_size=page_size, dynamo_format=dynamo_format,
        lora_names=sg.events.KvEventLoraNames(),
    )
    if lora_registered and extra_key is not None:
        recorder.lora_names.register(
            types.SimpleNamespace(lora_id=extra_key[-32:], extra_key=extra_key), "adapter-a"
        )
    key_tokens = aligned(tokens, page_size, bigram)
    root = make_root(sg)

    def key(raw):
        return sg.RadixKey(array("q", raw), extra_key, is_bigram=bigram, cache_salt=cache_salt)

    nodes = []
    if split_pages:
        cut = split_pages * page_size  # in units; bigram children share the boundary token
        parent = Node(key(key_tokens[: cut + 1] if bigram else key_tokens[:cut]), root)
        child = Node(key(key_tokens[cut:]), parent)
        nodes = [parent, child]
    else:
        nodes = [Node(key(key_tokens), root)] if key_tokens else []

    out = []
    for node in nodes:
        recorder.record_store(node)
        stored = recorder.take()
        out.append({
            "tokens": list(node.key.token_ids),
            "storage_keys": list(node.hash_value),
            "event_digests": list(node.event_hash_value or node.hash_value),
            "block_hashes": [str(h) for e in stored for h in e.block_hashes],
            "parent_block_hash": None if not stored or stored[0].parent_block_hash is None
            else str(stored[0].parent_block_hash),
            "plain_int64": [str(sg.hash_str_to_int64(h)) for h in node.hash_value],
        })
    return {
        "name": name, "tokens": tokens, "page_size": page_size, "bigram": bigram,
        "extra_key": extra_key, "cache_salt": cache_salt, "lora_registered": lora_registered,
        "event_format": "dynamo" if dynamo_format else "sglang", "nodes": out,
    }


def corpus(rng: random.Random):
    def rand_tokens(n):
        return [rng.choice([0, U32_MAX, rng.randrange(0, 2**32), rng.randrange(0, 200_000)])
                for _ in range(n)]

    cases = [("tokens 1..64, P=64", list(range(1, 65)), 64, {}),
             ("tokens 0..127, P=64", list(range(128)), 64, {}),
             ("all zero ids", [0] * 48, 16, {}),
             ("all 2^32-1 ids", [U32_MAX] * 48, 16, {}),
             ("empty", [], 16, {}),
             ("shorter than a page", [5, 6, 7], 16, {})]
    for P in (1, 16, 64):
        for pages in (1, 2, 3, 5) if P > 1 else (1, 2, 7, 33):
            tail = rng.randrange(0, P)  # a partial trailing page that must not be hashed
            cases.append((f"random P={P} pages={pages} tail={tail}", rand_tokens(pages * P + tail), P, {}))
            cases.append((f"bigram P={P} pages={pages}", rand_tokens(pages * P + 1 + tail), P, {"bigram": True}))
        cases.append((f"parent+child P={P}", rand_tokens(4 * P), P, {"split_pages": 2}))
        cases.append((f"bigram parent+child P={P}", rand_tokens(4 * P + 1), P, {"bigram": True, "split_pages": 1}))
    lora_id = "0123456789abcdef0123456789abcdef"
    spaces = [
        ("cache_salt", {"cache_salt": "tenant-a"}),
        ("cache_salt unicode", {"cache_salt": "t\u00e9nant-\u2603"}),
        ("cache_salt empty (= none)", {"cache_salt": ""}),
        ("extra_key, no LoRA name", {"extra_key": "ns-" + lora_id}),
        ("extra_key LoRA", {"extra_key": "ns-" + lora_id, "lora_registered": True}),
        ("extra_key LoRA + cache_salt", {"extra_key": lora_id, "cache_salt": "s1", "lora_registered": True}),
        ("extra_key + cache_salt, no LoRA name", {"extra_key": "caller-ns", "cache_salt": "s1"}),
    ]
    for label, kw in spaces:
        for fmt in (False, True):
            for P in (1, 16):
                extra = {**kw, "dynamo_format": fmt}
                fmt_name = "dynamo" if fmt else "sglang"
                cases.append((f"{label} [{fmt_name}] P={P}", rand_tokens(3 * P + 1), P, extra))
                cases.append((f"{label} [{fmt_name}] parent+child P={P}", rand_tokens(4 * P), P,
                              {**extra, "split_pages": 2}))
        cases.append((f"{label} bigram P=16", rand_tokens(2 * 16 + 1), 16, {**kw, "bigram": True}))
    cases.append(("[1,2,3,4] P=2 salt tenant-a", [1, 2, 3, 4], 2, {"cache_salt": "tenant-a"}))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=20260710)
    args = ap.parse_args()

    sg = sglang_release.load()
    rng = random.Random(args.seed)
    vectors = [run_case(sg, name, toks, P, **kw) for name, toks, P, kw in corpus(rng)]
    # Mooncake object keys of one case's storage keys, from MooncakeStore's own methods.
    keys = next(c for c in vectors if c["name"] == "tokens 0..127, P=64")["nodes"][0]["storage_keys"]
    layouts = [{}, {"tp_rank": 3}, {"tp_rank": 3, "pp_rank": 1, "pp_size": 2}, {"mla": True},
               {"mla": True, "pp_rank": 1, "pp_size": 2}, {"prefix": "tag_org-model"},
               {"tp_rank": 1, "split_factor": 2}, {"tp_rank": 1, "split_factor": 2, "pp_rank": 1, "pp_size": 2}]
    mooncake = [{"storage_keys": keys, "layout": l, "object_keys": sglang_release.mooncake_object_keys(keys, **l)}
                for l in layouts]
    doc = {
        "oracle": "sglang",
        "sglang_version": sglang_release.sglang_version(),
        "sglang_dir": str(sglang_release.SGLANG_DIR),
        "files": sg.files,
        "has_bigram": True,
        "has_namespacing": True,
        "cases": vectors,
        "mooncake": mooncake,
    }
    args.out.write_text(json.dumps(doc))
    print(f"wrote {len(vectors)} cases from sglang {doc['sglang_version']} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
