"""kvctl worker side: block-hash index, tier-aware pins and the command layer for SGLang.

Placed into the SGLang tree as ``sglang.srt.kvctl`` by ``kvctl patch apply`` (see
patches/sglang-0.5.23/files); the .patch files only call into ``hooks``.
"""
