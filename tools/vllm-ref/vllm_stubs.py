"""Import vLLM's parser modules without torch or a GPU.

vLLM's wheel is installed without its dependencies (torch, CUDA kernels, xgrammar's native
library are gigabytes and unused by the text parsers). Importing `vllm` itself would load torch,
so the package object is made by hand, and the few heavy modules are replaced by stand-ins that
only satisfy the imports, type annotations and decorators on the way to the parsers. Nothing in
the parsers' own logic touches them: the parser code that runs is vLLM's.
"""
import importlib.abc
import importlib.machinery
import os
import sys
import types

STUBBED = {"torch", "xgrammar", "tvm_ffi", "triton"}


class _AnyMeta(type):
    """A class whose every attribute is another such class: enough for annotations/decorators."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyMeta(name, (), {})

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __call__(cls, *args, **kwargs):
        return cls

    def __add__(cls, other):
        return other

    __radd__ = __add__

    def __bool__(cls):
        return False

    def __int__(cls):
        return 0

    def __lt__(cls, other):
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __hash__(cls):
        return id(cls)

    def __eq__(cls, other):
        return cls is other


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyMeta(name, (), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def install():
    sys.meta_path.insert(0, _StubFinder())
    site = next(p for p in sys.path if p.endswith("site-packages") and
                os.path.isdir(os.path.join(p, "vllm")))
    pkg = types.ModuleType("vllm")
    pkg.__path__ = [os.path.join(site, "vllm")]
    sys.modules["vllm"] = pkg
