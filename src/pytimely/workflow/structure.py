"""Structure fingerprints: what a module computes besides its inputs, as one digest.

A simple module's is its code fingerprint and its parameters' values; a constant's its value's; a composite's or
a loop's its wiring and its children's structure fingerprints (so parameters and constants at every depth) and,
for a loop, its I/O pairs and stop condition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytimely.workflow.fingerprint import code_fingerprint, derive, value_fingerprint
from pytimely.workflow.model import Kind, Module


def simple_fingerprint(code: str, params: Mapping[str, Any]) -> str:
    """What a simple module computes besides its inputs: its code fingerprint and its parameters' values."""
    return derive(code, {"params": dict(params)}, {})


def structure_fingerprint(module: Module, child_fp: Callable[[Module], str] | None = None) -> str:
    """A fingerprint of what a module computes: a simple module's code and parameters, a constant's value, or a
    parent's wiring, its children's structure (so parameters and constants at every depth) and, for a loop, its
    I/O pairs and stop condition."""
    sub = child_fp or structure_fingerprint
    if module.kind is Kind.SIMPLE:
        return simple_fingerprint(code_fingerprint(module.function), module.params)
    if module.kind is Kind.INPUT:
        return value_fingerprint(module.value)
    params: dict[str, Any] = {
        "kind": module.kind.value,
        "inputs": list(module.input_names),
        "outputs": list(module.output_names),
        "connections": sorted(f"{c.source}->{c.target}" for c in module.connections),
        "io": [list(pair) for pair in module.io_ports],
        "deps": {i: sorted(outs) for i, outs in sorted(module.deps.items())},
    }
    if module.kind is Kind.LOOP:
        params["continue"] = module.continue_port
    children = {child.name: sub(child) for child in module.submodules}
    return derive("structure", params, children)
