"""The Kafka source's connector modules know offsets, fetching and decoding only: nothing of
the runtime (its steps' orders, Spark local properties, step files, the slice cache). The
runtime imports the connector, never the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CONNECTORS = Path(__file__).resolve().parents[3] / "app" / "connectors"
SOURCE_MODULES = ("kafka_source.py", "kafka_offsets.py", "kafka_fetch.py", "kafka_consumers.py")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", SOURCE_MODULES)
def test_a_source_connector_module_imports_nothing_of_the_runtime(module: str) -> None:
    imports = _imports(CONNECTORS / module)
    assert not {name for name in imports if name.startswith("app.runtime")}
    assert "pyspark" not in imports and "pickle" not in imports


@pytest.mark.parametrize("module", SOURCE_MODULES)
def test_a_source_connector_module_reads_no_local_property(module: str) -> None:
    text = (CONNECTORS / module).read_text()
    for word in ("getLocalProperty", "TaskContext", "waterlines/", "tidemark-slices"):
        assert word not in text, word
