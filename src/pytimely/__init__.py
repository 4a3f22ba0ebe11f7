"""pytimely: Timely Dataflow for Python, with progress tracking checked against its formal model."""

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
