"""pytimely: Timely Dataflow for Python, with progress tracking checked against its formal model."""

from pytimely.errors import PytimelyError
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

__version__ = "0.1.0"

__all__ = [
    "Antichain",
    "Builder",
    "ChangeBatch",
    "Increment",
    "MutableAntichain",
    "Product",
    "ProductSummary",
    "PytimelyError",
    "Source",
    "Target",
    "Tracker",
    "__version__",
]
