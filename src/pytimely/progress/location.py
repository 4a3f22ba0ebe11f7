"""Names for places in a dataflow graph: operator output ports (Sources) and input ports (Targets).

Seed ``001_c5a48b9716911bb9.txt`` ("Dataflow Structure"): from the progress
tracker's point of view an output port is a *source* of timestamped data and an
input port is its *target*. Distinct types keep the two from being confused.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Location", "Source", "Target"]


@dataclass(frozen=True, slots=True, order=True)
class Source:
    """Output port ``port`` of operator ``node``."""

    node: int
    port: int

    def __repr__(self) -> str:
        return f"Source({self.node}, {self.port})"


@dataclass(frozen=True, slots=True, order=True)
class Target:
    """Input port ``port`` of operator ``node``."""

    node: int
    port: int

    def __repr__(self) -> str:
        return f"Target({self.node}, {self.port})"


Location = Source | Target
"""Any place a pointstamp can sit."""
