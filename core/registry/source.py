"""Where the registry comes from and its cache: `https://cdn.agentclientprotocol.com/…` by default,
`[registry] url` or `$DECK_REGISTRY_URL` (http, https or file).

A copy fetched over HTTP is kept in `$XDG_CACHE_HOME/deck/registry/` with its ETag. A copy younger
than `FRESH` is used as it is, with no network call (`deck agents add` right after `search`); an
older one is asked again with `If-None-Match` (a 304 costs a few bytes); without network the last
copy is used and its age said. A registry that is not valid JSON is an error and never replaces
the cached copy.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from deck.config.registry_url import effective_url
from deck.errors import ExitCode
from deck.proc.storage import write_atomic
from deck.registry.catalog import MAX_REGISTRY, Catalog, RegistryError, parse

#: How long a cached copy is used without asking the registry again, in seconds.
FRESH = 3600.0
#: Seconds to connect, and for the whole fetch of the registry.
CONNECT_TIMEOUT = 10.0
FETCH_TIMEOUT = 30.0


@dataclass(frozen=True)
class Loaded:
    """The registry, and how deck got it: `fetched` (just now), `cached` (a copy `age` seconds old,
    `offline` when the registry could not be reached: `why`), `file`."""

    catalog: Catalog
    how: str
    age: float = 0.0
    why: str = ""

    def note(self) -> str:
        """One line for the user when the copy is not fresh from the registry; "" otherwise."""
        if self.how == "offline":
            return f"the registry cannot be reached ({self.why}): using the copy cached {format_age(self.age)} ago"
        return ""


def registry_url(configured: str | None = None) -> str:
    """The registry's URL: `$DECK_REGISTRY_URL`, else the config's `[registry] url`, else the default;
    RegistryError (exit 2) for another scheme than http, https or file."""
    url = effective_url(configured)
    if urlsplit(url).scheme not in ("http", "https", "file"):
        raise RegistryError(f"registry URL {url!r} is not http, https or file", ExitCode.USAGE)
    return url


def cache_dir() -> Path:
    """deck's cache of registries: `$XDG_CACHE_HOME/deck/registry`."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deck" / "registry"


def _cache_files(url: str) -> tuple[Path, Path]:
    """The cached copy of the registry at `url` and its metadata (ETag, when fetched): one pair per URL."""
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    return cache_dir() / f"{key}.json", cache_dir() / f"{key}.meta.json"


def format_age(seconds: float) -> str:
    """3700 → "1 h", 90 → "1 min": how old a copy is, roughly."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{max(int(seconds), 0)} s"


def cached(url: str) -> Loaded | None:
    """The cached copy of the registry at `url`, with its age; None if there is none or it is unreadable.
    Never a network call: `deck agents` reads newer versions from it."""
    data, meta = _cache_files(url)
    try:
        info = json.loads(meta.read_text(encoding="utf-8"))
        body = _read_file(data)
        catalog = parse(body, url)
    except (OSError, ValueError, RegistryError):
        return None
    fetched = info.get("fetched") if isinstance(info, dict) else None
    age = time.time() - fetched if isinstance(fetched, (int, float)) else float("inf")
    return Loaded(catalog, "cached", max(age, 0.0))


async def load(url: str, *, refresh: bool = False) -> Loaded:
    """The registry at `url`: a file read, else the cached copy while fresh (unless `refresh`), else
    fetched (conditionally), falling back to the cache when the registry cannot be reached."""
    if urlsplit(url).scheme == "file":
        return Loaded(parse(_read_url_file(url), url), "file")
    copy = cached(url)
    if copy is not None and copy.age < FRESH and not refresh:
        return copy
    etag = _etag(url) if copy is not None else None
    try:
        status, body, new_etag = await _get(url, etag)
    except RegistryError as exc:
        if copy is None:
            raise RegistryError(f"cannot reach the registry ({exc}) and there is no cached copy of it") from None
        return Loaded(copy.catalog, "offline", copy.age, str(exc))
    if status == 304 and copy is not None:
        _write_meta(url, new_etag or etag)
        return Loaded(copy.catalog, "fetched")
    catalog = parse(body, url)  # before caching: a broken registry never replaces a good copy
    _store(url, body, new_etag)
    return Loaded(catalog, "fetched")


async def _get(url: str, etag: str | None) -> tuple[int, bytes, str | None]:
    """GET `url` (If-None-Match `etag`): status, body (capped), ETag. RegistryError on any failure."""
    import aiohttp

    headers = {"If-None-Match": etag} if etag else {}
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT, connect=CONNECT_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url, headers=headers, max_redirects=5) as response:
                if response.status == 304:
                    return 304, b"", response.headers.get("ETag")
                if response.status != 200:
                    raise RegistryError(f"{url} answered HTTP {response.status}")
                if (response.content_length or 0) > MAX_REGISTRY:
                    raise RegistryError(f"{url} is larger than {MAX_REGISTRY >> 20} MiB")
                chunks, size = [], 0
                async for chunk in response.content.iter_chunked(1 << 16):
                    size += len(chunk)
                    if size > MAX_REGISTRY:  # a server that does not say its length, or lies about it
                        raise RegistryError(f"{url} is larger than {MAX_REGISTRY >> 20} MiB")
                    chunks.append(chunk)
                return 200, b"".join(chunks), response.headers.get("ETag")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise RegistryError(f"{url}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200] or type(exc).__name__


def _etag(url: str) -> str | None:
    try:
        info = json.loads(_cache_files(url)[1].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    etag = info.get("etag") if isinstance(info, dict) else None
    return etag if isinstance(etag, str) and len(etag) < 1024 and etag.isprintable() else None


def _store(url: str, body: bytes, etag: str | None) -> None:
    """Keep `body` as the cached copy of `url`; a cache that cannot be written is no error."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_atomic(_cache_files(url)[0], body, durable=False)
        _write_meta(url, etag)
    except OSError:
        pass


def _write_meta(url: str, etag: str | None) -> None:
    meta: dict[str, Any] = {"url": url, "fetched": time.time(), "etag": etag}
    try:
        write_atomic(_cache_files(url)[1], json.dumps(meta).encode(), durable=False)
    except OSError:
        pass


def _read_url_file(url: str) -> bytes:
    path = Path(unquote(urlsplit(url).path))
    try:
        return _read_file(path)
    except OSError as exc:
        raise RegistryError(f"cannot read the registry {path}: {exc.strerror or exc}") from None


def _read_file(path: Path) -> bytes:
    """A registry file's bytes: a regular file of at most MAX_REGISTRY (never a FIFO left open)."""
    from deck.config.files import Unreadable

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise Unreadable("not a regular file")
        body = f.read(MAX_REGISTRY + 1)
    if len(body) > MAX_REGISTRY:
        raise RegistryError(f"the registry {path} is larger than {MAX_REGISTRY >> 20} MiB")
    return body
