"""kvctl sim's workers: SGLang 0.5.23's own cache code (the patched tree, UnifiedRadixCache with
its HiCache host tier, session references and priority eviction), kvctl's worker command layer on
the same code path a patched worker runs, mock pools that hold no KV bytes, and a
continuous-batching scheduler whose forward and copies take the profile's times on one virtual
clock (worker.py). The engine that drives them, with the gateway's own routing, admission and
policy objects, is src/sim/ (TypeScript).
"""
