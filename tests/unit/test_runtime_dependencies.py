"""Everything ``app/`` imports is a runtime dependency of the package, not a dev extra.

The package is installed without extras in the image (``pip install .``) and by users, so a
module imported only through the ``dev`` extra would be missing there: ``tidemark run``
would fail before doing anything. This check reads every import statement of ``app/``
(including those inside functions), maps each third-party top-level module to the
distributions that provide it in this environment, and requires one of them to be listed in
``[project].dependencies``. The installed-wheel test (tests/e2e/test_installed_wheel.py)
shows the same by importing every module in a virtual environment that has only those
dependencies.

The image installs those dependencies with ``-c constraints.txt``: the checks below hold that
file to an exact pin of every runtime dependency and of everything they require, at the
versions installed here (where the tests ran), and to nothing else. The Makefile installs
``.[dev]`` with ``-c constraints.txt -c constraints-dev.txt``; the second file pins what the dev
extra adds, and ``pip freeze`` of this environment must be exactly the union of the two: a
fresh clone's ``make test`` installs the versions pinned here, and the image the same runtime
versions as the virtual environment.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

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


CONSTRAINTS = ROOT / "constraints.txt"
DEV_CONSTRAINTS = ROOT / "constraints-dev.txt"


def _freeze_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "freeze_constraints", ROOT / "scripts" / "freeze-constraints.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pinned_versions(constraints: Path) -> dict[str, str]:
    """``name==version`` lines of a constraints file (normalised name -> version); any other
    requirement line is an error."""
    pins: dict[str, str] = {}
    for number, line in enumerate(constraints.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        req = Requirement(text)
        (spec,) = req.specifier  # exactly one specifier: the pin
        assert spec.operator == "==" and "*" not in spec.version, f"line {number}: {line}"
        assert not req.marker and not req.extras, f"line {number}: {line}"
        pins[_normalise(req.name)] = spec.version
    return pins


def unpinned_runtime_dependencies(pyproject: Path, constraints: Path) -> list[str]:
    """Runtime dependencies of ``pyproject`` with no pin in ``constraints``, or whose pin is
    outside the range pyproject.toml allows."""
    pins = pinned_versions(constraints)
    problems = []
    for spec in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        req = Requirement(spec)
        version = pins.get(_normalise(req.name))
        if version is None:
            problems.append(f"{req.name} is not pinned")
        elif not SpecifierSet(str(req.specifier)).contains(version, prereleases=True):
            problems.append(f"{req.name}=={version} is outside {req.specifier}")
    return problems


def test_every_runtime_dependency_is_pinned_in_the_constraints() -> None:
    problems = unpinned_runtime_dependencies(ROOT / "pyproject.toml", CONSTRAINTS)
    assert not problems, "run scripts/freeze-constraints.py: " + "; ".join(problems)


def test_the_constraints_pin_the_runtime_closure_as_installed() -> None:
    """Transitive dependencies too, at the versions the tests ran with; no dev tool and not
    the project itself."""
    closure = _freeze_script().runtime_closure(ROOT / "pyproject.toml")
    pins = pinned_versions(CONSTRAINTS)
    assert pins == closure, "constraints.txt is out of date: run scripts/freeze-constraints.py"
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["dev"]
    dev_only = {_normalise(Requirement(spec).name) for spec in dev} - set(closure)
    assert dev_only and not dev_only & set(pins)
    assert "tidemark" not in pins and "pytest" not in pins


def test_the_dev_constraints_pin_what_the_dev_extra_adds_as_installed() -> None:
    script = _freeze_script()
    dev = script.dev_closure(ROOT / "pyproject.toml")
    pins = pinned_versions(DEV_CONSTRAINTS)
    assert pins == dev, "constraints-dev.txt is out of date: run scripts/freeze-constraints.py"
    assert "pytest" in pins and "tidemark" not in pins
    assert not set(pins) & set(pinned_versions(CONSTRAINTS))
    assert script.main(["freeze-constraints.py", "--check"]) == 0


def test_pip_freeze_of_the_environment_is_the_union_of_the_constraints() -> None:
    """Every distribution installed here (the project itself aside) is pinned, at the version
    installed, and every pin is installed: nothing came in beside the constraints."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable",
         "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    installed = {}
    for line in frozen.splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not a pinned distribution: {line}"
            installed[_normalise(name)] = version
    installed.pop("tidemark", None)  # the project, when installed as a wheel
    union = {**pinned_versions(CONSTRAINTS), **pinned_versions(DEV_CONSTRAINTS)}
    moved = sorted(n for n in installed.keys() & union.keys() if installed[n] != union[n])
    assert installed == union, (
        f"installed, not pinned: {sorted(set(installed) - set(union))};"
        f" pinned, not installed: {sorted(set(union) - set(installed))}; other version: {moved}"
    )


def test_the_makefile_installs_the_environment_with_both_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "CONSTRAINTS := constraints.txt constraints-dev.txt" in makefile
    assert "$(BIN)/pip install $(addprefix -c ,$(CONSTRAINTS)) -e '.[dev]'" in makefile
    # A change of the pins reinstalls the environment.
    assert re.search(r"^STAMP .*\$\(CONSTRAINTS\)", makefile, re.MULTILINE)
    assert re.search(r"^\$\(STAMP\): pyproject\.toml \$\(CONSTRAINTS\)$", makefile,
                     re.MULTILINE)


def test_a_dependency_missing_from_the_constraints_is_reported(tmp_path: Path) -> None:
    """The check is live: a constraints file without sqlglot, and one with an older pyspark
    than pyproject.toml allows, are both reported."""
    text = CONSTRAINTS.read_text()
    without = tmp_path / "without.txt"
    without.write_text(re.sub(r"^sqlglot==.*\n", "", text, flags=re.MULTILINE))
    assert unpinned_runtime_dependencies(ROOT / "pyproject.toml", without) == [
        "sqlglot is not pinned"
    ]
    older = tmp_path / "older.txt"
    older.write_text(re.sub(r"^pyspark==.*$", "pyspark==3.5.0", text, flags=re.MULTILINE))
    (problem,) = unpinned_runtime_dependencies(ROOT / "pyproject.toml", older)
    assert problem.startswith("pyspark==3.5.0 is outside")


def test_the_image_installs_its_dependencies_with_the_constraints() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY pyproject.toml constraints.txt ./" in dockerfile
    assert re.search(r"pip install [^\n]*-c constraints\.txt -r /tmp/requirements\.txt",
                     dockerfile)
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!constraints.txt" in ignore  # in the build context
