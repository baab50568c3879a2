"""kvctl sim builds SGLang's page-hash extension once, from a stable copy of the patched tree's
source (python/kvctl_sim/native_hash.py): the hashes it publishes are those SGLang's own loader's
build gives, byte for byte."""
from __future__ import annotations

from array import array

from sglang.srt.mem_cache.cpp_utils import native_hash as nh


def _hashes():
    out = []
    prior = None
    for n, page in ((64, 64), (128, 64), (5, 4), (256, None)):
        tokens = array("q", ((i * 7919 + n) % 128_256 for i in range(n)))
        got = nh.get_native_hash(tokens, prior, page)
        out.append(got)
        prior = bytes.fromhex(got[-1] if isinstance(got, list) else got)
    return out


def test_preloaded_extension_gives_sglangs_own_hashes(monkeypatch):
    from kvctl_sim import native_hash as ours

    own = _hashes()  # SGLang's loader, from the tree's own path
    assert len(own) == 4 and all(own)
    monkeypatch.setattr(nh, "_load_native_hash_module", nh._load_native_hash_module)
    monkeypatch.setattr(ours, "_MODULE", None)
    module = ours.preload_native_hash()
    assert nh._load_native_hash_module() is module
    assert module.__name__.startswith("kvctl_sim_hicache_hash_")
    assert _hashes() == own
