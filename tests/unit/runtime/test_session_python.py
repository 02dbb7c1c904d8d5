"""The interpreter command a local Spark starts its Python processes with.

Spark puts pyspark's zip files first on its Python processes' PYTHONPATH, and Python
compiles what it imports from a zip file from source every time. The session's script drops
those two entries, and only those, so pyspark comes from its installed package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from app.runtime.session import _local_python

LIB = Path(pyspark.__file__).resolve().parent / "python" / "lib"
ZIPS = sorted(str(p) for p in LIB.glob("*.zip"))


def _run(script: str, python_path: str, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": python_path}
    done = subprocess.run(
        [script, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_the_zips_leave_pythonpath_and_nothing_else_does(tmp_path: Path) -> None:
    assert len(ZIPS) == 2, ZIPS  # pyspark.zip and py4j-*-src.zip
    script = _local_python(sys.executable, tmp_path)
    assert script != sys.executable and Path(script).parent == tmp_path
    other = tmp_path / "elsewhere"
    other.mkdir()
    path = os.pathsep.join([ZIPS[0], str(other), ZIPS[1], "/no/such/dir", "has space"])
    code = "import os, sys; print(os.environ.get('PYTHONPATH')); print(sys.executable)"
    printed = _run(script, path, code).splitlines()
    assert printed[0] == os.pathsep.join([str(other), "/no/such/dir", "has space"])
    assert os.path.samefile(printed[1], sys.executable)


def test_pyspark_comes_from_its_package(tmp_path: Path) -> None:
    script = _local_python(sys.executable, tmp_path)
    found = _run(script, os.pathsep.join(ZIPS), "import pyspark; print(pyspark.__file__)")
    assert found == pyspark.__file__
    assert ".zip" not in found
    # Without the script, the zip wins: what the script is for.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(ZIPS)}
    plain = subprocess.run(
        [sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert ".zip" in plain


def test_a_pythonpath_of_the_zips_alone_is_unset(tmp_path: Path) -> None:
    """An empty result unsets PYTHONPATH rather than leaving an empty entry (the current
    directory)."""
    script = _local_python(sys.executable, tmp_path)
    assert _run(script, os.pathsep.join(ZIPS), "import os; print('PYTHONPATH' in os.environ)") == (
        "False"
    )


def test_another_interpreter_is_left_as_it_is(tmp_path: Path) -> None:
    assert _local_python("/usr/bin/python3", tmp_path) == "/usr/bin/python3"
    assert not list(tmp_path.iterdir())


def test_the_same_script_is_reused(tmp_path: Path) -> None:
    first = _local_python(sys.executable, tmp_path)
    assert _local_python(sys.executable, tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [Path(first).name]


def test_an_unusable_directory_falls_back_to_the_interpreter(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    assert _local_python(sys.executable, blocked / "sub") == sys.executable
