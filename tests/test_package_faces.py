"""Package faces are contracts: a package uses another only through names that the other's
``__init__`` exports (``__all__``), or through its generated wire code (``proto``); and every
exception the packages define derives from the one base, ``sailor_sim.SailorError``."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from sailor_sim import SailorError

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {
    "sailor_sim": "sailor-sim",
    "sailor_planner": "sailor-planner",
    "sailor_profiler": "sailor-profiler",
    "sailor_runtime": "sailor-runtime",
}


def _sources(package: str):
    root = REPO / "packages" / PACKAGES[package] / "src" / package
    for path in sorted(root.rglob("*.py")):
        if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            yield path


def _cross_package_imports(package: str):
    """(file:line, other package, module, names) of every import of another package."""
    for path in _sources(package):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [(node.module, [a.name for a in node.names])]
            elif isinstance(node, ast.Import):
                modules = [(a.name, []) for a in node.names]
            else:
                continue
            for module, names in modules:
                other = module.split(".")[0]
                if other in PACKAGES and other != package:
                    yield f"{path.relative_to(REPO)}:{node.lineno}", other, module, names


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_other_packages_are_used_through_their_faces(package: str) -> None:
    wrong = []
    for where, other, module, names in _cross_package_imports(package):
        if ".proto" in module or module.endswith(".proto"):
            continue  # generated wire code: the contract is the .proto file
        if module != other:
            wrong.append(f"{where}: imports {module}; import from {other} (its face) instead")
            continue
        exported = set(importlib.import_module(other).__all__)
        wrong += [f"{where}: {other} does not export {n}" for n in names if n not in exported]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it cannot give: {missing}"


def _all_modules(package: str):
    root = importlib.import_module(package)
    yield root
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not info.name.endswith(("_pb2", "_pb2_grpc")) and not info.name.endswith("__main__"):
            yield importlib.import_module(info.name)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_error_derives_from_the_one_base(package: str) -> None:
    outside = []
    for module in _all_modules(package):
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not issubclass(value, SailorError)
                and not issubclass(value, KeyboardInterrupt)  # a stop (inputs.Terminated)
            ):
                outside.append(f"{module.__name__}.{name}")
    assert not outside, f"errors outside sailor_sim.SailorError: {outside}"
