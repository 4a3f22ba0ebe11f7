"""Every error class lives in the module of ``pytimely.errors`` for its layer and has one name: ``pytimely.errors.X``.

That name is what users import, what a traceback prints and a pickle records, and what a Spark query's failure is
read back from (``spark/streaming.py``'s ``_typed``); a class added to a layer's module but not to the package's
imports would print as ``pytimely.errors.<layer>.X`` and be lost there.
"""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import traceback

import pytimely.errors as errors


def _defined_in_layers() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.iter_modules(errors.__path__):
        module = importlib.import_module(f"pytimely.errors.{info.name}")
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__.startswith("pytimely.errors")
            ):
                found[name] = value
    return found


def test_every_error_of_every_layer_is_imported_from_and_named_by_pytimely_errors() -> None:
    defined = _defined_in_layers()
    assert "PytimelyError" in defined and "StreamSchemaError" in defined
    assert sorted(defined) == sorted(errors.__all__)
    for name, cls in defined.items():
        assert getattr(errors, name) is cls, name
        assert cls.__module__ == "pytimely.errors", name
        assert issubclass(cls, errors.PytimelyError), name


def test_an_error_prints_and_pickles_under_its_public_name() -> None:
    error = errors.PeerFailedError("process 3 closed its connection", 3)
    assert traceback.format_exception_only(error)[-1] == (
        "pytimely.errors.PeerFailedError: process 3 closed its connection\n"
    )
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is errors.PeerFailedError and again.peer == 3 and str(again) == str(error)
