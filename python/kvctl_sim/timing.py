"""Step and link times for ``kvctl sim``: one profile per GPU and model.

A profile is one JSON file, ``profiles/<gpu>/<model>.json`` (format ``kvctl-sim-profile/1``,
docs/sim.md "Profiles"). It holds the SGLang settings a deployment on that GPU would run with
(pool sizes, prefill budgets), the KV geometry of the model, tabulated step times and the link
bandwidths between the KV tiers. The GPU profiles' tables are AIConfigurator's estimates,
written by ``profiles/generate.py``; the ``cpu`` profile's are measured on this project's own
CPU servers. Both are read the same way here: piecewise-linear interpolation over the grid,
linear extrapolation past its last knot.

    from kvctl_sim.timing import load_profile, list_profiles, UnknownProfile
    p = load_profile("h100_sxm/llama-3.1-70b")
    p.prefill_s([512, 8192], [60000, 0]); p.decode_s(64, 64 * 9000); p.link_s("h2d", 1 << 30)

The simulator calls these once per scheduler step, so they avoid allocation and numpy.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from pathlib import Path
from typing import Any, Sequence

FORMAT = "kvctl-sim-profile/1"
LINKS = ("h2d", "d2h", "storage_read", "storage_write")
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

__all__ = [
    "FORMAT",
    "LINKS",
    "PROFILES_DIR",
    "Profile",
    "ProfileError",
    "UnknownProfile",
    "layerwise_s",
    "list_profiles",
    "load_profile",
]


class UnknownProfile(LookupError):
    """No profile of that name; the message lists the GPUs and models that exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown profile"


class ProfileError(ValueError):
    """A profile file that does not follow the format; the message names the file and field."""


def list_profiles(root: Path = PROFILES_DIR) -> list[str]:
    """Every profile's name (``<gpu>/<model>``), sorted."""
    return sorted(f"{p.parent.name}/{p.stem}" for p in root.glob("*/*.json"))


def load_profile(name: str | Path, root: Path = PROFILES_DIR) -> Profile:
    """The profile named ``<gpu>/<model>``, or a profile file given by its path (``*.json``)."""
    text = str(name)
    if text.endswith(".json"):
        return Profile.from_file(Path(text))
    gpu, _, model = text.partition("/")
    path = root / gpu / f"{model}.json"
    if not gpu or not model or not path.is_file():
        raise UnknownProfile(_unknown_message(text, gpu, list_profiles(root)))
    return Profile.from_file(path)


def _unknown_message(name: str, gpu: str, names: list[str]) -> str:
    gpus = sorted({n.split("/")[0] for n in names})
    models = sorted(n.split("/")[1] for n in names if n.split("/")[0] == gpu)
    if gpu in gpus:
        return f"unknown model in profile {name!r}: {gpu} has {', '.join(models)}"
    every = ", ".join(names) or "none"
    return f"unknown GPU in profile {name!r}: GPUs are {', '.join(gpus) or 'none'} (profiles: {every})"


def layerwise_s(compute_s: float, load_s: float, layers: int) -> float:
    """Wall time of a forward whose KV loads overlap it layer by layer, as HiCache's do.

    Layer i's KV arrives over the link before layer i's attention runs; loads are serial on the
    link and layers serial on the GPU, each split evenly over the layers. The first layer's load
    is always exposed; after it the slower of the two streams sets the pace.
    """
    if load_s <= 0.0:
        return compute_s
    per_load, per_compute = load_s / layers, compute_s / layers
    return per_load + (layers - 1) * max(per_load, per_compute) + per_compute


class _Grid:
    """Values on the product of strictly increasing axes, row-major (last axis fastest)."""

    __slots__ = ("axes", "values", "strides")

    def __init__(self, axes: list[list[float]], values: list[float]) -> None:
        self.axes = axes
        self.values = values
        strides, step = [], 1
        for axis in reversed(axes):
            strides.append(step)
            step *= len(axis)
        self.strides = strides[::-1]

    @staticmethod
    def _locate(axis: list[float], x: float) -> tuple[int, float]:
        if len(axis) == 1:
            return 0, 0.0
        i = min(max(bisect_right(axis, x) - 1, 0), len(axis) - 2)
        lo = axis[i]
        return i, (x - lo) / (axis[i + 1] - lo)

    def at2(self, x: float, y: float) -> float:
        (i, tx), (j, ty) = self._locate(self.axes[0], x), self._locate(self.axes[1], y)
        v, sx, sy = self.values, self.strides[0] if tx else 0, self.strides[1] if ty else 0
        k = i * self.strides[0] + j * self.strides[1]
        a = v[k] + (v[k + sy] - v[k]) * ty
        b = v[k + sx] + (v[k + sx + sy] - v[k + sx]) * ty
        return a + (b - a) * tx

    def at3(self, x: float, y: float, z: float) -> float:
        (i, tx), (j, ty), (m, tz) = (
            self._locate(self.axes[0], x),
            self._locate(self.axes[1], y),
            self._locate(self.axes[2], z),
        )
        s0, s1, s2 = self.strides
        k = i * s0 + j * s1 + m * s2
        sx, sy, sz = s0 if tx else 0, s1 if ty else 0, s2 if tz else 0
        v = self.values
        a0, a1 = v[k], v[k + sy]
        b0, b1 = v[k + sx], v[k + sx + sy]
        a = a0 + (v[k + sz] - a0) * tz
        a += (a1 + (v[k + sy + sz] - a1) * tz - a) * ty
        b = b0 + (v[k + sx + sz] - b0) * tz
        b += (b1 + (v[k + sx + sy + sz] - b1) * tz - b) * ty
        return a + (b - a) * tx


class Profile:
    """One GPU x model: SGLang's settings for it, its step times and its links (seconds)."""

    __slots__ = (
        "path",
        "ref",
        "source",
        "layers",
        "kv_bytes_per_token",
        "page_size",
        "device_kv_tokens",
        "host_kv_tokens",
        "max_prefill_tokens",
        "chunked_prefill_size",
        "max_running_requests",
        "_prefill",
        "_attention",
        "_decode",
        "_links",
    )

    def __init__(self, doc: dict[str, Any], path: Path | None = None) -> None:
        where = str(path) if path is not None else "profile"
        r = _Reader(doc, where)
        if r.get("format", str) != FORMAT:
            raise ProfileError(f"{where}: format: expected {FORMAT!r}, got {doc.get('format')!r}")
        self.path = path
        self.ref = _ref(r)
        self.source = r.get("source", dict)
        self.layers = r.positive_int("model.layers")
        self.kv_bytes_per_token = r.positive_int("kv_bytes_per_token")
        for field in (
            "page_size",
            "device_kv_tokens",
            "host_kv_tokens",
            "max_prefill_tokens",
            "chunked_prefill_size",
            "max_running_requests",
        ):
            setattr(self, field, r.positive_int(f"sglang.{field}", allow_zero=field == "host_kv_tokens"))
        self._prefill = r.grid("prefill", ("batch", "extend", "prefix"), "total_ms")
        has_attention = isinstance(doc.get("prefill"), dict) and "attention_ms" in doc["prefill"]
        self._attention = r.grid("prefill", ("batch", "extend", "prefix"), "attention_ms") if has_attention else None
        self._decode = r.grid("decode", ("batch", "context"), "ms")
        self._links = {link: r.link(link) for link in LINKS}

    @classmethod
    def from_file(cls, path: Path) -> Profile:
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise UnknownProfile(f"no profile file {path}") from None
        except json.JSONDecodeError as e:
            raise ProfileError(f"{path}: not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise ProfileError(f"{path}: expected a JSON object")
        return cls(doc, path)

    @property
    def name(self) -> str:
        return self.ref["name"]

    def prefill_s(self, extend_lens: Sequence[int], prefix_lens: Sequence[int]) -> float:
        """One prefill batch: each request's new (extended) tokens and its cached prefix.

        The table is indexed by the batch's mean request, as AIConfigurator's own context-phase
        estimate is; attention is then scaled by the batch's true attention work over that of
        the mean request (SGLang's simulator does the same), since one long prefix beside short
        requests costs far less than the mean would say.
        """
        n = len(extend_lens)
        if n != len(prefix_lens):
            raise ValueError(f"prefill_s: {n} extend lengths but {len(prefix_lens)} prefix lengths")
        if n == 0:
            return 0.0
        total_e = total_p = work = 0
        for e, p in zip(extend_lens, prefix_lens):
            total_e += e
            total_p += p
            work += (2 * p + e) * e
        if total_e <= 0:
            return 0.0
        mean_e, mean_p = total_e / n, total_p / n
        ms = self._prefill.at3(n, mean_e, mean_p)
        if self._attention is not None and n > 1:
            scale = work / ((2 * mean_p + mean_e) * mean_e * n)
            ms += (scale - 1.0) * self._attention.at3(n, mean_e, mean_p)
        return max(ms, 0.0) * 1e-3

    def decode_s(self, batch_size: int, kv_tokens: int) -> float:
        """One decode step of ``batch_size`` requests holding ``kv_tokens`` KV tokens in all."""
        if batch_size <= 0:
            return 0.0
        return max(self._decode.at2(batch_size, kv_tokens / batch_size), 0.0) * 1e-3

    def decode_stretch(self, batch_size: int, kv_tokens: int, most: int, t: float,
                       stop: float) -> tuple[int, float]:
        """Decode steps of one batch from ``t``, its KV growing by ``batch_size`` tokens a step: at
        least one, at most ``most``, the last the first to end at or past ``stop``; returns (steps,
        end). The same sum, float for float, as ``decode_s`` step by step (``_Grid.at2`` inlined),
        with the batch's axis located once: a stretch can run thousands of steps."""
        g = self._decode
        i, tx = g._locate(g.axes[0], batch_size)
        ys, v = g.axes[1], g.values
        s0, s1 = g.strides
        sx, base = (s0 if tx else 0), i * s0
        one, last = len(ys) == 1, len(ys) - 2
        k = 0
        while k < most and (k == 0 or t < stop):
            y = kv_tokens / batch_size
            if one:
                j, ty = 0, 0.0
            else:
                j = min(max(bisect_right(ys, y) - 1, 0), last)
                lo = ys[j]
                ty = (y - lo) / (ys[j + 1] - lo)
            sy = s1 if ty else 0
            n = base + j * s1
            a = v[n] + (v[n + sy] - v[n]) * ty
            b = v[n + sx] + (v[n + sx + sy] - v[n + sx]) * ty
            t += max(a + (b - a) * tx, 0.0) * 1e-3
            kv_tokens += batch_size
            k += 1
        return k, t

    def link_s(self, link: str, nbytes: int) -> float:
        """Seconds to move ``nbytes`` over one of LINKS (the whole worker: every TP rank's share)."""
        try:
            bytes_per_s, latency_s = self._links[link]
        except KeyError:
            raise ValueError(f"unknown link {link!r}: links are {', '.join(LINKS)}") from None
        if nbytes <= 0:
            return 0.0
        return latency_s + nbytes / bytes_per_s

    def link_bytes_per_s(self, link: str) -> float:
        if link not in self._links:
            raise ValueError(f"unknown link {link!r}: links are {', '.join(LINKS)}")
        return self._links[link][0]

    def __repr__(self) -> str:
        return f"Profile({self.name!r})"


def _ref(r: _Reader) -> dict[str, Any]:
    ref = {
        "name": r.get("ref.name", str),
        "gpu": r.get("ref.gpu", str),
        "model": r.get("ref.model", str),
        "tp": r.positive_int("ref.tp"),
        "validation": r.get("ref.validation", str),
    }
    if ref["name"] != f"{ref['gpu']}/{ref['model']}":
        raise ProfileError(f"{r.where}: ref.name: {ref['name']!r} is not ref.gpu/ref.model")
    return ref


class _Reader:
    """Field access that names the file and the dotted field in every error."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:
        self.doc, self.where = doc, where

    def get(self, dotted: str, kind: type) -> Any:
        node: Any = self.doc
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ProfileError(f"{self.where}: {dotted}: missing")
            node = node[part]
        if kind is float and isinstance(node, int) and not isinstance(node, bool):
            node = float(node)
        if not isinstance(node, kind) or isinstance(node, bool):
            raise ProfileError(f"{self.where}: {dotted}: expected {kind.__name__}, got {node!r}")
        return node

    def positive_int(self, dotted: str, allow_zero: bool = False) -> int:
        v = self.get(dotted, int)
        if v < 0 or (v == 0 and not allow_zero):
            raise ProfileError(f"{self.where}: {dotted}: expected a positive integer, got {v}")
        return v

    def number(self, dotted: str, positive: bool = True) -> float:
        v = self.get(dotted, float)
        if v != v or v in (float("inf"), float("-inf")) or v < 0 or (positive and v == 0):
            raise ProfileError(
                f"{self.where}: {dotted}: expected a {'positive' if positive else 'non-negative'} number, got {v}"
            )
        return v

    def axis(self, dotted: str) -> list[float]:
        raw = self.get(dotted, list)
        axis = [self._num(f"{dotted}[{i}]", x) for i, x in enumerate(raw)]
        if not axis or any(b <= a for a, b in zip(axis, axis[1:])):
            raise ProfileError(f"{self.where}: {dotted}: expected a non-empty strictly increasing list")
        return axis

    def grid(self, table: str, axis_names: tuple[str, ...], values: str) -> _Grid:
        axes = [self.axis(f"{table}.{a}") for a in axis_names]
        flat: list[float] = []
        self._flatten(f"{table}.{values}", self.get(f"{table}.{values}", list), [len(a) for a in axes], flat)
        return _Grid(axes, flat)

    def _flatten(self, dotted: str, node: Any, shape: list[int], out: list[float]) -> None:
        if not isinstance(node, list) or len(node) != shape[0]:
            got = len(node) if isinstance(node, list) else repr(node)
            raise ProfileError(f"{self.where}: {dotted}: expected {shape[0]} entries (the axis length), got {got}")
        for i, item in enumerate(node):
            if len(shape) > 1:
                self._flatten(f"{dotted}[{i}]", item, shape[1:], out)
            else:
                v = self._num(f"{dotted}[{i}]", item)
                if v < 0:
                    raise ProfileError(f"{self.where}: {dotted}[{i}]: expected a non-negative time, got {v}")
                out.append(v)

    def _num(self, dotted: str, x: Any) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x in (float("inf"), float("-inf")):
            raise ProfileError(f"{self.where}: {dotted}: expected a finite number, got {x!r}")
        return float(x)

    def link(self, name: str) -> tuple[float, float]:
        gb_per_s = self.number(f"links.{name}.gb_per_s")
        latency_us = self.number(f"links.{name}.latency_us", positive=False)
        return gb_per_s * 1e9, latency_us * 1e-6
