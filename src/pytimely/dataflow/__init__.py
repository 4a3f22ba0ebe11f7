"""The dataflow layer: scopes, streams, operators, capabilities."""

from pytimely.dataflow.activate import SyncActivator
from pytimely.dataflow.bins import BinTable, Move, bin_of
from pytimely.dataflow.capability import Capability, InputCapability
from pytimely.dataflow.channels import Broadcast, Direct, Exchange, Pact, Pipeline
from pytimely.dataflow.operator import OperatorInfo
from pytimely.dataflow.operators.builder import OperatorBuilder
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.operators.input import InputHandle, SyncInputHandle, UnorderedHandle
from pytimely.dataflow.operators.probe import ProbeHandle
from pytimely.dataflow.ports import InputPort, OutputPort, Session
from pytimely.dataflow.scope import LoopHandle, Scope
from pytimely.dataflow.stream import Stream, UnaryLogic

__all__ = [
    "BinTable",
    "Broadcast",
    "Capability",
    "Direct",
    "Exchange",
    "InputCapability",
    "InputHandle",
    "InputPort",
    "LoopHandle",
    "Move",
    "Notificator",
    "OperatorBuilder",
    "OperatorInfo",
    "OutputPort",
    "Pact",
    "Pipeline",
    "ProbeHandle",
    "Scope",
    "Session",
    "Stream",
    "SyncActivator",
    "SyncInputHandle",
    "UnaryLogic",
    "UnorderedHandle",
    "bin_of",
]
