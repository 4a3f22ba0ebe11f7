"""The dataflow layer: scopes, streams, operators, capabilities."""

from pytimely.dataflow.bins import BinTable, Move, bin_of
from pytimely.dataflow.capability import Capability, InputCapability
from pytimely.dataflow.operator import OperatorInfo
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.operators.input import InputHandle
from pytimely.dataflow.operators.probe import ProbeHandle
from pytimely.dataflow.ports import InputPort, OutputPort, Session
from pytimely.dataflow.scope import LoopHandle, Scope
from pytimely.dataflow.stream import Stream

__all__ = [
    "BinTable",
    "Capability",
    "InputCapability",
    "InputHandle",
    "InputPort",
    "LoopHandle",
    "Move",
    "Notificator",
    "OperatorInfo",
    "OutputPort",
    "ProbeHandle",
    "Scope",
    "Session",
    "Stream",
    "bin_of",
]
