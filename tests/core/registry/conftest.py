"""The registry server each test gets, and the folders (cache, data) of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry_server import RegistryServer


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[RegistryServer]:
    """A running registry server; DECK_REGISTRY_URL names it, and the cache and data folders are the test's."""
    server = RegistryServer()
    server.start()
    monkeypatch.setenv("DECK_REGISTRY_URL", server.url("/registry.json"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    try:
        yield server
    finally:
        try:
            server.stop()
        except Exception:
            pass
