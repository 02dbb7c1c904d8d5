"""Everything ``app/`` imports is a runtime dependency of the package, not a dev extra.

The package is installed without extras in the image (``pip install .``) and by users, so a
module imported only through the ``dev`` extra would be missing there: ``tidemark run``
would fail before doing anything. This check reads every import statement of ``app/``
(including those inside functions), maps each third-party top-level module to the
distributions that provide it in this environment, and requires one of them to be listed in
``[project].dependencies``. The installed-wheel test (tests/e2e/test_installed_wheel.py)
shows the same by importing every module in a virtual environment that has only those
dependencies.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_dependencies(pyproject: Path) -> set[str]:
    """The distribution names in ``[project].dependencies`` (extras not included)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return {_normalise(re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0])
            for spec in project["dependencies"]}


def imported_modules(package: Path) -> dict[str, str]:
    """Each absolute top-level module imported under ``package`` -> one place importing it."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                found.setdefault(top, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def undeclared_imports(package: Path, declared: set[str]) -> list[str]:
    """The third-party imports of ``package`` that no declared dependency provides."""
    providers = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(imported_modules(package).items()):
        if module in sys.stdlib_module_names or module == package.name:
            continue
        distributions = {_normalise(d) for d in providers.get(module, [])}
        if not distributions & declared:
            names = ", ".join(sorted(distributions)) or "no installed distribution"
            missing.append(f"{module} (imported at {where}; provided by {names})")
    return missing


def test_every_third_party_import_of_app_is_a_runtime_dependency() -> None:
    missing = undeclared_imports(APP, declared_dependencies(ROOT / "pyproject.toml"))
    assert not missing, "add to [project].dependencies in pyproject.toml: " + "; ".join(missing)


def test_a_dependency_moved_to_the_dev_extra_is_reported(tmp_path: Path) -> None:
    """The check is live: without pyyaml in the runtime dependencies, app/config.py's
    ``import yaml`` is reported."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    without = re.sub(r'^\s*"pyyaml[^"]*",.*\n', "", pyproject, flags=re.MULTILINE)
    assert without != pyproject
    (tmp_path / "pyproject.toml").write_text(without)
    missing = undeclared_imports(APP, declared_dependencies(tmp_path / "pyproject.toml"))
    assert [m for m in missing if m.startswith("yaml ")], missing
