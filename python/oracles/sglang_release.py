"""Load SGLang's own hashing code from the pinned release in the venv, without importing the
whole `sglang` package (its __init__ needs numpy, pydantic and GPU kernels that a CPU-only
oracle venv lacks).

Which SGLang files run, verbatim:
  * sglang/srt/mem_cache/cpp_utils/native_hash.py + hash_binding.cpp: the page hash itself
    (`get_native_hash`, JIT-built by SGLang's own loader sglang/srt/utils/cpp_extension_loader.py
    with torch.utils.cpp_extension, exactly as the worker builds it);
  * sglang/srt/mem_cache/utils.py: get_hash_str, storage_namespace_seed, get_storage_hash_str,
    hash_str_to_int64, compute_node_hash_values, compute_node_event_hash_values (function
    bodies taken from the file by `ast`, since the module's own imports need GPU kernels);
  * sglang/srt/disaggregation/kv_events.py: _NAMESPACE_SEED_TAG, kv_event_namespace_seed,
    namespaced_block_hash (by `ast` too: the module imports pydantic);
  * sglang/srt/mem_cache/radix_cache.py: class RadixKey (by `ast`);
  * sglang/srt/mem_cache/events.py: imported as a module; KVCacheEventRecorder publishes the
    block hashes the worker's KV events carry;
  * sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py: MooncakeStore's object-key
    methods (_tag_keys, _get_mha/_get_mla/_get_mha_split_heads_buffer_meta) and the suffix
    statements of its __init__ (by `ast`, run on a stand-in `self`; the module needs mooncake).
Nothing is installed; the JIT build goes to TORCH_EXTENSIONS_DIR (a cache dir) as in SGLang.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import os
import sys
import types
from pathlib import Path
from typing import Any, Optional

import importlib.util

_spec = importlib.util.find_spec("sglang")
if _spec is None or not _spec.submodule_search_locations:
    raise ImportError("sglang is not installed in this Python environment")
SGLANG_DIR = Path(list(_spec.submodule_search_locations)[0])


def sglang_version() -> str:
    from importlib.metadata import version

    return version("sglang")


def _package(name: str, path: Path) -> types.ModuleType:
    """Register an empty package whose submodules load from the real release directory."""
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]  # type: ignore[attr-defined]
        sys.modules[name] = mod
    return mod


def _extract(path: Path, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Exec the named top-level functions/classes/assignments of a release file, verbatim."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    body = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            body.append(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in names for t in node.targets
        ):
            body.append(node)
    found = {n.name if not isinstance(n, ast.Assign) else n.targets[0].id for n in body}  # type: ignore[union-attr]
    missing = names - found
    if missing:
        raise ImportError(f"{path}: missing {sorted(missing)} in this sglang release")
    module = ast.Module(body=body, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return namespace


def _load() -> types.SimpleNamespace:
    for pkg in ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.mem_cache",
                "sglang.srt.mem_cache.cpp_utils", "sglang.srt.disaggregation"):
        _package(pkg, SGLANG_DIR.joinpath(*pkg.split(".")[1:]))

    native_hash = importlib.import_module("sglang.srt.mem_cache.cpp_utils.native_hash")

    import hashlib
    from array import array
    from typing import Iterator, List, Tuple, Union

    common = {
        "__name__": "sglang_oracle", "__builtins__": __builtins__, "hashlib": hashlib,
        "array": array, "Any": Any, "Optional": Optional, "List": List, "Tuple": Tuple,
        "Iterator": Iterator, "Union": Union, "annotations": None,
    }
    utils_ns = _extract(
        SGLANG_DIR / "srt/mem_cache/utils.py",
        {"get_hash_str", "storage_namespace_seed", "get_storage_hash_str", "hash_str_to_int64",
         "compute_node_hash_values", "compute_node_event_hash_values", "split_node_hash_value"},
        dict(common, get_native_hash=native_hash.get_native_hash),
    )
    kv_ns = _extract(
        SGLANG_DIR / "srt/disaggregation/kv_events.py",
        {"_NAMESPACE_SEED_TAG", "kv_event_namespace_seed", "namespaced_block_hash"},
        dict(common),
    )
    radix_ns = _extract(SGLANG_DIR / "srt/mem_cache/radix_cache.py", {"RadixKey"}, dict(common))

    # Stand-ins for the event wire structs (msgspec/pydantic in the release); the recorder only
    # constructs them, and the oracle reads back block_hashes / parent_block_hash.
    @dataclasses.dataclass
    class BlockStored:
        block_hashes: list
        parent_block_hash: Optional[int]
        token_ids: list
        block_size: int
        lora_id: Optional[int]
        medium: Any = None
        cache_salt: Optional[str] = None
        session_id: Optional[str] = None
        lora_name: Optional[str] = None

    @dataclasses.dataclass
    class BlockRemoved:
        block_hashes: list
        medium: Any = None

    class AllBlocksCleared:
        pass

    class StorageMedium(str, enum.Enum):
        GPU = "GPU"
        CPU = "CPU_PINNED"

    kv_mod = types.ModuleType("sglang.srt.disaggregation.kv_events")
    for k in ("kv_event_namespace_seed", "namespaced_block_hash", "_NAMESPACE_SEED_TAG"):
        setattr(kv_mod, k, kv_ns[k])
    kv_mod.BlockStored, kv_mod.BlockRemoved = BlockStored, BlockRemoved
    kv_mod.AllBlocksCleared, kv_mod.StorageMedium = AllBlocksCleared, StorageMedium
    sys.modules["sglang.srt.disaggregation.kv_events"] = kv_mod

    utils_mod = types.ModuleType("sglang.srt.mem_cache.utils")
    for k, v in utils_ns.items():
        if callable(v) and not k.startswith("__"):
            setattr(utils_mod, k, v)
    sys.modules["sglang.srt.mem_cache.utils"] = utils_mod
    events = importlib.import_module("sglang.srt.mem_cache.events")

    return types.SimpleNamespace(
        native_hash=native_hash, events=events, RadixKey=radix_ns["RadixKey"],
        **{k: v for k, v in utils_ns.items() if callable(v) and not k.startswith("__")},
        kv_event_namespace_seed=kv_ns["kv_event_namespace_seed"],
        namespaced_block_hash=kv_ns["namespaced_block_hash"],
        files=[
            "sglang/srt/mem_cache/cpp_utils/native_hash.py",
            "sglang/srt/mem_cache/cpp_utils/hash_binding.cpp",
            "sglang/srt/utils/cpp_extension_loader.py",
            "sglang/srt/mem_cache/utils.py",
            "sglang/srt/disaggregation/kv_events.py",
            "sglang/srt/mem_cache/radix_cache.py",
            "sglang/srt/mem_cache/events.py",
            "sglang/" + MOONCAKE_FILE,
        ],
    )


MOONCAKE_FILE = "srt/mem_cache/storage/mooncake_store/mooncake_store.py"


def mooncake_object_keys(hex_keys: list, *, prefix: Optional[str] = None, mla: bool = False,
                         tp_rank: int = 0, pp_rank: int = 0, pp_size: int = 1,
                         split_factor: int = 0) -> list:
    """Object keys as MooncakeStore builds them, from the release's own methods."""
    path = SGLANG_DIR / MOONCAKE_FILE
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MooncakeStore")
    wanted = {"_tag_keys", "_get_mha_buffer_meta", "_get_mla_buffer_meta",
              "_get_mha_split_heads_buffer_meta", "_pack_multi_buffer_meta"}
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    for m in methods:  # staticmethod decorators are re-applied below
        m.decorator_list = []
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")

    def is_suffix_stmt(node):
        if isinstance(node, ast.Assign):
            return any(isinstance(t, ast.Attribute) and t.attr in ("enable_pp", "split_factor")
                       for t in node.targets)
        if isinstance(node, ast.If):
            src = ast.unparse(node.test)
            return src in ("self.enable_pp", "self.should_split_heads")
        return False

    # The statements of the one block that holds `self.enable_pp = ...`, in source order.
    bodies = [node.body for node in ast.walk(init) if isinstance(getattr(node, "body", None), list)]
    home = next(b for b in bodies if any(is_suffix_stmt(x) and isinstance(x, ast.Assign) for x in b))
    suffix_stmts = [stmt for stmt in home if is_suffix_stmt(stmt)]
    if len(suffix_stmts) < 3:
        raise ImportError(f"{path}: MooncakeStore.__init__ suffix logic not found")
    ns: dict = {"List": list, "Any": Any, "Tuple": tuple, "Sequence": (list, tuple)}
    exec(compile(ast.Module(body=methods, type_ignores=[]), str(path), "exec"), ns)
    setup = ast.FunctionDef(
        name="_suffix_setup", args=init.args, body=suffix_stmts, decorator_list=[], returns=None,
        type_params=[],
    )
    setup.args = ast.arguments(posonlyargs=[], args=[ast.arg("self")], kwonlyargs=[],
                               kw_defaults=[], defaults=[])
    exec(compile(ast.fix_missing_locations(ast.Module(body=[setup], type_ignores=[])), str(path), "exec"), ns)

    n_ptrs = {"mha": 2, "mla": 1}

    class Pool:
        def get_page_buffer_meta(self, indices):
            k = n_ptrs["mla" if mla else "mha"] * len(indices)
            return list(range(k)), [1] * k

        def get_split_heads_page_buffer_meta(self, indices, factor):
            k = 2 * factor * len(indices)
            return list(range(k)), [1] * k

    store = types.SimpleNamespace(
        pp_size=pp_size, pp_rank=pp_rank, local_rank=tp_rank, is_mla_backend=mla,
        should_split_heads=split_factor > 0, config_prefix=prefix, mem_pool_host=Pool(),
        storage_config=types.SimpleNamespace(tp_size=1, tp_lcm_size=max(split_factor, 1)),
    )
    for name in wanted:
        fn = ns[name]
        setattr(store, name, fn if name == "_pack_multi_buffer_meta" else types.MethodType(fn, store))
    ns["_suffix_setup"](store)
    keys = store._tag_keys(list(hex_keys))
    indices = list(range(len(keys)))
    if mla:
        return store._get_mla_buffer_meta(keys, indices)[0]
    if store.should_split_heads:
        return store._get_mha_split_heads_buffer_meta(keys, indices)[0]
    return store._get_mha_buffer_meta(keys, indices)[0]


_cached: Optional[types.SimpleNamespace] = None


def load() -> types.SimpleNamespace:
    global _cached
    if _cached is None:
        os.environ.setdefault(
            "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "kvctl-torch-extensions")
        )
        _cached = _load()
    return _cached
