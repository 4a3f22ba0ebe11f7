"""A typed Python DSL for workflow modules: ``@simple``, ``@composite``, ``@loop`` and ``constant``.

::

    class Summary(NamedTuple):
        mean: float
        count: int

    @simple
    def clean(raw: list[float], limit: float = 10.0) -> list[float]: ...   # in-ports raw, limit; out-port out

    @simple
    def summarise(values: list[float]) -> Summary: ...                     # out-ports mean, count

    @composite
    def report(raw: list[float]) -> Summary:
        cleaned = clean(raw, limit=5.0)        # a submodule "clean"; 5.0 becomes a constant module feeding limit
        return summarise(cleaned)              # its out-ports feed report's out-ports of the same names

* ``@simple`` on a typed function: positional parameters are in-ports (a default makes the port optional),
  keyword-only parameters are parameters (bound with :meth:`~pytimely.workflow.model.Module.with_params` or
  injected by an executor, e.g. ``spark``); the return annotation gives the out-ports: one port ``out``, one
  per field of a ``NamedTuple``/``TypedDict``, none for ``None``. ``deps=`` declares which out-ports an
  in-port feeds (all of them otherwise).
* ``@composite`` on a function whose body calls modules on the port values it is given: each call adds a
  submodule (named after the module, ``clean_2`` for a second one; ``module.named("x")(...)`` to choose) and
  its connections, and returns its out-ports (one :class:`PortValue`, or :class:`Outputs` for several);
  returning the composite's own parameter makes a short-circuit connection; a plain value anywhere becomes an
  input module. The body runs once, when the module is defined.
* ``@loop``: like ``@composite``, but the body returns ``(next_values, continue_flag)``; an out-port named like
  an in-port is an I/O pair (its value is that in-port's in the next iteration).
* ``constant(value)``: an input module (inside a body, its out-port).

Mistakes are found when the module is defined: type mismatches (:class:`~pytimely.errors.PortTypeError`),
missing arguments (:class:`~pytimely.errors.UnconnectedPortError`), and misuse such as branching on a port's
value (:class:`~pytimely.errors.ModuleDefinitionError`), each naming the ports.

A module-level function decorated with ``@simple`` stays picklable by reference: its ``__qualname__`` becomes
``name.function``, which is where pickle then finds it (the module's :attr:`function`).
"""

from __future__ import annotations

import contextvars
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from pytimely.errors import ModuleDefinitionError, PortTypeError, SinkModuleError, UnconnectedPortError
from pytimely.workflow.model import (
    CONTINUE,
    Connection,
    Kind,
    Module,
    Port,
    PortRef,
    _tn,
    is_assignable,
)
from pytimely.workflow.writes import placeholders

__all__ = ["Outputs", "PortValue", "composite", "constant", "loop", "simple"]

_MISSING: Any = object()


class _Builder:
    """The submodules and connections a ``@composite``/``@loop`` body has made so far."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.submodules: list[Module] = []
        self.connections: list[Connection] = []
        self.taken: set[str] = set()

    def add(self, module: Module) -> str:
        """Add ``module`` under a fresh name (its own, else ``name_2``, ``name_3``, ...); return the name."""
        name, k = module.name, 1
        while name in self.taken:
            k += 1
            name = f"{module.name}_{k}"
        self.taken.add(name)
        self.submodules.append(module if name == module.name else module.named(name))
        return name

    def source(self, value: Any, target: PortRef, target_type: Any, hint: str) -> None:
        """Connect ``value`` (a port value or a plain value) to ``target``."""
        if isinstance(value, Outputs):
            raise ModuleDefinitionError(
                f"module {self.owner!r}: {target} is given all out-ports of {value._module!r}; pick one "
                f"({', '.join(str(p.ref) for p in value)})"
            )
        if isinstance(value, PortValue):
            if value.builder is not self:
                raise ModuleDefinitionError(
                    f"module {self.owner!r}: {value} belongs to the definition of {value.builder.owner!r}; "
                    "pass it in as an in-port"
                )
            if not is_assignable(value.type, target_type):
                raise PortTypeError(
                    f"module {self.owner!r}: connection {value.ref} -> {target}: {_tn(value.type)} is not "
                    f"assignable to {_tn(target_type)}"
                )
            self.connections.append(Connection(value.ref, target))
            return
        name = self.add(_constant_module(value, hint))
        self.source(PortValue(self, PortRef(name, "out"), type(value)), target, target_type, hint)


_current: contextvars.ContextVar[_Builder | None] = contextvars.ContextVar("pytimely_workflow_builder", default=None)


@dataclass(frozen=True, eq=False)
class PortValue:
    """The value a port will carry, as seen while a ``@composite``/``@loop`` body is defined."""

    builder: _Builder = field(repr=False)
    ref: PortRef
    type: Any

    def __bool__(self) -> bool:
        """Refused: a port's value is not known while the workflow is defined."""
        raise ModuleDefinitionError(
            f"module {self.builder.owner!r}: the value of {self.ref} is not known while the workflow is defined; "
            "decide in a module (or a loop's continue flag), not with if/and/or"
        )

    def __iter__(self) -> Iterator[Any]:
        """Refused, naming the port (a single port cannot be unpacked)."""
        raise ModuleDefinitionError(f"module {self.builder.owner!r}: {self.ref} is one port; it cannot be unpacked")

    def __str__(self) -> str:
        return f"port {self.ref}"


class Outputs:
    """The out-ports of a submodule with several (or not named ``out``): by attribute, name, index or unpacking.

    Its own attributes start with ``_`` (as ``NamedTuple`` fields cannot), so any out-port name reads as a port.
    """

    def __init__(self, builder: _Builder, module: str, ports: Iterable[Port]) -> None:
        self._builder = builder
        self._module = module
        self._ports = {p.name: PortValue(builder, PortRef(module, p.name), p.type) for p in ports}

    def __getattr__(self, name: str) -> PortValue:
        ports = self.__dict__.get("_ports", {})
        if name in ports:
            return typing.cast(PortValue, ports[name])
        raise AttributeError(f"module {self.__dict__.get('_module')!r} has no out-port {name!r} (it has {list(ports)})")

    def __getitem__(self, key: str | int) -> PortValue:
        """The out-port named ``key``, or the ``key``-th."""
        if isinstance(key, int):
            return list(self._ports.values())[key]
        if key not in self._ports:
            raise KeyError(f"module {self._module!r} has no out-port {key!r} (it has {list(self._ports)})")
        return self._ports[key]

    def __iter__(self) -> Iterator[PortValue]:
        return iter(self._ports.values())

    def __len__(self) -> int:
        return len(self._ports)

    def __repr__(self) -> str:
        return f"Outputs({self._module!r}: {', '.join(self._ports)})"


# -- decorators ----------------------------------------------------------------------------------------------


@overload
def simple(fn: Callable[..., Any], /) -> Module: ...


@overload
def simple(
    *,
    name: str | None = None,
    deps: Mapping[str, Iterable[str]] | None = None,
    version: str | int | None = None,
    retries: int = 0,
    backoff: float = 1.0,
    timeout: float | None = None,
    executor: str | None = None,
    writes: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
) -> Callable[[Callable[..., Any]], Module]: ...


def simple(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    deps: Mapping[str, Iterable[str]] | None = None,
    version: str | int | None = None,
    retries: int = 0,
    backoff: float = 1.0,
    timeout: float | None = None,
    executor: str | None = None,
    writes: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
) -> Module | Callable[[Callable[..., Any]], Module]:
    """A simple module running ``fn``: positional parameters are in-ports, the return annotation the out-ports.

    ``retries`` more attempts follow a failure, a worker's death or a run past ``timeout`` seconds, the first after
    ``backoff`` seconds and each next one after twice as long. ``executor`` names the executor it runs on
    (``"spark"`` beside thread steps), else the run's default. ``writes`` declares the files it writes (a path or
    several, relative to the folder the run starts in; ``{name}`` is filled from its parameters): they are part of
    its outputs (see :mod:`pytimely.workflow.writes`).

    ``version`` replaces the code fingerprint (source, globals read, the user's functions called): the module's
    values are reused until the version changes, whatever the code does.
    """
    localns = _caller_locals()

    def define(f: Callable[..., Any]) -> Module:
        if version is not None:
            if not isinstance(f, types.FunctionType):
                raise ModuleDefinitionError(f"simple module {name or f.__name__!r}: version= needs a plain function")
            f.__pytimely_version__ = str(version)  # type: ignore[attr-defined]
        hints = _hints(f, localns)
        module_name = name or f.__name__
        inputs: list[Port] = []
        for p in inspect.signature(f).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ModuleDefinitionError(f"simple module {module_name!r}: *{p.name} cannot be a port; name them")
            if p.kind is p.KEYWORD_ONLY:
                continue  # a parameter, not a port
            inputs.append(Port(p.name, hints.get(p.name, Any), optional=p.default is not p.empty))
        outputs, _ = _out_ports(module_name, hints.get("return", _MISSING))
        declared = {i: frozenset(os) for i, os in (deps or {}).items()}
        _make_importable(f)
        if not isinstance(retries, int) or retries < 0:
            raise ModuleDefinitionError(f"simple module {module_name!r}: retries must be an int >= 0, got {retries!r}")
        if timeout is not None and not timeout > 0:
            raise ModuleDefinitionError(f"simple module {module_name!r}: timeout must be > 0 seconds, got {timeout!r}")
        files = _writes(module_name, f, writes)
        return Module(module_name, Kind.SIMPLE, tuple(inputs), tuple(outputs or [Port("out")]), declared, function=f,
                      retries=retries, backoff=backoff, timeout=timeout, executor=executor, writes=files)  # fmt: skip

    return define if fn is None else define(fn)


@overload
def composite(fn: Callable[..., Any], /) -> Module: ...


@overload
def composite(*, name: str | None = None) -> Callable[[Callable[..., Any]], Module]: ...


def composite(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None
) -> Module | Callable[[Callable[..., Any]], Module]:
    """A composite module: ``fn``'s body, run once now, calls modules on its parameters' port values."""
    localns = _caller_locals()

    def define(f: Callable[..., Any]) -> Module:
        return _define_parent(f, Kind.COMPOSITE, name or f.__name__, localns)

    return define if fn is None else define(fn)


@overload
def loop(fn: Callable[..., Any], /) -> Module: ...


@overload
def loop(*, name: str | None = None) -> Callable[[Callable[..., Any]], Module]: ...


def loop(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None
) -> Module | Callable[[Callable[..., Any]], Module]:
    """A loop module: ``fn``'s body returns ``(next_values, continue_flag)``; out-ports named like in-ports
    feed them in the next iteration, and the body runs again while the flag is true."""
    localns = _caller_locals()

    def define(f: Callable[..., Any]) -> Module:
        return _define_parent(f, Kind.LOOP, name or f.__name__, localns)

    return define if fn is None else define(fn)


def constant(value: Any, *, name: str | None = None) -> Any:
    """An input module holding ``value`` on out-port ``out``; inside a body, that out-port's :class:`PortValue`."""
    module = _constant_module(value, name or "constant")
    builder = _current.get()
    if builder is None:
        return module
    return PortValue(builder, PortRef(builder.add(module), "out"), type(value))


def call_module(module: Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``module(*args, **kwargs)``: a submodule inside a body; outside, run a simple module or give a constant."""
    builder = _current.get()
    if builder is None:
        if module.kind is Kind.SIMPLE and module.function is not None:
            return module.function(*args, **{**module.params, **kwargs})
        if module.kind is Kind.INPUT and not args and not kwargs:
            return module.value
        raise ModuleDefinitionError(
            f"{module.kind.value} module {module.path!r} can be called only inside a @composite or @loop body; "
            "run it with the workflow interpreter"
        )
    given: dict[str, Any] = {}
    names = module.input_names
    if len(args) > len(names):
        raise ModuleDefinitionError(
            f"module {module.name!r} takes {len(names)} in-ports {list(names)}, given {len(args)}"
        )
    given.update(zip(names, args, strict=False))
    params: dict[str, Any] = {}
    keyword_only = _keyword_only(module)
    for key, value in kwargs.items():
        if key in given:
            raise ModuleDefinitionError(f"module {module.name!r}: in-port {key!r} is given twice")
        if key in names:
            given[key] = value
        elif key in keyword_only:
            if isinstance(value, PortValue | Outputs):
                raise ModuleDefinitionError(
                    f"module {module.name!r}: {key!r} is a parameter, not an in-port; it takes a plain value"
                )
            params[key] = value
        else:
            raise ModuleDefinitionError(f"module {module.name!r} has no in-port {key!r} (it has {list(names)})")
    missing = [p for p in module.inputs if p.name not in given]
    for p in missing:
        if not p.optional:
            raise UnconnectedPortError(
                f"module {builder.owner!r}: in-port {module.name}.{p.name} has no source (pass {p.name}=...)"
            )
    instance = module.without_inputs(p.name for p in missing)
    if params:
        instance = instance.with_params(**params)
    name = builder.add(instance)
    for port in instance.inputs:
        builder.source(given[port.name], PortRef(name, port.name), port.type, f"{name}_{port.name}")
    outs = instance.outputs
    if not outs:
        return None
    if len(outs) == 1 and outs[0].name == "out":
        return PortValue(builder, PortRef(name, "out"), outs[0].type)
    return Outputs(builder, name, outs)


# -- helpers -------------------------------------------------------------------------------------------------


def _define_parent(fn: Callable[..., Any], kind: Kind, name: str, localns: Mapping[str, Any]) -> Module:
    what = kind.value
    hints = _hints(fn, localns)
    inputs: list[Port] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise ModuleDefinitionError(f"{what} module {name!r}: parameter {p.name!r} must be a plain in-port")
        if p.default is not p.empty:
            raise ModuleDefinitionError(
                f"{what} module {name!r}: in-port {p.name!r} has a default; let the caller pass a constant"
            )
        inputs.append(Port(p.name, hints.get(p.name, Any)))
    builder = _Builder(name)
    token = _current.set(builder)
    try:
        result = fn(*(PortValue(builder, PortRef(None, p.name), p.type) for p in inputs))
        flag: Any = None
        if kind is Kind.LOOP:
            if type(result) is not tuple or len(result) != 2:
                raise ModuleDefinitionError(f"loop {name!r}: the body must return (next_values, continue_flag)")
            result, flag = result
            if flag is True:
                raise ModuleDefinitionError(f"loop {name!r}: a continue flag that is always True never ends")
        declared, fields = _out_ports(name, hints.get("return", _MISSING))
        values = _returned(name, result, declared, fields)
        if declared is None:
            declared = [Port(n, v.type if isinstance(v, PortValue) else type(v)) for n, v in values.items()]
        for port in declared:
            builder.source(values[port.name], PortRef(None, port.name), port.type, f"{port.name}_value")
        outputs = list(declared)
        io_ports: tuple[tuple[str, str], ...] = ()
        if kind is Kind.LOOP:
            if CONTINUE in values:
                raise ModuleDefinitionError(f"loop {name!r}: {CONTINUE!r} is the continue port's name")
            outputs.append(Port(CONTINUE, bool))
            builder.source(flag, PortRef(None, CONTINUE), bool, "continue_value")
            io_ports = tuple((p.name, p.name) for p in declared if p.name in {i.name for i in inputs})
    finally:
        _current.reset(token)
    _refuse_unused(name, builder)
    return Module(
        name,
        kind,
        tuple(inputs),
        tuple(outputs),
        submodules=tuple(builder.submodules),
        connections=tuple(builder.connections),
        io_ports=io_ports,
        continue_port=CONTINUE if kind is Kind.LOOP else None,
    )


def _refuse_unused(name: str, builder: _Builder) -> None:
    """A called module none of whose out-ports feeds anything would never run (runs are driven by requests)."""
    used = {c.source.module for c in builder.connections}
    for sub in builder.submodules:
        if sub.kind is not Kind.INPUT and sub.name not in used:
            raise SinkModuleError(
                f"module {name!r}: {sub.name!r} is called but none of its out-ports is used, so it would never "
                f"run; return what it did (the path written, a count) from {name!r} to make its effect an out-port"
            )


def _returned(name: str, result: Any, declared: list[Port] | None, fields: bool) -> dict[str, Any]:
    """The value returned for each out-port."""
    if declared is not None and not fields:
        if not declared and result is not None:
            raise ModuleDefinitionError(f"module {name!r} is annotated to return None but returns {result!r}")
        if declared and result is None:
            raise UnconnectedPortError(f"module {name!r}: out-port out has no source (the body returns None)")
        return {p.name: result for p in declared}
    if result is None:
        values: dict[str, Any] = {}
    elif isinstance(result, Outputs):
        values = {p.ref.port: p for p in result}
    elif isinstance(result, tuple) and hasattr(result, "_asdict"):
        values = dict(result._asdict())
    elif isinstance(result, Mapping):
        values = dict(result)
    elif isinstance(result, tuple) and declared is not None:
        if len(result) != len(declared):
            raise ModuleDefinitionError(
                f"module {name!r} returns {len(result)} values for out-ports {[p.name for p in declared]}"
            )
        values = {p.name: v for p, v in zip(declared, result, strict=True)}
    elif declared is None and not isinstance(result, tuple):
        values = {"out": result}
    else:
        raise ModuleDefinitionError(f"module {name!r} returns a tuple; annotate the return type (a NamedTuple)")
    if declared is not None:
        wanted = [p.name for p in declared]
        for n in wanted:
            if n not in values:
                raise UnconnectedPortError(f"module {name!r}: out-port {n} has no source (it is not returned)")
        extra = sorted(set(values) - set(wanted))
        if extra:
            raise ModuleDefinitionError(f"module {name!r} returns {extra}, which are not among its out-ports {wanted}")
    return values


def _out_ports(name: str, annotation: Any) -> tuple[list[Port] | None, bool]:
    """The out-ports a return annotation gives, and whether they are fields; ``None`` when there is none."""
    if annotation is _MISSING:
        return None, False
    if annotation is None or annotation is type(None):
        return [], False
    if isinstance(annotation, type) and issubclass(annotation, tuple) and hasattr(annotation, "_fields"):
        hints = typing.get_type_hints(annotation)
        return [Port(f, hints.get(f, Any)) for f in annotation._fields], True
    if typing.is_typeddict(annotation):
        return [Port(f, t) for f, t in typing.get_type_hints(annotation).items()], True
    return [Port("out", annotation)], False


def _hints(fn: Callable[..., Any], localns: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, localns=dict(localns))
    except Exception as exc:  # an annotation naming something not in scope
        raise ModuleDefinitionError(
            f"module {getattr(fn, '__name__', fn)!r}: cannot resolve its annotations ({exc})"
        ) from exc


def _caller_locals() -> Mapping[str, Any]:
    """The locals of whoever applied the decorator, so annotations naming local classes resolve."""
    frame = sys._getframe(2)
    return dict(frame.f_locals) if frame.f_code.co_name != "<module>" else {}


def _keyword_only(module: Module) -> set[str]:
    if module.kind is not Kind.SIMPLE or module.function is None:
        return set()
    try:
        parameters = inspect.signature(module.function).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}


def _constant_module(value: Any, name: str) -> Module:
    if isinstance(value, Module):
        raise ModuleDefinitionError(f"{value!r} is given as a value; call it to use its out-ports")
    return Module(name, Kind.INPUT, outputs=(Port("out", type(value)),), value=value)


def _writes(name: str, fn: Callable[..., Any], writes: Any) -> tuple[str, ...]:
    """The declared files as text, each ``{field}`` naming a keyword-only parameter of ``fn``."""
    items = [writes] if isinstance(writes, str | os.PathLike) else list(writes)
    files: list[str] = []
    keyword_only = {
        p.name for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise ModuleDefinitionError(f"simple module {name!r}: writes= takes paths, got {item!r}")
        text = os.fspath(item)
        if not isinstance(text, str) or not text:
            raise ModuleDefinitionError(f"simple module {name!r}: writes= takes non-empty paths, got {item!r}")
        try:
            fields = placeholders(text)
        except ValueError as exc:
            raise ModuleDefinitionError(f"simple module {name!r}: writes={text!r} is not a pattern ({exc})") from None
        unknown = sorted(f for f in fields if f not in keyword_only)
        if unknown:
            raise ModuleDefinitionError(
                f"simple module {name!r}: writes={text!r} names {unknown[0]!r}, which is not one of its parameters "
                f"(keyword-only: {sorted(keyword_only)})"
            )
        files.append(text)
    return tuple(files)


def _make_importable(fn: Callable[..., Any]) -> None:
    """Let pickle find a decorated module-level function at ``<module>.<name>.function``."""
    qualname = getattr(fn, "__qualname__", "")
    if qualname != getattr(fn, "__name__", None):
        return  # nested, a method, or already done
    mod = sys.modules.get(getattr(fn, "__module__", "") or "")
    if mod is None or getattr(mod, qualname, None) is fn:
        return  # simple(f) on a function its module already names: pickle finds it as it is
    fn.__qualname__ = f"{qualname}.function"
