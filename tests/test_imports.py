"""Every public name stays importable while ``import pytimely`` loads none of the layers until a name is used."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import pytimely

PACKAGES = [  # the packages that declare ``__all__``
    "pytimely",
    "pytimely.algorithms",
    "pytimely.communication",
    "pytimely.communication.cluster",
    "pytimely.connectors",
    "pytimely.container",
    "pytimely.dataflow",
    "pytimely.dataflow.channels",
    "pytimely.dataflow.channels.pushers",
    "pytimely.errors",
    "pytimely.membership",
    "pytimely.progress",
    "pytimely.recovery",
    "pytimely.spark",
    "pytimely.verify",
    "pytimely.verify.rescale",
    "pytimely.workflow",
    "pytimely.workflow.executors",
    "pytimely.workflow.staging",
]


def _fresh(code: str) -> str:
    """Run ``code`` in a new interpreter (so nothing is imported yet) and give back what it printed."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_imports(package: str) -> None:
    """``from package import name`` gives an object for every name the package's ``__all__`` lists."""
    module = importlib.import_module(package)
    names = module.__all__
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names {missing} it does not define"
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # the star import is what is checked
    assert set(names) <= set(namespace)


def test_the_package_lists_what_it_exports() -> None:
    """``dir(pytimely)`` shows every public name before any is used, as an eager import did."""
    listed = _fresh("import pytimely; print(' '.join(dir(pytimely)))").split()
    assert set(pytimely.__all__) <= set(listed)


def test_importing_the_package_loads_no_layer() -> None:
    """``import pytimely`` (the first step of every ``pytimely.*`` import) imports no submodule of its own."""
    loaded = _fresh("import sys, pytimely; print(' '.join(m for m in sys.modules if m.startswith('pytimely')))")
    assert loaded.split() == ["pytimely"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name the package does not export raises ``AttributeError``, so ``hasattr`` and ``getattr`` still work."""
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = pytimely.no_such_name  # type: ignore[attr-defined]


def test_execute_stays_the_function_once_its_module_is_loaded() -> None:
    """Loading the module ``pytimely.execute`` before or after the name is used leaves ``pytimely.execute`` the
    function, as it was when the package imported it eagerly."""
    kinds = _fresh(
        "import pytimely, pytimely.command\n"
        "from pytimely import execute\n"
        "import pytimely.execute\n"
        "print(type(execute).__name__, type(pytimely.execute).__name__)"
    )
    assert kinds.split() == ["function", "function"]
    module = importlib.import_module("pytimely.execute")
    assert isinstance(module, types.ModuleType)
    assert pytimely.execute is module.execute
