"""Lazy package exports (PEP 562): a public name is imported from its submodule on first access.

The code location imports light submodules (configs) of packages whose other submodules import torch; eager
re-exports in the package ``__init__`` would import torch for every Dagster process.
"""

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], list[str]]:
    """``(__getattr__, __all__)`` for ``package`` whose public names live in the submodules ``exports`` names.

    Args:
        package: the package's ``__name__``.
        exports: public name -> submodule (relative to ``package``) defining it.
    """

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{exports[name]}"), name)
        setattr(sys.modules[package], name, value)  # later accesses skip __getattr__
        return value

    return __getattr__, sorted(exports)
