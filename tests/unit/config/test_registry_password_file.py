"""The schema registry's password from a mounted file (``schema_registry_password_file``), as
the chart's ``secretFiles`` mounts it: the file's content, the variable winning when both are
set, and an error naming the variable when the file is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.config import load_settings
from app.errors import ConfigError

URL = "http://127.0.0.1:8081"


@pytest.fixture(autouse=True)
def _no_tidemark_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TIDEMARK_"):
            monkeypatch.delenv(name)


def test_the_registry_password_is_read_from_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = tmp_path / "password"
    password.write_text("registry-pw\n")
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_URL", URL)
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_USERNAME", "tidemark")
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE", str(password))
    settings = load_settings(None)
    assert settings.schema_registry_config() == {
        "url": URL, "basic.auth.user.info": "tidemark:registry-pw",
    }
    assert "registry-pw" not in repr(settings)
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_PASSWORD", "from-the-variable")
    assert load_settings(None).schema_registry_config() == {
        "url": URL, "basic.auth.user.info": "tidemark:from-the-variable",
    }


def test_a_missing_registry_password_file_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match="TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE .*absent"):
        load_settings(None)
