"""A simple module's call (:class:`Call`) and how it runs on the calling thread: its result read as out-port
values, the user's error turned into a :class:`~pytimely.errors.ModuleRaisedError` naming where it raised.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import ModuleDefinitionError, ModuleOutputError, ModuleRaisedError
from pytimely.workflow.fingerprint import is_user_file
from pytimely.workflow.logs import LOGS, Captured, capturing, texts
from pytimely.workflow.writes import WRITTEN, watching


@dataclass(frozen=True, slots=True)
class Call:
    """One run of a simple module: ``fn(**inputs, **params)``, reported under ``module``."""

    module: str
    fn: Callable[..., Any]
    inputs: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("out",)
    capture: bool = False
    """Collect what the function prints: the outputs then hold ``(stdout, stderr)`` under ``logs.LOGS``."""
    watch: bool = False
    """Watch the files the function opens for writing: the outputs then hold their paths under ``writes.WRITTEN``."""

    def __post_init__(self) -> None:
        both = set(self.inputs) & set(self.params)
        if both:
            raise ModuleDefinitionError(f"module {self.module!r}: {sorted(both)} given as inputs and as parameters")
        if len(set(self.outputs)) != len(self.outputs):
            raise ModuleDefinitionError(f"module {self.module!r}: out-port names repeat: {list(self.outputs)}")

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the function: inputs and parameters together."""
        return {**self.inputs, **self.params}

    def outputs_of(self, result: Any) -> dict[str, Any]:
        """The out-port values from the function's return value; ``ModuleOutputError`` when they do not fit."""
        if isinstance(result, Captured):
            outputs = self.outputs_of(result.value)
            if result.stdout is not None:
                outputs[LOGS] = (result.stdout, result.stderr or "")
            if result.written is not None:
                outputs[WRITTEN] = result.written
            return outputs
        names = self.outputs
        if not names:
            return {}
        if len(names) == 1:
            return {names[0]: result}
        if isinstance(result, Mapping):
            missing = [n for n in names if n not in result]
            extra = sorted(str(n) for n in result if n not in names)
            if missing or extra:
                raise ModuleOutputError(
                    f"module {self.module!r} returned outputs {sorted(map(str, result))}, expected {list(names)}"
                    + (f"; missing {missing}" if missing else "")
                    + (f"; unexpected {extra}" if extra else ""),
                    self.module,
                )
            return {n: result[n] for n in names}
        if isinstance(result, tuple) and len(result) == len(names):
            return dict(zip(names, result, strict=True))
        raise ModuleOutputError(
            f"module {self.module!r} has out-ports {list(names)}: its function must return a mapping with those "
            f"names or a tuple of {len(names)} values, got {type(result).__name__}",
            self.module,
        )


def invoke(call: Call, arguments: Mapping[str, Any] | None = None) -> Any:
    """Run the call's function on this thread; user errors become ``ModuleRaisedError`` naming the module."""
    arguments = call.arguments() if arguments is None else arguments
    if not call.capture and not call.watch:
        try:
            return call.fn(**arguments)
        except Exception as exc:
            raise raised(call.module, exc) from exc
    buffers = None
    with contextlib.ExitStack() as stack:
        buffers = stack.enter_context(capturing()) if call.capture else None
        written = stack.enter_context(watching()) if call.watch else None
        try:
            value = call.fn(**arguments)
        except Exception as exc:
            stack.close()  # the streams stop being collected before the error is built
            raise raised(call.module, exc, *texts(buffers)) from exc
    stdout, stderr = texts(buffers)
    return Captured(value, stdout, stderr, None if written is None else tuple(written))


def where(exc: BaseException) -> tuple[str | None, int | None, str | None]:
    """The file, line and function where ``exc`` was raised in the user's own code (else its innermost frame)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    chosen = None
    for frame in frames:
        if is_user_file(frame.filename):
            chosen = frame
    if chosen is None and frames:
        chosen = frames[-1]
    if chosen is None:
        return None, None, None
    name = chosen.filename
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(name)
        if not relative.startswith(".."):
            name = relative
    return name, chosen.lineno, chosen.name


def raised(
    module: str, exc: BaseException, stdout: str | None = None, stderr: str | None = None, *,
    place: tuple[str | None, int | None, str | None] | None = None,
) -> ModuleRaisedError:  # fmt: skip
    """The ``ModuleRaisedError`` for ``exc`` raised by module ``module``'s code (``place``: where, if known)."""
    file, line, function = where(exc) if place is None else place
    at = (f" at {file}:{line}" + (f" (in {function})" if function else "")) if file is not None else ""
    return ModuleRaisedError(
        f"module {module!r} failed{at}: {type(exc).__name__}: {exc}", module, file=file, line=line,
        stdout=stdout or "", stderr=stderr or "",
    )  # fmt: skip
