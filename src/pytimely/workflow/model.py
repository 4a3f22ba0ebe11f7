"""The module model of seed ``004_6a2e88f6382bfe5d.txt`` (CloudKeeper) §2.1, made concrete.

A module is the 6-tuple ``M = (I, O, L, deps, S, C)``: in-ports (:attr:`Module.inputs`), out-ports
(:attr:`Module.outputs`), I/O-port pairs (:attr:`Module.io_ports`, loop modules only), ``deps``
(:attr:`Module.deps`, each in-port to the out-ports that may depend on it), submodules
(:attr:`Module.submodules`, unique names within the parent) and connections (:attr:`Module.connections`, pairs
of :class:`PortRef` naming the module's own ports or a direct submodule's) classified into the four kinds of
§2.1 (:class:`ConnectionKind`). Ports have a name and a Python type.

Kinds (:class:`Kind`):

* ``SIMPLE``: user code; :attr:`Module.function` is the Python function (a module-level function, pickled by
  reference), called as ``function(**inputs, **params)`` with :attr:`Module.params` the bound parameters;
  ``deps(i)`` is every out-port unless declared otherwise;
* ``COMPOSITE``: submodules and connections; ``deps`` is computed minimally (:func:`minimal_deps`);
* ``LOOP``: a composite body run again while its ``continue`` out-port (:attr:`Module.continue_port`) is
  true, each I/O pair ``(i, o)`` feeding out-port ``o``'s value to in-port ``i`` of the next iteration;
* ``INPUT``: a constant, :attr:`Module.value`, on out-port ``out``.

Every module has a qualified :attr:`Module.path` (``report/clean``): its name at the top, the parent's path and
its name below; usable as a staging key prefix. :meth:`Module.walk` lists a module and everything below it.

Modules are immutable values, validated when made: unknown ports, duplicate names, two sources for one port,
``deps`` naming ports the module lacks (:class:`~pytimely.errors.ModuleDefinitionError`), a connection whose
source type the target does not accept (:class:`~pytimely.errors.PortTypeError`, see :func:`is_assignable`), a
submodule in-port or parent out-port that nothing feeds (:class:`~pytimely.errors.UnconnectedPortError`) and
cycles among siblings (:class:`~pytimely.errors.ModuleCycleError`), each naming the ports.

The usual way to make modules is the DSL in :mod:`pytimely.workflow.dsl` (``@simple``, ``@composite``,
``@loop``, ``constant``); calling a module inside a ``@composite`` or ``@loop`` body adds it as a submodule.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import (
    ModuleCycleError,
    ModuleDefinitionError,
    PortTypeError,
    SinkModuleError,
    UnconnectedPortError,
)

__all__ = [
    "CONTINUE",
    "Connection",
    "ConnectionKind",
    "Kind",
    "Module",
    "Port",
    "PortRef",
    "is_assignable",
    "minimal_deps",
    "ports",
]

CONTINUE = "continue"
"""The name of a loop module's continue out-port."""

_NAME = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]*")


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
    """A formal parameter: an in-port or an out-port, with the Python type of its values.

    ``optional`` in-ports (of simple modules: parameters with a default) may stay unconnected.
    """

    name: str
    type: Any = Any
    optional: bool = False


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
    """``(I, O, L, deps, S, C)`` of §2.1, plus the module's name, kind, path and what it runs or holds."""

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
    params: Mapping[str, Any] = field(default_factory=dict)
    continue_port: str | None = None
    path: str = ""
    retries: int = 0
    """A simple module's further attempts after a failure, a worker's death or a timeout."""
    timeout: float | None = None
    """A simple module's limit in seconds per attempt (``ModuleTimeoutError`` past it)."""
    executor: str | None = None
    """The name of the executor a simple module runs on (``"spark"``, ``"process"``), else the run's default."""
    backoff: float = 1.0
    """Seconds before a simple module's first retry; each further retry waits twice as long as the one before."""
    writes: tuple[str, ...] = ()
    """The files a simple module writes (``{name}`` filled from its parameters), relative to the run's folder: part
    of its outputs (see :mod:`pytimely.workflow.writes`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ModuleDefinitionError(
                f"module name {self.name!r} must be letters, digits and _ . = - (it is a staging key segment)"
            )
        path = self.path or self.name
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "params", types.MappingProxyType(dict(self.params)))
        object.__setattr__(self, "_input_names", tuple(getattr(p, "name", p) for p in self.inputs))
        object.__setattr__(self, "_output_names", tuple(getattr(p, "name", p) for p in self.outputs))
        self._check_ports()
        parent = self.kind in (Kind.COMPOSITE, Kind.LOOP)
        if not parent and (self.submodules or self.connections):
            raise ModuleDefinitionError(f"{self.kind.value} module {path!r} cannot have submodules or connections")
        if self.kind is not Kind.SIMPLE and (self.function is not None or self.params or self.writes):
            raise ModuleDefinitionError(f"only simple modules run a function; {path!r} is {self.kind.value}")
        if not isinstance(self.backoff, int | float) or self.backoff < 0:
            raise ModuleDefinitionError(f"module {path!r}: backoff must be seconds >= 0, got {self.backoff!r}")
        self._check_loop()
        children: dict[str, Module] = {}
        placed: list[Module] = []
        for child in self.submodules:
            if not isinstance(child, Module):
                raise ModuleDefinitionError(f"module {path!r}: submodule {child!r} is not a module")
            if child.name in children:
                raise ModuleDefinitionError(f"module {path!r} has two submodules named {child.name!r}")
            child = child._placed(f"{path}/{child.name}")
            children[child.name] = child
            placed.append(child)
        object.__setattr__(self, "submodules", tuple(placed))
        object.__setattr__(self, "_children", children)
        object.__setattr__(self, "_sources", {})
        classified = tuple(self._classify(c) for c in self.connections)
        object.__setattr__(self, "connections", classified)
        if parent:
            self._check_sources()
            self._check_cycles()
            for child in placed:
                if not child.outputs:
                    # A module runs only for the out-ports somebody requests: one without any would silently
                    # never run. Its effect has to be an out-port (the path it wrote, a count) to be recorded.
                    raise SinkModuleError(
                        f"module {path!r}: submodule {child.name!r} has no out-ports, so it would never run; "
                        "return what it did (the path written, a count) and connect that to an out-port"
                    )
        object.__setattr__(self, "deps", types.MappingProxyType(self._deps()))

    # -- structure -------------------------------------------------------------------------------------------

    def child(self, name: str) -> Module:
        """The direct submodule named ``name``."""
        children: dict[str, Module] = self._children  # type: ignore[attr-defined]
        try:
            return children[name]
        except KeyError:
            raise ModuleDefinitionError(f"module {self.path!r} has no submodule {name!r}") from None

    @property
    def input_names(self) -> tuple[str, ...]:
        """The names of ``I``."""
        names: tuple[str, ...] = self._input_names  # type: ignore[attr-defined]
        return names

    @property
    def output_names(self) -> tuple[str, ...]:
        """The names of ``O``."""
        names: tuple[str, ...] = self._output_names  # type: ignore[attr-defined]
        return names

    def input(self, name: str) -> Port:
        """The in-port ``name``."""
        for p in self.inputs:
            if p.name == name:
                return p
        raise ModuleDefinitionError(f"module {self.path!r} has no in-port {name!r}")

    def output(self, name: str) -> Port:
        """The out-port ``name``."""
        for p in self.outputs:
            if p.name == name:
                return p
        raise ModuleDefinitionError(f"module {self.path!r} has no out-port {name!r}")

    def source_of(self, target: PortRef) -> PortRef | None:
        """The port feeding ``target`` (a child's in-port or this module's out-port), if any."""
        sources: dict[PortRef, PortRef] = self._sources  # type: ignore[attr-defined]
        return sources.get(target)

    def targets_of(self, source: PortRef) -> tuple[PortRef, ...]:
        """The ports fed by ``source`` (this module's in-port or a child's out-port)."""
        return tuple(c.target for c in self.connections if c.source == source)

    def walk(self) -> Iterator[Module]:
        """This module and every module below it, parents before children."""
        yield self
        for child in self.submodules:
            yield from child.walk()

    def find(self, path: str) -> Module:
        """The module at ``path`` (as in :attr:`path`) in this module's tree."""
        for m in self.walk():
            if m.path == path:
                return m
        raise ModuleDefinitionError(f"module {self.path!r} has nothing at {path!r}")

    # -- copies ----------------------------------------------------------------------------------------------

    def named(self, name: str) -> Module:
        """The same module under another name (a submodule instance's name in its parent)."""
        return dataclasses.replace(self, name=name, path="")

    def with_params(self, **params: Any) -> Module:
        """A simple module with these parameters bound (keyword-only parameters of its function)."""
        if self.kind is not Kind.SIMPLE:
            raise ModuleDefinitionError(f"only simple modules take parameters; {self.path!r} is {self.kind.value}")
        clash = sorted(set(params) & set(self.input_names))
        if clash:
            raise ModuleDefinitionError(f"module {self.path!r}: {clash[0]!r} is an in-port, not a parameter")
        return dataclasses.replace(self, params={**self.params, **params})

    def without_inputs(self, names: Iterable[str]) -> Module:
        """A simple module without these (optional) in-ports: the function's defaults are used instead."""
        drop = set(names)
        if not drop:
            return self
        if self.kind is not Kind.SIMPLE:
            raise ModuleDefinitionError(f"only a simple module's in-ports can be left out; {self.path!r} is not")
        for name in sorted(drop):
            if not self.input(name).optional:
                raise UnconnectedPortError(f"module {self.path!r}: in-port {name!r} is required")
        return dataclasses.replace(
            self,
            inputs=tuple(p for p in self.inputs if p.name not in drop),
            deps={i: os for i, os in self.deps.items() if i not in drop},
        )

    def _placed(self, path: str) -> Module:
        return self if self.path == path else dataclasses.replace(self, path=path)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside a ``@composite``/``@loop`` body: add this module as a submodule and return its out-ports.

        Outside one: a simple module runs its function, an input module gives its value.
        """
        from pytimely.workflow import dsl

        return dsl.call_module(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<{self.kind.value} module {self.path!r}>"

    # -- validation ------------------------------------------------------------------------------------------

    def _check_ports(self) -> None:
        for what, group in (("in-port", self.inputs), ("out-port", self.outputs)):
            seen: set[str] = set()
            for p in group:
                if not isinstance(p, Port):
                    raise ModuleDefinitionError(f"module {self.path!r}: {what} {p!r} is not a Port")
                if not _NAME.fullmatch(p.name):
                    raise ModuleDefinitionError(
                        f"module {self.path!r}: {what} name {p.name!r} must be letters, digits and _ . = -"
                    )
                if p.name in seen:
                    raise ModuleDefinitionError(f"module {self.path!r} has two {what}s named {p.name!r}")
                seen.add(p.name)
        for i, os in self.deps.items():
            if i not in self.input_names:
                raise ModuleDefinitionError(f"module {self.path!r}: deps names in-port {i!r}, which it lacks")
            unknown = sorted(set(os) - set(self.output_names))
            if unknown:
                raise ModuleDefinitionError(f"module {self.path!r}: deps({i}) names out-ports it lacks: {unknown}")

    def _check_loop(self) -> None:
        if self.kind is not Kind.LOOP:
            if self.io_ports or self.continue_port is not None:
                raise ModuleDefinitionError(
                    f"only loop modules have I/O ports and a continue port; {self.path!r} is {self.kind.value}"
                )
            return
        if self.continue_port is None:
            object.__setattr__(self, "continue_port", CONTINUE)
        flag = self.output(str(self.continue_port))
        if not is_assignable(flag.type, bool):
            raise PortTypeError(f"loop {self.path!r}: continue port {flag.name!r} carries {_tn(flag.type)}, not bool")
        seen: set[str] = set()
        for i, o in self.io_ports:
            if i not in self.input_names or o not in self.output_names:
                raise ModuleDefinitionError(f"loop {self.path!r}: I/O pair ({i!r}, {o!r}) names a port it lacks")
            if i in seen:
                raise ModuleDefinitionError(f"loop {self.path!r}: in-port {i!r} is in two I/O pairs")
            seen.add(i)
            if o == self.continue_port:
                raise ModuleDefinitionError(f"loop {self.path!r}: the continue port cannot feed in-port {i!r}")
            if not is_assignable(self.output(o).type, self.input(i).type):
                raise PortTypeError(
                    f"loop {self.path!r}: out-port {o} ({_tn(self.output(o).type)}) cannot feed in-port {i} "
                    f"({_tn(self.input(i).type)}) in the next iteration"
                )

    def _classify(self, c: Connection) -> Connection:
        if not isinstance(c, Connection):
            raise ModuleDefinitionError(f"module {self.path!r}: connection {c!r} is not a Connection")
        source, target = c.source, c.target
        where = f"module {self.path!r}: connection {c}"
        if source.module is None:
            if source.port not in self.input_names:
                raise ModuleDefinitionError(f"{where} starts at no in-port of {self.name!r}")
            source_port = self.input(source.port)
        else:
            if source.port not in self.child(source.module).output_names:
                raise ModuleDefinitionError(f"{where} starts at no out-port of {source.module!r}")
            source_port = self.child(source.module).output(source.port)
        if target.module is None:
            if target.port not in self.output_names:
                raise ModuleDefinitionError(f"{where} ends at no out-port of {self.name!r}")
            target_port = self.output(target.port)
        else:
            if target.port not in self.child(target.module).input_names:
                raise ModuleDefinitionError(f"{where} ends at no in-port of {target.module!r}")
            target_port = self.child(target.module).input(target.port)
        if not is_assignable(source_port.type, target_port.type):
            raise PortTypeError(f"{where}: {_tn(source_port.type)} is not assignable to {_tn(target_port.type)}")
        if source.module is None:
            kind = ConnectionKind.SHORT_CIRCUIT if target.module is None else ConnectionKind.PARENT_IN_TO_CHILD_IN
        else:
            kind = ConnectionKind.CHILD_OUT_TO_PARENT_OUT if target.module is None else ConnectionKind.SIBLING
        return Connection(source, target, kind)

    def _check_sources(self) -> None:
        sources: dict[PortRef, PortRef] = {}
        for c in self.connections:
            if c.target in sources:
                raise ModuleDefinitionError(
                    f"module {self.path!r}: port {c.target} has two sources ({sources[c.target]} and {c.source})"
                )
            sources[c.target] = c.source
        object.__setattr__(self, "_sources", sources)
        for child in self.submodules:
            for p in child.inputs:
                if PortRef(child.name, p.name) not in sources:
                    raise UnconnectedPortError(f"module {self.path!r}: in-port {child.name}.{p.name} has no source")
        for p in self.outputs:
            if PortRef(None, p.name) not in sources:
                raise UnconnectedPortError(f"module {self.path!r}: out-port {p.name} has no source")

    def _check_cycles(self) -> None:
        after: dict[str, list[Connection]] = {child.name: [] for child in self.submodules}
        for c in self.connections:
            if c.kind is ConnectionKind.SIBLING:
                assert c.source.module is not None
                after[c.source.module].append(c)
        # Depth-first search with colours; the grey stack is the cycle when an edge closes one.
        colour: dict[str, int] = dict.fromkeys(after, 0)
        trail: list[Connection] = []

        def visit(name: str) -> None:
            colour[name] = 1
            for c in after[name]:
                nxt = c.target.module
                assert nxt is not None
                trail.append(c)
                if colour[nxt] == 1:
                    start = next(k for k, t in enumerate(trail) if t.source.module == nxt)
                    cycle = ", ".join(str(t) for t in trail[start:])
                    raise ModuleCycleError(f"module {self.path!r}: sibling connections form a cycle: {cycle}")
                if colour[nxt] == 0:
                    visit(nxt)
                trail.pop()
            colour[name] = 2

        for name in after:
            if colour[name] == 0:
                visit(name)

    def _deps(self) -> dict[str, frozenset[str]]:
        outs = frozenset(self.output_names)
        if self.kind in (Kind.SIMPLE, Kind.INPUT):
            return {i: frozenset(self.deps.get(i, outs)) for i in self.input_names}
        least = minimal_deps(self)
        for i, given in self.deps.items():
            missing = sorted(least[i] - set(given))
            if missing:
                raise ModuleDefinitionError(
                    f"module {self.path!r}: deps({i}) must contain {missing} (they are computed from {i})"
                )
        return {i: frozenset(self.deps.get(i, least[i])) for i in self.input_names}


def minimal_deps(module: Module) -> dict[str, frozenset[str]]:
    """For a parent module, the least ``deps``: out-port ``o`` is in ``deps(i)`` iff ``o`` is reachable from ``i``
    through connections and the children's own ``deps``; for a loop, also through its I/O pairs into the next
    iteration, and every out-port depends on whatever the continue port depends on (it decides how often the
    body runs)."""
    # One pass in topological order over the (acyclic, fully connected) siblings, each port carrying the set of
    # parent in-ports that reach it as the bits of an int.
    bit = {i: 1 << k for k, i in enumerate(module.input_names)}
    source_of: dict[PortRef, PortRef] = {c.target: c.source for c in module.connections}
    masks: dict[PortRef, int] = {PortRef(None, i): b for i, b in bit.items()}
    for child in _topological(module):
        ins = {i: masks.get(source_of.get(PortRef(child.name, i), PortRef(None, "")), 0) for i in child.input_names}
        for o in child.output_names:
            masks[PortRef(child.name, o)] = 0
        for i, os in child.deps.items():
            for o in os:
                masks[PortRef(child.name, o)] |= ins.get(i, 0)
    outs = set(module.output_names)
    out_mask = {o: masks.get(source_of.get(PortRef(None, o), PortRef(None, "")), 0) for o in module.output_names}
    reach: dict[str, set[str]] = {i: {o for o, m in out_mask.items() if m & b} for i, b in bit.items()}
    if module.kind is Kind.LOOP:
        # One out-port may feed several in-ports of the next iteration: keep every pair, not one per out-port.
        feeds: dict[str, list[str]] = {}
        for i, o in module.io_ports:
            feeds.setdefault(o, []).append(i)
        changed = True
        while changed:  # a fixpoint over the I/O pairs: an out-port's value is the next iteration's in-port
            changed = False
            for i, reached in reach.items():
                grown = set(reached)
                for o in reached:
                    for fed in feeds.get(o, ()):
                        grown |= reach[fed]
                if module.continue_port in grown:
                    grown = set(outs)
                if grown != reached:
                    reach[i] = grown
                    changed = True
    return {i: frozenset(os) for i, os in reach.items()}


def _topological(module: Module) -> list[Module]:
    """The submodules, each after every sibling feeding it (Kahn's algorithm; siblings are acyclic)."""
    waiting = {child.name: 0 for child in module.submodules}
    feeds: dict[str, list[str]] = {child.name: [] for child in module.submodules}
    for c in module.connections:
        if c.kind is ConnectionKind.SIBLING and c.source.module is not None and c.target.module is not None:
            waiting[c.target.module] += 1
            feeds[c.source.module].append(c.target.module)
    ready = [name for name, n in waiting.items() if n == 0]
    order: list[Module] = []
    while ready:
        name = ready.pop()
        order.append(module.child(name))
        for nxt in feeds[name]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    if len(order) != len(waiting):
        raise ModuleCycleError(f"module {module.path!r}: sibling connections form a cycle")
    return order


def ports(names: Iterable[str], type: Any = Any) -> tuple[Port, ...]:
    """Ports with these names, all of one type (a shorthand for hand-written modules)."""
    return tuple(Port(n, type) for n in names)


# -- types ---------------------------------------------------------------------------------------------------

_PROMOTIONS: dict[type, tuple[type, ...]] = {float: (int,), complex: (int, float)}


def is_assignable(source: Any, target: Any) -> bool:
    """Whether a value of type ``source`` may flow into a port of type ``target``; deliberately simple.

    ``Any``, ``object`` and type variables on either side match anything; a union target takes any member's
    values, a union source must fit the target with every member; parametrised generics compare by origin
    (``list[int]`` is a ``Sequence``); ``Literal`` values by their types; ``int`` fits ``float`` and ``complex``
    (PEP 484's numeric promotions); otherwise ``issubclass``, and equality for what is not a class.
    """
    source, target = _strip(source), _strip(target)
    if _wild(source) or _wild(target):
        return True
    if _is_union(source):
        return all(is_assignable(s, target) for s in typing.get_args(source))
    if _is_union(target):
        return any(is_assignable(source, t) for t in typing.get_args(target))
    if typing.get_origin(source) is typing.Literal:
        return all(is_assignable(type(v), target) for v in typing.get_args(source))
    if typing.get_origin(target) is typing.Literal:
        return bool(source == target)
    s = typing.get_origin(source) or source
    t = typing.get_origin(target) or target
    if isinstance(s, type) and isinstance(t, type):
        try:
            return issubclass(s, t) or any(issubclass(s, p) for p in _PROMOTIONS.get(t, ()))
        except TypeError:
            return s is t
    return bool(source == target)


def _strip(tp: Any) -> Any:
    if tp is None:
        return type(None)
    if typing.get_origin(tp) is typing.Annotated:
        return _strip(typing.get_args(tp)[0])
    supertype = getattr(tp, "__supertype__", None)  # typing.NewType
    return _strip(supertype) if supertype is not None else tp


def _wild(tp: Any) -> bool:
    return tp is Any or tp is object or isinstance(tp, typing.TypeVar)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Union or isinstance(tp, types.UnionType)


def _tn(tp: Any) -> str:
    """A type's name as written in code, for messages."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"
    return repr(tp).replace("typing.", "")
