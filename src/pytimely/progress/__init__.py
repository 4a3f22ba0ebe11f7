"""Progress tracking: timestamps, frontiers, reachability and the exchange of progress between workers.

This layer knows nothing of workers, operators or transports; see seeds
``001_c5a48b9716911bb9.txt`` (the mechanism) and ``000_306a8e6bd5c43d47.txt``
(its verified model).
"""

from pytimely.progress.broadcast import (
    ProgressAggregator,
    ProgressBatch,
    ProgressMode,
    ProgressReceiver,
    ProgressSender,
    justified,
)
from pytimely.progress.change_batch import ChangeBatch
from pytimely.progress.frontier import Antichain, MutableAntichain, frontier_of
from pytimely.progress.location import Location, Source, Target
from pytimely.progress.reachability import Builder, PointstampOrder, Tracker
from pytimely.progress.timestamp import Increment, PathSummary, ProductSummary, Timestamp, identity_for, minimum_for

__all__ = [
    "Antichain",
    "Builder",
    "ChangeBatch",
    "Increment",
    "Location",
    "MutableAntichain",
    "PathSummary",
    "PointstampOrder",
    "ProductSummary",
    "ProgressAggregator",
    "ProgressBatch",
    "ProgressMode",
    "ProgressReceiver",
    "ProgressSender",
    "Source",
    "Target",
    "Timestamp",
    "Tracker",
    "frontier_of",
    "identity_for",
    "justified",
    "minimum_for",
]
