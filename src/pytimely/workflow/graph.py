"""The dependency graph of a parent module, seed ``004_6a2e88f6382bfe5d.txt`` §2.1 ("Dependency Graphs", the seed file's
lines 53–63).

For ``M = (I, O, L, deps, S, C)`` the vertices are ``V = S ∪ I ∪ O ∪ (⋃ I_N)``: the submodules, the module's
in- and out-ports and its submodules' in-ports. ``(v, w)`` is an edge when

i.   ``(v, w)`` is a parent-in → child-in or a short-circuit connection;
ii.  ``v`` is an in-port of submodule ``N`` and some ``o ∈ deps_N(v)`` is connected to ``w`` (sibling or
     child-out → parent-out);
iii. ``v`` is submodule ``N`` itself and some out-port of ``N`` is connected to ``w``.

``outports(v, w)`` are the submodules' out-ports witnessing an edge of kind (ii) or (iii). The graph *pruned*
w.r.t. requested out-ports ``O*`` keeps only the edges from which ``O*`` is reachable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytimely.errors import ModuleDefinitionError
from pytimely.workflow.model import ConnectionKind, Module, PortRef

__all__ = ["DependencyGraph", "Vertex"]

VertexKind = Literal["in", "out", "module", "child-in"]


@dataclass(frozen=True, slots=True, order=True, init=False)
class Vertex:
    """A dependency-graph vertex: the parent's in-port or out-port, a submodule, or a submodule's in-port."""

    kind: VertexKind
    module: str | None
    port: str | None
    # The resume algorithms hash vertices millions of times. The hash is computed once, as the generated one
    # would be (so set orders are unchanged), and never pickled: a str's hash differs between processes.
    _hash: int = field(init=False, repr=False, compare=False)

    def __init__(self, kind: VertexKind, module: str | None, port: str | None) -> None:
        setattr_ = object.__setattr__  # frozen: the generated __init__ does the same, plus a call to hash after
        setattr_(self, "kind", kind)
        setattr_(self, "module", module)
        setattr_(self, "port", port)
        setattr_(self, "_hash", hash((kind, module, port)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Vertex], tuple[Any, ...]]:
        return (Vertex, (self.kind, self.module, self.port))

    @staticmethod
    def inport(name: str) -> Vertex:
        """The parent's in-port ``name`` (in ``I``)."""
        return Vertex("in", None, name)

    @staticmethod
    def outport(name: str) -> Vertex:
        """The parent's out-port ``name`` (in ``O``)."""
        return Vertex("out", None, name)

    @staticmethod
    def submodule(name: str) -> Vertex:
        """The submodule ``name`` (in ``S``)."""
        return Vertex("module", name, None)

    @staticmethod
    def child_in(module: str, port: str) -> Vertex:
        """In-port ``port`` of submodule ``module`` (in ``I_N``)."""
        return Vertex("child-in", module, port)

    @property
    def is_port(self) -> bool:
        """Whether the vertex stands for a port (anything but a submodule)."""
        return self.kind != "module"

    def __str__(self) -> str:
        if self.kind == "module":
            return f"[{self.module}]"
        if self.kind == "child-in":
            return f"{self.module}.{self.port}"
        return f"{self.kind}:{self.port}"


class DependencyGraph:
    """The dependency graph of a parent module, optionally pruned w.r.t. requested out-ports ``O*``.

    Read-only once built: :meth:`of` hands the same graph to every caller asking about the same module.
    """

    @classmethod
    def of(cls, module: Module, requested: Iterable[str] | None = None) -> DependencyGraph:
        """The graph of ``module`` pruned w.r.t. ``requested``, built once per (module, ``O*``) and then shared.

        A :class:`Module` does not change after construction, so neither does its graph.
        """
        key = None if requested is None else frozenset(requested)
        # Kept on the module like its other derived tables (a copy made by dataclasses.replace starts without
        # them); dict.setdefault keeps concurrent callers to one graph each.
        graphs: dict[frozenset[str] | None, DependencyGraph] = module.__dict__.setdefault("_graphs", {})
        graph = graphs.get(key)
        if graph is None:
            graph = graphs.setdefault(key, cls(module, key))
        return graph

    def __init__(self, module: Module, requested: Iterable[str] | None = None) -> None:
        self.module = module
        vertices: set[Vertex] = set()
        vertices.update(Vertex.inport(p) for p in module.input_names)
        vertices.update(Vertex.outport(p) for p in module.output_names)
        for child in module.submodules:
            vertices.add(Vertex.submodule(child.name))
            vertices.update(Vertex.child_in(child.name, p) for p in child.input_names)
        self.vertices: frozenset[Vertex] = frozenset(vertices)
        # Where each submodule out-port's value goes (sibling and child-out -> parent-out connections).
        fed_by: dict[PortRef, list[Vertex]] = {}
        edges: dict[tuple[Vertex, Vertex], set[str]] = {}
        for c in module.connections:
            if c.kind in (ConnectionKind.PARENT_IN_TO_CHILD_IN, ConnectionKind.SHORT_CIRCUIT):
                assert c.source.module is None
                target = (
                    Vertex.outport(c.target.port) if c.target.module is None else Vertex.child_in(*_named(c.target))
                )
                edges.setdefault((Vertex.inport(c.source.port), target), set())
            else:
                target = (
                    Vertex.outport(c.target.port) if c.target.module is None else Vertex.child_in(*_named(c.target))
                )
                fed_by.setdefault(c.source, []).append(target)
        for child in module.submodules:
            for o in child.output_names:
                for target in fed_by.get(PortRef(child.name, o), ()):
                    edges.setdefault((Vertex.submodule(child.name), target), set()).add(o)
            for i in child.input_names:
                for o in child.deps.get(i, frozenset()):
                    for target in fed_by.get(PortRef(child.name, o), ()):
                        edges.setdefault((Vertex.child_in(child.name, i), target), set()).add(o)
        self.requested: frozenset[str] | None = None if requested is None else frozenset(requested)
        if self.requested is not None:
            unknown = sorted(self.requested - set(module.output_names))
            if unknown:
                raise ModuleDefinitionError(f"module {module.name!r} has no out-port {unknown[0]!r} to request")
            keep = self._reaching({Vertex.outport(o) for o in self.requested}, edges)
            edges = {e: w for e, w in edges.items() if e[1] in keep}
        self._outports = {e: frozenset(w) for e, w in edges.items()}
        self.edges: frozenset[tuple[Vertex, Vertex]] = frozenset(edges)
        # Typed read-only (Mapping of Sequence): a graph from :meth:`of` is shared, so nobody may change it.
        successors: dict[Vertex, list[Vertex]] = {v: [] for v in self.vertices}
        predecessors: dict[Vertex, list[Vertex]] = {v: [] for v in self.vertices}
        for v, w in edges:  # construction order: deterministic for a given module, and no sort of vertices
            successors[v].append(w)
            predecessors[w].append(v)
        self.successors: Mapping[Vertex, Sequence[Vertex]] = successors
        self.predecessors: Mapping[Vertex, Sequence[Vertex]] = predecessors

    @staticmethod
    def _reaching(goal: set[Vertex], edges: Iterable[tuple[Vertex, Vertex]]) -> set[Vertex]:
        """The vertices with a path (of length >= 0) to ``goal``."""
        into: dict[Vertex, list[Vertex]] = {}
        for v, w in edges:
            into.setdefault(w, []).append(v)
        seen = set(goal)
        stack = list(goal)
        while stack:
            w = stack.pop()
            for v in into.get(w, ()):
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
        return seen

    def outports(self, v: Vertex, w: Vertex) -> frozenset[str]:
        """The submodules' out-ports (names, of ``v``'s submodule) witnessing the edge ``(v, w)``."""
        return self._outports[(v, w)]

    def reachable_from(self, start: Iterable[Vertex]) -> set[Vertex]:
        """Every vertex reachable from ``start`` (each start vertex included)."""
        seen = set(start)
        stack = list(seen)
        while stack:
            v = stack.pop()
            for w in self.successors[v]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen

    def sources(self) -> list[Vertex]:
        """Vertices with no incoming edge, sorted."""
        return sorted(v for v in self.vertices if not self.predecessors[v])

    def maximal_paths_to(self, goal: Iterable[Vertex]) -> list[tuple[Vertex, ...]]:
        """Every maximal path (source vertex to sink vertex) ending in ``goal``: exponential, for tests."""
        goal = set(goal)
        paths: list[tuple[Vertex, ...]] = []

        def extend(path: list[Vertex]) -> None:
            last = path[-1]
            if not self.successors[last]:
                if last in goal:
                    paths.append(tuple(path))
                return
            for w in self.successors[last]:
                path.append(w)
                extend(path)
                path.pop()

        for s in self.sources():
            extend([s])
        return paths


def _named(ref: PortRef) -> tuple[str, str]:
    assert ref.module is not None
    return ref.module, ref.port
