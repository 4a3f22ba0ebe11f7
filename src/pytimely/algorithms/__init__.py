"""Reusable dataflows built from pytimely's operators."""

from pytimely.algorithms.connected_components import connected_components

__all__ = ["connected_components"]
