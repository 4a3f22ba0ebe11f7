"""The formal module model of seed ``004_6a2e88f6382bfe5d.txt`` (CloudKeeper) §2.1.

A module is the 6-tuple ``M = (I, O, L, deps, S, C)``: in-ports, out-ports, I/O-port pairs (loop modules
only), ``deps`` mapping each in-port to the out-ports that may depend on it, submodules (parent modules only)
and connections between the ports of the module and of its direct submodules. Connections come in the four
kinds of §2.1: parent-in → child-in, sibling (child-out → child-in), child-out → parent-out and short-circuit
(parent-in → parent-out).

Values here are immutable and validated when made: unknown ports, connections of no kind, two sources for
one port and ``deps`` naming ports the module lacks raise :class:`~pytimely.errors.ModuleDefinitionError`
naming them. ``minimal_deps`` computes the least ``deps`` of a parent module from its children's (§2.1:
"keeping sets deps minimal is most efficient").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import ModuleDefinitionError

__all__ = ["Connection", "ConnectionKind", "Kind", "Module", "Port", "PortRef", "minimal_deps"]


class Kind(enum.Enum):
    """What a module is: user code, a composition, a loop, or a constant."""

    SIMPLE = "simple"
    COMPOSITE = "composite"
    LOOP = "loop"
    INPUT = "input"


class ConnectionKind(enum.Enum):
    """The four kinds of connection of §2.1."""

    PARENT_IN_TO_CHILD_IN = "parent-in to child-in"
    SIBLING = "sibling"
    CHILD_OUT_TO_PARENT_OUT = "child-out to parent-out"
    SHORT_CIRCUIT = "short-circuit"


@dataclass(frozen=True, slots=True)
class Port:
    """A formal parameter: an in-port or an out-port, with the Python type of its values."""

    name: str
    type: Any = object


@dataclass(frozen=True, slots=True, order=True)
class PortRef:
    """A port of the parent module (``module is None``) or of the direct submodule named ``module``."""

    module: str | None
    port: str

    def __str__(self) -> str:
        return self.port if self.module is None else f"{self.module}.{self.port}"


@dataclass(frozen=True, slots=True)
class Connection:
    """A value flows from ``source`` to ``target``; ``kind`` is filled in by the parent that holds it."""

    source: PortRef
    target: PortRef
    kind: ConnectionKind | None = None

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


@dataclass(frozen=True, eq=False)
class Module:
    """``(I, O, L, deps, S, C)`` of §2.1, plus the module's name, kind and what a simple or input module runs."""

    name: str
    kind: Kind
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    deps: Mapping[str, frozenset[str]] = field(default_factory=dict)
    submodules: tuple[Module, ...] = ()
    connections: tuple[Connection, ...] = ()
    io_ports: tuple[tuple[str, str], ...] = ()
    function: Any = None
    value: Any = None

    def __post_init__(self) -> None:
        ins = [p.name for p in self.inputs]
        outs = [p.name for p in self.outputs]
        for what, names in (("in-port", ins), ("out-port", outs)):
            seen: set[str] = set()
            for name in names:
                if name in seen:
                    raise ModuleDefinitionError(f"module {self.name!r} has two {what}s named {name!r}")
                seen.add(name)
        if self.kind in (Kind.SIMPLE, Kind.INPUT) and (self.submodules or self.connections):
            raise ModuleDefinitionError(f"{self.kind.value} module {self.name!r} cannot have submodules")
        if self.kind is not Kind.LOOP and self.io_ports:
            raise ModuleDefinitionError(f"only loop modules have I/O ports; {self.name!r} is {self.kind.value}")
        for i, o in self.io_ports:
            if i not in ins or o not in outs:
                raise ModuleDefinitionError(f"loop {self.name!r}: I/O pair ({i!r}, {o!r}) names a port it lacks")
        deps: dict[str, frozenset[str]] = {}
        for i in ins:
            given = self.deps.get(i)
            deps[i] = frozenset(outs) if given is None and self.kind is not Kind.COMPOSITE else frozenset(given or ())
        for i, os in self.deps.items():
            if i not in ins:
                raise ModuleDefinitionError(f"module {self.name!r}: deps names in-port {i!r}, which it lacks")
            unknown = sorted(set(os) - set(outs))
            if unknown:
                raise ModuleDefinitionError(f"module {self.name!r}: deps({i}) names out-ports it lacks: {unknown}")
        children: dict[str, Module] = {}
        for child in self.submodules:
            if child.name in children:
                raise ModuleDefinitionError(f"module {self.name!r} has two submodules named {child.name!r}")
            children[child.name] = child
        object.__setattr__(self, "_children", children)
        classified = tuple(self._classify(c) for c in self.connections)
        object.__setattr__(self, "connections", classified)
        targets: dict[PortRef, Connection] = {}
        for c in classified:
            if c.target in targets:
                raise ModuleDefinitionError(
                    f"module {self.name!r}: port {c.target} has two sources ({targets[c.target].source} and {c.source})"
                )
            targets[c.target] = c
        if self.kind is Kind.COMPOSITE and not self.deps:
            deps = {i: os for i, os in minimal_deps(self).items()}
        object.__setattr__(self, "deps", deps)

    def child(self, name: str) -> Module:
        """The direct submodule named ``name``."""
        children: dict[str, Module] = self._children  # type: ignore[attr-defined]
        try:
            return children[name]
        except KeyError:
            raise ModuleDefinitionError(f"module {self.name!r} has no submodule {name!r}") from None

    @property
    def input_names(self) -> tuple[str, ...]:
        """The names of ``I``."""
        return tuple(p.name for p in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The names of ``O``."""
        return tuple(p.name for p in self.outputs)

    def _classify(self, c: Connection) -> Connection:
        source, target = c.source, c.target
        if source.module is None:
            if source.port not in self.input_names:
                raise ModuleDefinitionError(f"module {self.name!r}: connection {c} starts at no in-port of it")
            if target.module is None:
                if target.port not in self.output_names:
                    raise ModuleDefinitionError(f"module {self.name!r}: connection {c} ends at no out-port of it")
                kind = ConnectionKind.SHORT_CIRCUIT
            else:
                if target.port not in self.child(target.module).input_names:
                    raise ModuleDefinitionError(f"module {self.name!r}: connection {c} ends at no in-port")
                kind = ConnectionKind.PARENT_IN_TO_CHILD_IN
        else:
            if source.port not in self.child(source.module).output_names:
                raise ModuleDefinitionError(f"module {self.name!r}: connection {c} starts at no out-port")
            if target.module is None:
                if target.port not in self.output_names:
                    raise ModuleDefinitionError(f"module {self.name!r}: connection {c} ends at no out-port of it")
                kind = ConnectionKind.CHILD_OUT_TO_PARENT_OUT
            else:
                if target.port not in self.child(target.module).input_names:
                    raise ModuleDefinitionError(f"module {self.name!r}: connection {c} ends at no in-port")
                kind = ConnectionKind.SIBLING
        return Connection(source, target, kind)

    def __repr__(self) -> str:
        return f"<{self.kind.value} module {self.name!r}>"


def minimal_deps(module: Module) -> dict[str, frozenset[str]]:
    """For a parent module, ``deps(i)``: the out-ports reachable from in-port ``i`` through connections and the
    children's own ``deps`` (the least sets §2.1 allows)."""
    follow: dict[PortRef, list[PortRef]] = {}
    for c in module.connections:
        follow.setdefault(c.source, []).append(c.target)
    for child in module.submodules:
        for i, os in child.deps.items():
            follow.setdefault(PortRef(child.name, i), []).extend(PortRef(child.name, o) for o in sorted(os))
    result: dict[str, frozenset[str]] = {}
    for i in module.input_names:
        seen: set[PortRef] = set()
        stack = [PortRef(None, i)]
        while stack:
            ref = stack.pop()
            for nxt in follow.get(ref, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        result[i] = frozenset(r.port for r in seen if r.module is None and r.port in module.output_names)
    return result


def ports(names: Iterable[str]) -> tuple[Port, ...]:
    """Untyped ports with these names (a shorthand for tests and hand-written modules)."""
    return tuple(Port(n) for n in names)
