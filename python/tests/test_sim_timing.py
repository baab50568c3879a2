"""kvctl sim's profiles (python/kvctl_sim/timing.py, profiles/): the committed GPU profiles are what
their generator writes from AIConfigurator, the interpolated step times stay near AIConfigurator's
own estimates, and a bad name or a malformed profile is refused naming what is wrong."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))

from kvctl_sim import timing  # noqa: E402
from kvctl_sim.timing import (  # noqa: E402
    LINKS,
    ProfileError,
    UnknownProfile,
    layerwise_s,
    list_profiles,
    load_profile,
)

GENERATOR = PYTHON_DIR / "kvctl_sim" / "profiles" / "generate.py"
GPU_PROFILES = [
    "h100_sxm/llama-3.1-70b",
    "h100_sxm/llama-3.1-8b",
    "h200_sxm/llama-3.1-70b",
    "h200_sxm/llama-3.1-8b",
]


def aic_site() -> Path:
    return Path(os.environ.get("KVCTL_AIC_SITE", PYTHON_DIR.parent / ".venv" / "aiconfigurator-core-0.12.0"))


def aic_engine(profile):
    site = aic_site()
    assert (site / "aiconfigurator_core").is_dir(), f"{site} missing: run python/setup_venv.sh"
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    from aiconfigurator_core.sdk.engine import EngineHandle

    src = profile.source
    return EngineHandle.compile(
        src["hf_model"],
        profile.ref["gpu"],
        src["backend"],
        backend_version=src["backend_version"],
        tp_size=profile.ref["tp"],
    )


def small_doc() -> dict:
    """A valid two-knot profile written by hand: every formula is checkable on paper."""
    return {
        "format": "kvctl-sim-profile/1",
        "ref": {"name": "toy/m", "gpu": "toy", "model": "m", "tp": 2, "validation": "hand-written"},
        "source": {},
        "model": {"layers": 4},
        "kv_bytes_per_token": 1000,
        "sglang": {
            "page_size": 16,
            "device_kv_tokens": 4096,
            "host_kv_tokens": 8192,
            "max_prefill_tokens": 2048,
            "chunked_prefill_size": 1024,
            "max_running_requests": 64,
        },
        "prefill": {
            "batch": [1, 3],
            "extend": [1, 101],
            "prefix": [0, 1000],
            # total = batch * (1 + extend/10) + prefix/100 ms; attention = prefix/100 + extend/100.
            "total_ms": [[[1.1, 11.1], [11.1, 21.1]], [[3.3, 13.3], [33.3, 43.3]]],
            "attention_ms": [[[0.01, 10.01], [1.01, 11.01]], [[0.01, 10.01], [1.01, 11.01]]],
        },
        "decode": {"batch": [1, 5], "context": [1, 1001], "ms": [[1.0, 2.0], [5.0, 10.0]]},
        "links": {link: {"gb_per_s": 2.0, "latency_us": 5.0 if link.startswith("storage") else 0.0} for link in LINKS},
    }


def test_the_gpu_profiles_exist_and_read_as_their_ref_says():
    assert list_profiles() == GPU_PROFILES
    for name in GPU_PROFILES:
        p = load_profile(name)
        gpu, model = name.split("/")
        assert p.ref == {
            "name": name,
            "gpu": gpu,
            "model": model,
            "tp": {"llama-3.1-8b": 1}.get(model, 4 if gpu == "h100_sxm" else 2),
            "validation": p.ref["validation"],
        }
        assert "aiconfigurator-core 0.12.0" in p.ref["validation"]
        kv_heads, head_dim, layers = 8, 128, 32 if model.endswith("8b") else 80
        assert p.layers == layers
        assert p.kv_bytes_per_token == 2 * layers * kv_heads * head_dim * 2
        assert p.page_size == 64 and p.host_kv_tokens == 2 * p.device_kv_tokens
        assert p.device_kv_tokens % p.page_size == 0 and p.device_kv_tokens > 300_000
        assert (p.max_prefill_tokens, p.chunked_prefill_size) == (16384, 8192)


def test_step_times_grow_with_work_and_a_cached_prefix_is_cheaper_than_recompute():
    for name in GPU_PROFILES:
        p = load_profile(name)
        cold = p.prefill_s([16384], [0])
        warm = p.prefill_s([384], [16000])
        assert 0 < warm < cold / 5, name
        assert p.prefill_s([2048], [0]) < p.prefill_s([4096], [0]) < p.prefill_s([8192], [0])
        assert p.prefill_s([1024], [0]) < p.prefill_s([1024], [32768]) < p.prefill_s([1024], [131072])
        assert p.decode_s(1, 1024) < p.decode_s(64, 64 * 1024) < p.decode_s(64, 64 * 65536)
        assert p.prefill_s([], []) == 0.0 and p.decode_s(0, 0) == 0.0
    big, small = load_profile("h100_sxm/llama-3.1-70b"), load_profile("h100_sxm/llama-3.1-8b")
    assert big.prefill_s([8192], [0]) > 2 * small.prefill_s([8192], [0])


def test_the_published_aiconfigurator_anchors_come_back_from_the_tables():
    # AIConfigurator 0.12.0's own CLI estimates (static_ctx, batch 1), on the knots of the grid.
    assert load_profile("h100_sxm/llama-3.1-8b").prefill_s([4096], [0]) == pytest.approx(0.0941, abs=5e-4)
    assert load_profile("h100_sxm/llama-3.1-70b").prefill_s([16384], [0]) == pytest.approx(1.2206, abs=5e-4)


def test_interpolated_times_stay_within_a_few_percent_of_aiconfigurator_itself():
    # Batches of the shapes a scheduler forms, off the grid's knots; the reference is
    # AIConfigurator's run at the same mean request and the same attention scale.
    for name in ("h100_sxm/llama-3.1-8b", "h200_sxm/llama-3.1-70b"):
        p = load_profile(name)
        eng = aic_engine(p)._engine
        rng = random.Random(name)
        errors = []
        for _ in range(150):
            n = rng.choice([1, 1, 2, 3, 5, 9, 17, 40])
            ext = [max(1, int(2 ** rng.uniform(0, 13))) for _ in range(n)]
            while sum(ext) > p.max_prefill_tokens:
                ext = [max(1, e // 2) for e in ext]
            pre = [0 if rng.random() < 0.3 else int(2 ** rng.uniform(6, 16.9)) for _ in range(n)]
            me, mp = round(sum(ext) / n), round(sum(pre) / n)
            work = sum((2 * b + e) * e for e, b in zip(ext, pre))
            scale = work / ((2 * sum(pre) / n + sum(ext) / n) * sum(ext)) if n > 1 else 1.0
            ctx, _ = eng.run_static_per_op(n, 1, max(me, 1) + mp, 1, mp, scale, 1.0, "static_ctx", 32)
            want = sum(op[1] for op in ctx) / 1e3
            errors.append(abs(p.prefill_s(ext, pre) - want) / want)
            b, c = rng.randint(1, 600), int(2 ** rng.uniform(5, 16.9))
            want = eng.predict_decode_latency(b, c, 2) / 1e3
            errors.append(abs(p.decode_s(b, b * c) - want) / want)
        errors.sort()
        assert errors[len(errors) // 2] < 0.02, (name, errors[len(errors) // 2])
        assert errors[-1] < 0.12, (name, errors[-1])


def test_a_mixed_batch_costs_its_true_attention_not_its_mean_requests():
    p = load_profile("h100_sxm/llama-3.1-70b")
    together = p.prefill_s([512, 8192], [100_000, 0])
    # The mean request (4352 new tokens on a 50,000 prefix, twice) does far more attention work.
    assert together < p.prefill_s([4352, 4352], [50_000, 50_000]) * 0.8
    assert together > p.prefill_s([8192], [0])


def test_links_are_latency_plus_bytes_over_the_workers_bandwidth():
    p = load_profile("h100_sxm/llama-3.1-70b")
    assert p.link_s("h2d", 0) == 0.0
    assert p.link_s("h2d", 55_600_000_000 * 4) == pytest.approx(1.0 + 10e-6)
    assert p.link_s("storage_read", 23_750_000_000) == pytest.approx(0.25 + 100e-6)
    assert p.link_bytes_per_s("d2h") == 4 * 55.6e9
    with pytest.raises(ValueError, match="unknown link 'nvlink': links are h2d, d2h, storage_read, storage_write"):
        p.link_s("nvlink", 1)


def test_layerwise_overlap_exposes_one_layer_of_the_faster_stream():
    assert layerwise_s(1.0, 0.0, 80) == 1.0
    assert layerwise_s(1.0, 0.5, 10) == pytest.approx(0.05 + 1.0)  # loads hide behind compute
    assert layerwise_s(0.5, 1.0, 10) == pytest.approx(1.0 + 0.05)  # compute hides behind loads
    assert layerwise_s(1.0, 1.0, 1) == 2.0  # one layer: nothing overlaps


def test_a_hand_written_profile_interpolates_exactly_on_its_planes(tmp_path: Path):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(small_doc()))
    p = load_profile(path)
    assert (p.name, p.layers, p.page_size, p.max_running_requests) == ("toy/m", 4, 16, 64)
    # One request of 51 new tokens on a 500 prefix: total = 1 * 6.1 + 5 ms.
    assert p.prefill_s([51], [500]) == pytest.approx(0.0111)
    # Past the last knot the planes extend linearly: 201 tokens on 2000 = 21.1 + 20 ms.
    assert p.prefill_s([201], [2000]) == pytest.approx(0.0411)
    # Two requests: mean 51 on 500, attention work (2*0+2)*2 + (2*1000+100)*100 over 2*(1000+51)*51.
    scale = (4 + 210_000) / (2 * 1051 * 51)
    want = 2 * 6.1 + 5 + (scale - 1) * (5 + 0.51)
    assert p.prefill_s([2, 100], [0, 1000]) == pytest.approx(want * 1e-3)
    assert p.decode_s(3, 3 * 501) == pytest.approx(4.5e-3)
    assert p.link_s("storage_write", 2_000_000_000) == pytest.approx(1.0 + 5e-6)
    with pytest.raises(ValueError, match="2 extend lengths but 1 prefix"):
        p.prefill_s([1, 2], [0])


def test_an_unknown_gpu_or_model_lists_what_exists():
    with pytest.raises(UnknownProfile) as e:
        load_profile("a100_sxm/llama-3.1-8b")
    assert str(e.value) == (
        "unknown GPU in profile 'a100_sxm/llama-3.1-8b': GPUs are h100_sxm, h200_sxm "
        "(profiles: " + ", ".join(GPU_PROFILES) + ")"
    )
    with pytest.raises(
        UnknownProfile,
        match=r"unknown model in profile 'h200_sxm/qwen3-32b': "
        r"h200_sxm has llama-3.1-70b, llama-3.1-8b$",
    ):
        load_profile("h200_sxm/qwen3-32b")
    with pytest.raises(UnknownProfile, match="unknown model in profile 'h100_sxm': h100_sxm has llama-3.1-70b"):
        load_profile("h100_sxm")
    with pytest.raises(UnknownProfile, match="no profile file"):
        load_profile("/nonexistent/profile.json")


BAD_EDITS = [
    (lambda d: d.update(format="kvctl-sim-profile/2"), "format: expected 'kvctl-sim-profile/1'"),
    (lambda d: d["ref"].pop("tp"), "ref.tp: missing"),
    (lambda d: d["ref"].update(name="toy/other"), "ref.name: 'toy/other' is not ref.gpu/ref.model"),
    (lambda d: d["sglang"].update(page_size=0), "sglang.page_size: expected a positive integer, got 0"),
    (lambda d: d["sglang"].update(device_kv_tokens=1.5), "sglang.device_kv_tokens: expected int, got 1.5"),
    (lambda d: d.update(kv_bytes_per_token=True), "kv_bytes_per_token: expected int, got True"),
    (lambda d: d["prefill"].update(extend=[101, 1]), "prefill.extend: expected a non-empty strictly increasing"),
    (lambda d: d["prefill"]["total_ms"][1].pop(), "prefill.total_ms[1]: expected 2 entries (the axis length), got 1"),
    (
        lambda d: d["prefill"]["attention_ms"][0][1].__setitem__(0, -1),
        "prefill.attention_ms[0][1][0]: expected a non-negative",
    ),
    (lambda d: d["decode"]["ms"][0].__setitem__(1, "fast"), "decode.ms[0][1]: expected a finite number, got 'fast'"),
    (lambda d: d["decode"].update(context=[]), "decode.context: expected a non-empty strictly increasing"),
    (lambda d: d["links"]["h2d"].update(gb_per_s=0), "links.h2d.gb_per_s: expected a positive number, got 0.0"),
    (lambda d: d["links"].pop("storage_read"), "links.storage_read.gb_per_s: missing"),
]


@pytest.mark.parametrize("edit,message", BAD_EDITS, ids=[m.split(":")[0] for _, m in BAD_EDITS])
def test_a_malformed_profile_is_refused_naming_the_file_and_field(tmp_path: Path, edit, message):
    doc = copy.deepcopy(small_doc())
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


def test_a_profile_that_is_not_json_is_refused(tmp_path: Path):
    path = tmp_path / "broken.json"
    path.write_text('{"format": ')
    with pytest.raises(ProfileError, match="not JSON"):
        load_profile(path)
    path.write_text("[1, 2]")
    with pytest.raises(ProfileError, match="expected a JSON object"):
        load_profile(path)


def run_generator(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GENERATOR), *args], capture_output=True, text=True, timeout=600)


def test_the_committed_profiles_are_what_the_generator_writes_and_a_hand_edit_is_caught(tmp_path: Path):
    clean = run_generator("--check")
    assert clean.returncode == 0, clean.stderr
    copy_dir = tmp_path / "profiles"
    for name in GPU_PROFILES:
        (copy_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (copy_dir / f"{name}.json").write_text((timing.PROFILES_DIR / f"{name}.json").read_text())
    edited = copy_dir / "h200_sxm" / "llama-3.1-8b.json"
    doc = json.loads(edited.read_text())
    doc["decode"]["ms"][0][0] *= 0.9
    edited.write_text(json.dumps(doc))
    r = run_generator("--check", "--dir", str(copy_dir))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"{edited} differs from what its generator writes: run python/kvctl_sim/profiles/generate.py"
    )


def _stretch_step_by_step(p, bs: int, kv: int, most: int, t: float, stop: float):
    k = 0
    while k < most and (k == 0 or t < stop):
        t += p.decode_s(bs, kv)
        kv += bs
        k += 1
    return k, t


def test_a_decode_stretch_is_the_step_by_step_sum_float_for_float(tmp_path: Path):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(small_doc()))
    rng = random.Random(5)
    for p in [load_profile(n) for n in GPU_PROFILES] + [load_profile(path)]:
        for _ in range(300):
            bs = rng.choice([1, 2, 3, 7, 64, 200, rng.randint(1, 512)])
            kv = bs * rng.randint(1, 140_000) + rng.randint(0, bs - 1)
            t = rng.uniform(0, 5000)
            stop = t + rng.choice([0.0, 1e-4, rng.uniform(0, 30), math.inf])
            most = rng.choice([1, 2, rng.randint(1, 4000)])
            got = p.decode_stretch(bs, kv, most, t, stop)
            assert got == _stretch_step_by_step(p, bs, kv, most, t, stop), (p.name, bs, kv, most)
    # At least one step, however near the stop; never past `most`.
    p = load_profile("h100_sxm/llama-3.1-8b")
    assert p.decode_stretch(4, 4096, 10, 1.0, 1.0)[0] == 1
    assert p.decode_stretch(4, 4096, 10, 1.0, math.inf)[0] == 10
