"""CPU stand-in for torchvision (test bed only; listed in python/README.md).

Why: the PyPI torchvision wheel is built against CUDA torch (its _C.so links libtorch_cuda.so), so
it cannot be imported beside the CPU torch of the test bed, and no CPU build is reachable from a
package registry here. SGLang 0.5.23 imports torchvision at module level only from multimodal
helpers (srt/configs/deepseek_ocr.py, srt/multimodal/internvl_utils.py) and, through
transformers' AutoProcessor, from image/video processors; the import chain of the cache modules
drags those in, but nothing in the KV cache path calls them.

What it does: every `torchvision.*` submodule is synthesised on import; every attribute is a
placeholder that can be referenced, subscripted or chained at import time, and raises when
called. `InterpolationMode` is a real enum because class bodies use its members as defaults.
"""
import enum
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kvctl-cpu-stand-in"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class _Unavailable:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __getitem__(self, _item):
        return self

    def __or__(self, _other):
        return self

    __ror__ = __or__

    def __call__(self, *_a, **_k):
        raise RuntimeError(f"{self._name}: torchvision is a CPU stand-in in the kvctl test bed")

    def __mro_entries__(self, _bases):
        return (object,)


def _module_getattr(modname):
    def __getattr__(attr):
        if attr == "InterpolationMode":
            return InterpolationMode
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{modname}.{attr}")

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())

__getattr__ = _module_getattr(__name__)
