"""Helper of test_sim_storage.py (run as a script, with the patched SGLang tree on PYTHONPATH as
conftest.py leaves it): one small fleet with HiCache's L3 (python/kvctl_sim/storage.py). A
program's first turn is cached, then other programs push it out of device and host; its second
turn (the first's prompt and answer, then a few new tokens) arrives. Prints one JSON line: the
second turn's cached tokens, the storage hit tokens and every link's bytes, per worker.

    python sim_l3_fleet.py PROFILE STORAGE [WORKERS]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvctl_sim.cache import WorkerSpec  # noqa: E402
from kvctl_sim.fleet import Fleet  # noqa: E402
from kvctl_sim.timing import load_profile  # noqa: E402

PAGE = 16
DEVICE = 2048
HOST = 4096
PROMPT = 1024


def tokens(seed: int, n: int) -> bytes:
    return (np.arange(n, dtype="<i4") + 1 + seed * 100_000).tobytes()


def run(fleet: Fleet, t: float, wid: str, rid: str, program: str, keep: int, prompt: bytes) -> dict:
    fleet.submit(t, wid, rid, program, keep, prompt, tokens(900 + len(fleet.sequences), 8), None)
    while True:
        fleet.advance(math.inf)
        for e in fleet.out.events:
            if e[0] == "finish" and e[1] == rid:
                fleet.out.clear()
                return {"t": e[2], "cached": e[3], "host_loaded": e[4], "computed": e[5]}
        fleet.out.clear()


def case(profile, storage: str, workers: int) -> dict:
    specs = [WorkerSpec(id=f"w{i}", page_size=PAGE, device_tokens=DEVICE, host_tokens=HOST,
                        chunked_prefill_size=profile.chunked_prefill_size, storage=storage)
             for i in range(workers)]
    fleet = Fleet(profile, specs)
    t = run(fleet, 0.0, "w0", "a0", "a", 0, tokens(1, PROMPT))["t"]
    # Six other prompts of the same size go through w0: its device + host (6K tokens) cannot keep a.
    for k in range(6):
        t = run(fleet, t + 1.0, "w0", f"o{k}", f"o{k}", 0, tokens(10 + k, PROMPT))["t"]
    # a's second turn: its whole first sequence, then new tokens; on the last worker.
    keep = len(fleet.sequences["a"])
    last = f"w{workers - 1}"
    second = run(fleet, t + 30.0, last, "a1", "a", keep, tokens(2, 64))
    stats = {w.spec.id: w.stats() for w in fleet.workers}
    return {"storage": storage, "second": second, "keep": keep, "workers": stats}


def main() -> None:
    profile = load_profile(sys.argv[1])
    for arg in sys.argv[2:]:
        storage, workers = arg.split(":")
        print(json.dumps(case(profile, storage, int(workers))), flush=True)


if __name__ == "__main__":
    main()
