"""A workflow's module graph drawn as a Mermaid flowchart (:func:`show`).
"""

from __future__ import annotations

from typing import Any

from pytimely.workflow.model import Kind, Module

__all__ = ["show"]

def show(workflow: Module) -> str:
    """The module graph as a Mermaid flowchart: in- and out-ports, submodules (parents as subgraphs), connections."""
    lines = ["flowchart LR"]
    counter = iter(range(1 << 30))
    ids: dict[tuple[str, str, str], str] = {}

    def node_id(path: str, what: str, port: str) -> str:
        key = (path, what, port)
        if key not in ids:
            ids[key] = f"n{next(counter)}"
        return ids[key]

    def esc(text: str) -> str:
        return text.replace('"', "#quot;")

    def draw(module: Module, path: str, indent: str) -> None:
        for p in module.input_names:
            lines.append(f'{indent}{node_id(path, "in", p)}(["{esc(p)}"])')
        for p in module.output_names:
            lines.append(f'{indent}{node_id(path, "out", p)}(["{esc(p)}"])')
        for child in module.submodules:
            sub = f"{path}/{child.name}"
            if child.submodules:
                label = f"{child.name} ({child.kind.value})"
                lines.append(f'{indent}subgraph {node_id(sub, "box", "")}["{esc(label)}"]')
                draw(child, sub, indent + "  ")
                lines.append(f"{indent}end")
            else:
                shape = ('[/"', '"/]') if child.kind is Kind.INPUT else ('["', '"]')
                lines.append(f"{indent}{node_id(sub, 'module', '')}{shape[0]}{esc(child.name)}{shape[1]}")
        for c in module.connections:
            # Edges at a simple module's box say which of its ports they use.
            parts = [
                r.port if r.module is not None and not module.child(r.module).submodules else ""
                for r in (c.source, c.target)
            ]
            label = f'|"{esc(" → ".join(p or "·" for p in parts))}"|' if any(parts) else ""
            lines.append(f"{indent}{end(module, path, c.source, True)} -->{label} {end(module, path, c.target, False)}")
        for i, o in module.io_ports:
            lines.append(f"{indent}{node_id(path, 'out', o)} -. next iteration .-> {node_id(path, 'in', i)}")

    def end(module: Module, path: str, ref: Any, source: bool) -> str:
        if ref.module is None:
            return node_id(path, "in" if source else "out", ref.port)
        child = module.child(ref.module)
        sub = f"{path}/{ref.module}"
        if child.submodules:
            return node_id(sub, "out" if source else "in", ref.port)
        return node_id(sub, "module", "")

    lines.append(f'  subgraph {node_id(workflow.name, "box", "")}["{esc(workflow.name)}"]')
    draw(workflow, workflow.name, "    ")
    lines.append("  end")
    return "\n".join(lines) + "\n"
