"""The registry fetched over real HTTP and cached: a fresh copy costs no request, an old one is asked
again with If-None-Match (304), the registry unreachable falls back to the copy with its age said,
no network and no cache is one error, a broken registry never replaces a good copy; downloads are
capped, timed out and checked against their digest."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from deck.config.registry_url import DEFAULT_URL
from deck.registry import source
from deck.registry.catalog import RegistryError
from deck.registry.download import download
from deck.registry.source import load, registry_url

from tests.registry_server import RegistryServer, sha256

AGENT = {
    "id": "gemini",
    "name": "Gemini CLI",
    "version": "0.37.0",
    "distribution": {"npx": {"package": "@google/gemini-cli"}},
}


def age_cache(url: str, seconds: float) -> None:
    """Make the cached copy of `url` `seconds` old."""
    meta = source._cache_files(url)[1]
    info = json.loads(meta.read_text())
    info["fetched"] = time.time() - seconds
    meta.write_text(json.dumps(info))


def test_a_fresh_copy_costs_no_request_and_an_old_one_is_revalidated_with_its_etag(registry: RegistryServer) -> None:
    url = registry.serve_registry([AGENT])
    first = asyncio.run(load(url))
    assert first.how == "fetched" and list(first.catalog.agents) == ["gemini"] and registry.registry_hits() == 1
    again = asyncio.run(load(url))
    assert again.how == "cached" and registry.registry_hits() == 1  # no request at all
    age_cache(url, source.FRESH + 5)
    revalidated = asyncio.run(load(url))
    assert registry.registry_hits() == 2 and revalidated.how == "fetched"
    assert registry.hits[-1][1].get("If-None-Match", "").startswith('"')  # a 304 answered it: same catalog
    assert list(revalidated.catalog.agents) == ["gemini"]
    forced = asyncio.run(load(url, refresh=True))
    assert registry.registry_hits() == 3 and forced.how == "fetched"


def test_without_network_the_cached_copy_is_used_and_its_age_said(registry: RegistryServer) -> None:
    url = registry.serve_registry([AGENT])
    asyncio.run(load(url))
    age_cache(url, 7300)
    registry.stop()
    offline = asyncio.run(load(url))
    assert offline.how == "offline" and list(offline.catalog.agents) == ["gemini"]
    assert offline.note().startswith("the registry cannot be reached (") and offline.note().endswith(
        "using the copy cached 2 h ago"
    )


def test_no_network_and_no_cache_is_one_error(registry: RegistryServer) -> None:
    url = registry.serve_registry([AGENT])
    registry.stop()
    with pytest.raises(
        RegistryError,
        match=r"^cannot reach the registry \(http://127\.0\.0\.1:\d+/registry\.json: .*\) "
        r"and there is no cached copy of it$",
    ):
        asyncio.run(load(url))


def test_a_broken_registry_is_an_error_and_never_replaces_the_good_copy(registry: RegistryServer) -> None:
    url = registry.serve_registry([AGENT])
    asyncio.run(load(url))
    registry.serve("/registry.json", b"<html>oops</html>")
    with pytest.raises(RegistryError, match="is not valid JSON"):
        asyncio.run(load(url, refresh=True))
    registry.serve("/registry.json", b'{"agents": {"not": "a list"}}')
    with pytest.raises(RegistryError, match="not in the ACP registry format"):
        asyncio.run(load(url, refresh=True))
    assert list(source.cached(url).catalog.agents) == ["gemini"]  # type: ignore[union-attr]


def test_an_http_error_falls_back_to_the_copy_and_a_huge_registry_is_refused(
    registry: RegistryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = registry.serve_registry([AGENT])
    asyncio.run(load(url))
    registry.serve("/registry.json", b"down", status=503)
    assert asyncio.run(load(url, refresh=True)).why.endswith("answered HTTP 503")
    monkeypatch.setattr("deck.registry.source.MAX_REGISTRY", 1000)
    big = registry.serve("/big.json", b" " * 2000)
    with pytest.raises(RegistryError, match="larger than"):
        asyncio.run(load(big))
    quiet = registry.serve("/quiet.json", b" " * 200_000, length=False)  # no Content-Length: counted as read
    with pytest.raises(RegistryError, match="larger than"):
        asyncio.run(load(quiet))


def test_a_registry_larger_than_one_read_is_read_whole(registry: RegistryServer) -> None:
    agents = [{**AGENT, "id": f"agent-{i}", "description": "x" * 2000} for i in range(1500)]  # some 3 MB
    url = registry.serve("/registry.json", json.dumps({"agents": agents}).encode(), length=False)
    assert len(asyncio.run(load(url)).catalog.agents) == 1500


def test_the_url_comes_from_the_environment_then_the_config_and_only_http_https_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DECK_REGISTRY_URL", raising=False)
    assert registry_url() == DEFAULT_URL
    assert registry_url("file:///r.json") == "file:///r.json"
    monkeypatch.setenv("DECK_REGISTRY_URL", "https://mirror.example/r.json")
    assert registry_url("file:///r.json") == "https://mirror.example/r.json"
    monkeypatch.setenv("DECK_REGISTRY_URL", "ftp://x/r.json")
    with pytest.raises(RegistryError, match="is not http, https or file") as caught:
        registry_url()
    assert caught.value.exit_code == 2


def test_a_file_registry_is_read_and_a_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"agents": [AGENT]}))
    assert asyncio.run(load(path.as_uri())).how == "file"
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(RegistryError, match="cannot read the registry"):
        asyncio.run(load(fifo.as_uri()))


# -- downloads -------------------------------------------------------------------------------------


def test_a_download_is_checked_against_its_digest(registry: RegistryServer, tmp_path: Path) -> None:
    url = registry.serve("/a.tar.gz", b"archive bytes")
    seen: list[tuple[int, int | None]] = []
    asyncio.run(
        download(url, tmp_path / "ok", sha256=sha256(b"archive bytes"), progress=lambda d, t: seen.append((d, t)))
    )
    assert (tmp_path / "ok").read_bytes() == b"archive bytes" and seen[-1] == (13, 13)
    with pytest.raises(RegistryError, match=r"its SHA-256 is [0-9a-f]{64}, the registry says 0{64}: not installed"):
        asyncio.run(download(url, tmp_path / "bad", sha256="0" * 64))


def test_a_download_past_the_cap_is_stopped_whether_or_not_it_says_its_length(
    registry: RegistryServer, tmp_path: Path
) -> None:
    url = registry.serve("/big.zip", b"x" * 5000)
    with pytest.raises(RegistryError, match="is 5000 bytes, more than the 1000 deck downloads"):
        asyncio.run(download(url, tmp_path / "a", max_size=1000))
    url = registry.serve("/quiet.zip", b"x" * 200_000, etag=False, length=False)
    with pytest.raises(RegistryError, match="more than"):
        asyncio.run(download(url, tmp_path / "b", max_size=1000))


def test_a_stalled_download_times_out_and_a_404_is_said(
    registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("deck.registry.download.READ_TIMEOUT", 0.3)
    url = registry.serve("/slow.zip", b"x", stall=3)
    with pytest.raises(RegistryError, match=r"^cannot download http://.*/slow\.zip: timed out$"):
        asyncio.run(download(url, tmp_path / "a"))
    with pytest.raises(RegistryError, match="answered HTTP 404"):
        asyncio.run(download(registry.url("/missing.zip"), tmp_path / "b"))


def test_a_file_archive_is_copied_checked_and_capped(tmp_path: Path) -> None:
    source_file = tmp_path / "agent.tar.gz"
    source_file.write_bytes(b"y" * 3000)
    asyncio.run(download(source_file.as_uri(), tmp_path / "a", sha256=sha256(b"y" * 3000)))
    assert (tmp_path / "a").read_bytes() == b"y" * 3000
    with pytest.raises(RegistryError, match="more than the 1000 bytes"):
        asyncio.run(download(source_file.as_uri(), tmp_path / "b", max_size=1000))
    with pytest.raises(RegistryError, match="cannot read"):
        asyncio.run(download((tmp_path / "missing").as_uri(), tmp_path / "c"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RegistryError, match="is not a regular file"):
        asyncio.run(download((tmp_path / "fifo").as_uri(), tmp_path / "d"))
