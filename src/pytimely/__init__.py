"""pytimely: Timely Dataflow for Python, with progress tracking checked against its formal model."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytimely.command import execute_from_args
    from pytimely.dataflow import (
        BinTable,
        Capability,
        InputCapability,
        InputHandle,
        Move,
        Notificator,
        ProbeHandle,
        Scope,
        Stream,
    )
    from pytimely.errors import PytimelyError
    from pytimely.execute import execute
    from pytimely.order import Product
    from pytimely.progress import (
        Antichain,
        Builder,
        ChangeBatch,
        Increment,
        MutableAntichain,
        ProductSummary,
        Source,
        Target,
        Tracker,
    )
    from pytimely.worker import Worker

__version__ = "0.1.0"

# Each public name and the module it lives in: importing ``pytimely`` (which every ``pytimely.*`` import
# does first) loads none of the layers, so a process that needs only its command line, its errors or its
# config does not pay for the dataflow layer; the first use of a name imports its module (PEP 562).
_HOMES: dict[str, str] = {
    "execute_from_args": "pytimely.command",
    "BinTable": "pytimely.dataflow",
    "Capability": "pytimely.dataflow",
    "InputCapability": "pytimely.dataflow",
    "InputHandle": "pytimely.dataflow",
    "Move": "pytimely.dataflow",
    "Notificator": "pytimely.dataflow",
    "ProbeHandle": "pytimely.dataflow",
    "Scope": "pytimely.dataflow",
    "Stream": "pytimely.dataflow",
    "PytimelyError": "pytimely.errors",
    "execute": "pytimely.execute",
    "Product": "pytimely.order",
    "Antichain": "pytimely.progress",
    "Builder": "pytimely.progress",
    "ChangeBatch": "pytimely.progress",
    "Increment": "pytimely.progress",
    "MutableAntichain": "pytimely.progress",
    "ProductSummary": "pytimely.progress",
    "Source": "pytimely.progress",
    "Target": "pytimely.progress",
    "Tracker": "pytimely.progress",
    "Worker": "pytimely.worker",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here, so later lookups are plain."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytimely' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's own names and every lazily imported public name."""
    return sorted(set(globals()) | set(_HOMES))


class _Package(types.ModuleType):
    """The ``pytimely`` package, where the name ``execute`` stays the function when its module is imported."""

    def __setattr__(self, name: str, value: Any) -> None:
        # The import system binds a loaded submodule on its package: ``pytimely.execute`` would hide the
        # function ``execute`` (which an eager ``from pytimely.execute import execute`` used to rebind).
        if name == "execute" and isinstance(value, types.ModuleType):
            value = value.execute
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "Antichain",
    "BinTable",
    "Builder",
    "Capability",
    "ChangeBatch",
    "Increment",
    "InputCapability",
    "InputHandle",
    "Move",
    "MutableAntichain",
    "Notificator",
    "ProbeHandle",
    "Product",
    "ProductSummary",
    "PytimelyError",
    "Scope",
    "Source",
    "Stream",
    "Target",
    "Tracker",
    "Worker",
    "__version__",
    "execute",
    "execute_from_args",
]
