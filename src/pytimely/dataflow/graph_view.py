"""A typed description of built dataflows, and renderers to Mermaid and Graphviz DOT.

:func:`describe` reads a built :class:`~pytimely.dataflow.subgraph.Subgraph` (every worker builds the same
graph, so one worker's copy describes them all): its operators with their ids, names, scopes and path
summaries, and its channels with the contract that moves their data (``pipeline``, ``exchange``,
``broadcast``, ``direct``). A channel's kind is the contract the dataflow asked for, so an exchange is
reported as one even where a single worker runs it as a pipeline. Feedback operators (the ones whose summary
strictly advances a timestamp) carry that summary, and :func:`to_mermaid` / :func:`to_dot` label the edge
they close with it. Nested scopes are drawn as Mermaid subgraphs and DOT clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.errors import InvalidArgument
from pytimely.progress.location import Source, Target
from pytimely.progress.timestamp import identity_for, strictly_advances

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.subgraph import Subgraph

__all__ = ["Channel", "DataflowGraph", "OperatorView", "ScopeView", "describe", "render", "to_dot", "to_mermaid"]

@dataclass(frozen=True, slots=True)
class ScopeView:
    """A scope of a dataflow: ``index`` 0 is the root; ``parent`` is ``None`` only for the root."""

    index: int
    name: str
    parent: int | None


@dataclass(frozen=True, slots=True)
class OperatorView:
    """One operator: its id (index in the dataflow), name, scope, port counts and internal path summaries."""

    index: int
    name: str
    scope: int
    inputs: int
    outputs: int
    summaries: tuple[tuple[tuple[int, int], tuple[Any, ...]], ...]
    """``((input, output), summaries)`` for every internal path (the identity where none was given)."""
    feedback: Any = None
    """The summary of a feedback operator (one that strictly advances a timestamp), else ``None``."""
    undeclared_state: str | None = None
    """What state the operator keeps across timestamps that no snapshot holds (windows' open windows)."""


@dataclass(frozen=True, slots=True)
class Channel:
    """A channel from an output port to an input port, and the contract moving its data."""

    source: Source
    target: Target
    kind: str


@dataclass(frozen=True, slots=True)
class DataflowGraph:
    """One built dataflow: its id and name, scopes, operators and channels."""

    ident: int
    name: str
    scopes: tuple[ScopeView, ...]
    operators: tuple[OperatorView, ...]
    channels: tuple[Channel, ...]

    def operator(self, name: str) -> OperatorView:
        """The operator called ``name`` (the first, if several share it); :class:`KeyError` if none is."""
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def channels_into(self, operator: int) -> list[Channel]:
        """The channels into operator ``operator``, by input port."""
        return sorted((c for c in self.channels if c.target.node == operator), key=lambda c: c.target.port)


def describe(subgraph: Subgraph) -> DataflowGraph:
    """The description of ``subgraph`` as built so far."""
    scope_ids: dict[int, int] = {}
    scopes: list[ScopeView] = []

    def scope_index(scope: Scope[Any]) -> int:
        key = id(scope)
        if key not in scope_ids:
            parent = None if scope.parent is None else scope_index(scope.parent)
            scope_ids[key] = len(scopes)
            scopes.append(ScopeView(len(scopes), scope.name, parent))
        return scope_ids[key]

    operators = []
    for op in subgraph.operators:
        identity = identity_for(op.scope.minimum)
        given = op.scope._summaries.get(op.index)
        pairs: list[tuple[tuple[int, int], tuple[Any, ...]]] = []
        feedback = None
        for i in range(len(op.inputs)):
            for o in range(len(op.outputs)):
                if given is None:
                    pairs.append(((i, o), (identity,)))
                    continue
                if (i, o) not in given:
                    continue
                value = given[(i, o)]
                items = tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)
                pairs.append(((i, o), items))
                for s in items:
                    if not getattr(s, "changes_scope", False) and strictly_advances(s, identity):
                        feedback = s
        operators.append(
            OperatorView(
                op.index, op.name, scope_index(op.scope), len(op.inputs), len(op.outputs), tuple(pairs), feedback,
                op.undeclared_state,
            )
        )
    edges = subgraph._edges
    channels = tuple(Channel(s, t, pact.kind) for (s, t), pact in zip(edges, subgraph.pacts, strict=True))
    return DataflowGraph(subgraph.ident, subgraph.name, tuple(scopes), tuple(operators), channels)


# -- rendering ---------------------------------------------------------------------------------------------


def _feedback_label(summary: Any) -> str:
    inner = getattr(summary, "inner", summary)
    by = getattr(inner, "by", None)
    limit = getattr(inner, "limit", None)
    if by is None:
        return f"feedback {summary!r}"
    return f"feedback +{by}" + ("" if limit is None else f" (limit {limit})")


def _edge_label(graph: DataflowGraph, channel: Channel) -> str:
    label = "" if channel.kind == "pipeline" else channel.kind
    feedback = graph.operators[channel.source.node].feedback
    if feedback is not None:
        label = f"{label}, {_feedback_label(feedback)}" if label else _feedback_label(feedback)
    return label


def _scopes(
    graph: DataflowGraph,
    lines: list[str],
    opening: Callable[[str, int, str], list[str]],
    node: Callable[[str, OperatorView], str],
    closing: str,
) -> None:
    """Append the nested scopes of ``graph`` to ``lines``: ``opening(indent, scope, title)``, a ``node`` line per
    operator, the scopes inside, then ``closing`` (the one walk both renderers share)."""
    members: dict[int, list[OperatorView]] = {}
    for op in graph.operators:
        members.setdefault(op.scope, []).append(op)
    children: dict[int | None, list[int]] = {}
    for view in graph.scopes:
        children.setdefault(view.parent, []).append(view.index)

    def emit(scope: int, indent: str) -> None:
        view = graph.scopes[scope]
        title = f"dataflow {graph.name}" if view.parent is None else f"scope {view.name}"
        lines.extend(opening(indent, scope, title))
        lines.extend(node(indent + "  ", op) for op in members.get(scope, []))
        for child in children.get(scope, []):
            emit(child, indent + "  ")
        lines.append(f"{indent}{closing}")

    for root in children.get(None, []):
        emit(root, "  ")


def _mermaid_text(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def to_mermaid(graphs: Iterable[DataflowGraph]) -> str:
    """Mermaid ``flowchart`` text: one subgraph per dataflow, nested ones per scope, labelled channels."""
    lines = ["flowchart TD"]
    for graph in graphs:
        _mermaid_graph(graph, lines)
    return "\n".join(lines) + "\n"


def _mermaid_graph(graph: DataflowGraph, lines: list[str]) -> None:
    d = graph.ident

    def node(indent: str, op: OperatorView) -> str:
        text = f"{op.index}: {op.name}"
        if op.feedback is not None:
            text += f" [{_feedback_label(op.feedback)}]"
        return f"{indent}d{d}n{op.index}[{_mermaid_text(text)}]"

    _scopes(graph, lines, lambda indent, scope, title: [f"{indent}subgraph d{d}s{scope}[{_mermaid_text(title)}]"],
            node, "end")
    for channel in graph.channels:
        a, b = f"d{d}n{channel.source.node}", f"d{d}n{channel.target.node}"
        label = _edge_label(graph, channel)
        arrow = "-.->" if graph.operators[channel.source.node].feedback is not None else "-->"
        lines.append(f"  {a} {arrow}|{_mermaid_text(label)}| {b}" if label else f"  {a} {arrow} {b}")


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graphs: Iterable[DataflowGraph]) -> str:
    """Graphviz DOT text: one cluster per dataflow, nested clusters per scope, labelled channels."""
    lines = ["digraph pytimely {", "  node [shape=box];"]
    for graph in graphs:
        _dot_graph(graph, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_graph(graph: DataflowGraph, lines: list[str]) -> None:
    d = graph.ident

    def node(indent: str, op: OperatorView) -> str:
        text = f"{op.index}: {op.name}"
        if op.feedback is not None:
            text += f"\n{_feedback_label(op.feedback)}"
        return f"{indent}d{d}n{op.index} [label={_dot_text(text)}];"

    def opening(indent: str, scope: int, title: str) -> list[str]:
        return [f"{indent}subgraph cluster_d{d}s{scope} {{", f"{indent}  label={_dot_text(title)};"]

    _scopes(graph, lines, opening, node, "}")
    for channel in graph.channels:
        attrs = [f"label={_dot_text(_edge_label(graph, channel))}"]
        if graph.operators[channel.source.node].feedback is not None:
            attrs.append("style=dashed")
        if channel.kind != "pipeline":
            attrs.append("penwidth=2")
        attrs.append(f"taillabel={_dot_text(str(channel.source.port))}")
        attrs.append(f"headlabel={_dot_text(str(channel.target.port))}")
        lines.append(f"  d{d}n{channel.source.node} -> d{d}n{channel.target.node} [{', '.join(attrs)}];")


def render(graphs: Sequence[DataflowGraph], fmt: str) -> str:
    """``graphs`` as ``mermaid`` or ``dot`` text."""
    if fmt == "mermaid":
        return to_mermaid(graphs)
    if fmt == "dot":
        return to_dot(graphs)
    raise InvalidArgument(f"unknown graph format {fmt!r}; expected 'mermaid' or 'dot'")
