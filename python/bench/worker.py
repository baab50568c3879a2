"""npm run bench:worker [-- --json] [--requests N] [--rounds R] [--pool-tokens T]

What kvctl costs the worker, on SGLang's real cache (UnifiedRadixCache, FULL component, KV events
on), for one seeded request workload (workload.py: match_prefix + insert + evict at a full pool):

  pristine_rust    unpatched SGLang, its default Rust tree core
  pristine_python  unpatched SGLang, its Python tree core
  patched_off      patched SGLang, no kvctl flag (must pick the Rust core and cost nothing)
  patched_on       patched SGLang, kvctl on accepting every command (Think needs the
                   Python tree core, so SGLang picks it), with live TTL pins from the command layer
  patched_on_rust  patched SGLang, kvctl on accepting the commands the Rust core carries (kvctl
                   cores.py), so SGLang keeps its Rust core; the same live TTL pins

Each runs in its own process (a pristine and a patched SGLang cannot share one), rounds
alternate between them and each reports its fastest pass; the median over rounds is printed, with
each ratio's spread over rounds (a round's configurations run back to back, so a round's ratio
compares neighbours in time).
Ratios: off_ratio = patched_off / pristine_rust (bar <= 1.05), on_ratio_vs_python = patched_on /
pristine_python (bar <= 1.10), on_rust_ratio = patched_on_rust / pristine_rust (bar <= 1.15),
on_ratio_vs_rust = patched_on / pristine_rust (what accepting Think costs). With --json
the last line is one JSON object of these figures. --smoke: 40 requests, one round, one pass (the
test that the bench still runs; the figures are not a result). --configs a,b: only these
configurations (alternated the same way); the ratios whose two sides both ran are reported, e.g.
``--configs pristine_rust,patched_on_rust --rounds 15`` for the Rust-core verdict alone.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")
sys.path.insert(0, TESTS)
import sglang_tree  # noqa: E402  (builds the patched tree the way the tests do)

CONFIGS = {
    "pristine_rust": (False, ["--core", "auto"]),
    "pristine_python": (False, ["--core", "python"]),
    "patched_off": (True, []),
    "patched_on": (True, ["--kvctl", "on", "--pins", "16"]),
    "patched_on_rust": (True, ["--kvctl", "on", "--commands", "rust", "--pins", "16"]),
}


def run_one(tree, name, args, a):
    patched, extra = CONFIGS[name]
    env = dict(os.environ)
    env.pop("KVCTL_NATS_URL", None)
    env["PYTHONPATH"] = os.pathsep.join([sglang_tree.STAND_INS] + ([tree] if patched else []))
    env["PYTHONWARNINGS"] = "ignore"
    cmd = [sys.executable, os.path.join(HERE, "workload.py"), "--requests", str(a.requests), "--seed", str(a.seed),
           "--pool-tokens", str(a.pool_tokens), "--repeat", str(a.repeat), "--no-events-out", *extra]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=HERE)
    if out.returncode != 0:
        raise SystemExit(f"bench:worker: {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


BARS = (  # (figure, numerator, denominator, bar, what it says)
    ("off_ratio", "patched_off", "pristine_rust", 1.05, "patched_off / pristine_rust"),
    ("on_ratio_vs_python", "patched_on", "pristine_python", 1.10, "patched_on / pristine_python"),
    ("on_rust_ratio", "patched_on_rust", "pristine_rust", 1.15, "patched_on_rust / pristine_rust"),
    ("on_ratio_vs_rust", "patched_on", "pristine_rust", None,
     "patched_on / pristine_rust: what accepting Think costs"),
)


def measure(a) -> tuple[dict, dict]:
    """Every configuration once per round, alternated; {name: [us/request per round]}, cores."""
    with tempfile.TemporaryDirectory(prefix="kvctl-bench-worker-") as tmp:
        tree = sglang_tree.build_patched_tree(tmp)
        samples: dict = {name: [] for name in a.configs}
        cores = {}
        for r in range(a.rounds):
            for name in a.configs:
                res = run_one(tree, name, None, a)
                samples[name].append(res["us_per_req"])
                cores[name] = res["core"].rsplit(".", 1)[-1]
                print(f"round {r + 1}/{a.rounds} {name:16s} {res['us_per_req']:9.1f} us/request ({cores[name]})",
                      file=sys.stderr)
    for name in ("patched_off", "patched_on_rust"):
        if name in cores and "pristine_rust" in cores and cores[name] != cores["pristine_rust"]:
            raise SystemExit(f"bench:worker: {name} ran {cores[name]}, pristine {cores['pristine_rust']}")
    return samples, cores


def report(a, samples: dict, cores: dict) -> dict:
    """The medians, each ratio of medians with its spread over rounds (the same round's two
    configurations ran back to back), and the bars."""
    us = {name: statistics.median(v) for name, v in samples.items()}
    result = {"bench": "worker", "requests": a.requests, "pool_tokens": a.pool_tokens, "rounds": a.rounds,
              "us_per_req": {k: round(v, 2) for k, v in us.items()}}
    print(f"{'config':16s} {'us/request':>11s}  {'min..max over rounds':>22s}  core")
    for name in a.configs:
        lo, hi = min(samples[name]), max(samples[name])
        print(f"{name:16s} {us[name]:11.1f}  {lo:10.1f}..{hi:<10.1f}  {cores[name]}")
    for fig, num, den, bar, what in BARS:
        if num not in samples or den not in samples:
            continue
        per_round = sorted(x / y for x, y in zip(samples[num], samples[den]))
        result[fig] = round(us[num] / us[den], 4)
        result[fig + "_rounds"] = [round(x, 4) for x in per_round]
        spread = f"rounds {per_round[0]:.3f}..{per_round[-1]:.3f}"
        print(f"{fig:18s} {result[fig]:.3f}  ({what}; {spread}" + (f"; bar <= {bar:.2f})" if bar else ")"))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--requests", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--pool-tokens", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, from {', '.join(CONFIGS)} (default: all)")
    a = ap.parse_args()
    a.configs = [c for c in a.configs.split(",") if c]
    unknown = [c for c in a.configs if c not in CONFIGS]
    if unknown or not a.configs:
        ap.error(f"--configs: unknown configuration {', '.join(unknown) or '(none)'}; "
                 f"known: {', '.join(CONFIGS)}")
    for name, full, smoke in (("requests", 400, 40), ("rounds", 3, 1), ("repeat", 3, 1)):
        if getattr(a, name) is None:
            setattr(a, name, smoke if a.smoke else full)
    samples, cores = measure(a)
    result = report(a, samples, cores)
    if a.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
