"""``python -m kvctl_sim fleet``: the fleet process the engine (src/sim/fleet-client.ts) starts,
one per configuration. It reads frames on fd 3 and answers on fd 4 (wire.py).

Ops (each answered with one frame, ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``):
  profile  {profile}                                    -> {ref, shape}  (what sizes the workers)
  init     {profile, workers: [WorkerSpec fields]}     -> {profile: ref}
  advance  {until, inputs: [...]}                       -> {at, events, frames}
  stats    {}                                           -> {workers: {id: stats}}
Inputs: ["req", t, worker, rid, program, keep, [prompt], [output], session],
["command", t, worker, cid, [body]], ["close", t, worker, session], ["forget", program].
"""
from __future__ import annotations

import math
import os
import sys
import traceback


def _spec(d: dict):
    from .cache import WorkerSpec

    return WorkerSpec(**d)


def _profile(name: str):
    from .timing import load_profile

    return load_profile(name)


def _shape(p) -> dict:
    """The profile's SGLang settings and the rates the agent policy prices with."""
    probe = 8192
    return {
        "page_size": p.page_size, "device_kv_tokens": p.device_kv_tokens,
        "host_kv_tokens": p.host_kv_tokens, "max_prefill_tokens": p.max_prefill_tokens,
        "chunked_prefill_size": p.chunked_prefill_size,
        "max_running_requests": p.max_running_requests, "layers": p.layers,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "prefill_tokens_per_s": probe / p.prefill_s([probe], [0]),
        "h2d_tokens_per_s": probe / p.link_s("h2d", probe * p.kv_bytes_per_token),
    }


def _inputs(fleet, inputs, blob) -> None:
    def data(ref):
        return bytes(blob[ref[0]:ref[0] + ref[1]])

    for x in inputs:
        kind = x[0]
        if kind == "req":
            _, t, wid, rid, program, keep, prompt, output, session = x
            fleet.submit(t, wid, rid, program, keep, data(prompt), data(output), session)
        elif kind == "command":
            _, t, wid, cid, body = x
            fleet.command(t, wid, cid, data(body))
        elif kind == "close":
            _, t, wid, session = x
            fleet.close_session(t, wid, session)
        elif kind == "forget":
            fleet.forget(x[1])
        else:
            raise ValueError(f"inputs: unknown input {kind!r}")


def _advance(fleet, msg, blob, out_blob) -> dict:
    _inputs(fleet, msg.get("inputs", []), blob)
    until = msg["until"]
    at = fleet.advance(math.inf if until is None else until)
    events = []
    for e in fleet.out.events:
        if e[0] == "ack":
            events.append(["ack", e[1], e[2], out_blob.put(e[3])])
        else:
            events.append(list(e))
    frames = [[w, t, out_blob.put(p)] for w, t, p in fleet.out.frames]
    fleet.out.clear()
    return {"at": at if math.isfinite(at) else None, "events": events, "frames": frames,
            "busy": fleet.busy()}


def serve(fin, fout) -> int:
    from .wire import Blob, read_frame, write_frame

    fleet = None
    while True:
        got = read_frame(fin)
        if got is None:
            return 0
        msg, blob = got
        out_blob = Blob()
        try:
            op = msg.get("op")
            if op == "profile":
                p = _profile(msg["profile"])
                reply = {"ref": p.ref, "shape": _shape(p)}
            elif op == "prefill_times":
                p = _profile(msg["profile"])
                reply = {"s": [p.prefill_s([e], [c]) for e, c in zip(msg["extend"], msg["prefix"])]}
            elif op == "init":
                from .fleet import Fleet

                profile = _profile(msg["profile"])
                fleet = Fleet(profile, [_spec(d) for d in msg["workers"]])
                reply = {"profile": profile.ref}
            elif op == "advance":
                reply = _advance(fleet, msg, blob, out_blob)
            elif op == "stats":
                import time

                reply = {"workers": {w.spec.id: w.stats() for w in fleet.workers},
                         "cpu_s": time.process_time(), "advances": fleet.advances}
            elif op == "shutdown":
                write_frame(fout, {"ok": True}, out_blob)
                return 0
            else:
                raise ValueError(f"op: unknown op {op!r}")
            write_frame(fout, {"ok": True, **reply}, out_blob)
        except Exception as e:  # the engine reports it and stops the run
            traceback.print_exc(file=sys.stderr)
            write_frame(fout, {"ok": False, "error": f"{type(e).__name__}: {e}"}, Blob())


def main(argv) -> int:
    if len(argv) < 2 or argv[1] != "fleet":
        print("usage: python -m kvctl_sim fleet  (started by kvctl sim; frames on fds 3 and 4)",
              file=sys.stderr)
        return 2
    import logging
    import warnings

    import torch

    # The cache's tensor ops (free lists, slot flags) are small: torch's intra-op pool only adds
    # threads that spin between them, taking a core from the run's other fleet processes.
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with os.fdopen(3, "rb", buffering=1 << 20) as fin, os.fdopen(4, "wb", buffering=1 << 20) as fout:
        prof_dir = os.environ.get("KVCTL_SIM_CPROFILE")
        if not prof_dir:
            return serve(fin, fout)
        # A developer's knob (docs/sim.md, "Speed"): one cProfile dump per fleet process.
        import cProfile
        import time

        prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
        try:
            return prof.runcall(serve, fin, fout)
        finally:
            prof.dump_stats(os.path.join(prof_dir, f"fleet-{os.getpid()}.prof"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
