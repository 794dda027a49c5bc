"""Downloading an agent's archive: timeouts, a size cap, its SHA-256 checked where the registry
gives one, progress told to a callback (the command line prints it on a terminal)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from deck.registry.catalog import RegistryError

#: The largest archive deck downloads.
MAX_ARCHIVE = 1 << 30
#: Seconds to connect, and the longest wait for the next bytes.
CONNECT_TIMEOUT = 15.0
READ_TIMEOUT = 60.0
CHUNK = 1 << 16

#: Told (bytes so far, total or None) as the download goes.
Progress = Callable[[int, "int | None"], None]


async def download(
    url: str, dest: Path, *, sha256: str | None = None, max_size: int = MAX_ARCHIVE, progress: Progress | None = None
) -> None:
    """Write what `url` holds to the new file `dest`: RegistryError if it cannot be had, is larger
    than `max_size`, or its digest is not `sha256`. `dest` is left as it is on failure (the caller
    removes its temp folder)."""
    digest = hashlib.sha256()
    with open(dest, "xb") as out:
        if urlsplit(url).scheme == "file":
            _copy_file(url, out, digest, max_size)
        else:
            await _fetch(url, out, digest, max_size, progress)
    if sha256 is not None and digest.hexdigest() != sha256:
        raise RegistryError(f"{url}: its SHA-256 is {digest.hexdigest()}, the registry says {sha256}: not installed")


async def _fetch(url: str, out: BinaryIO, digest: hashlib._Hash, max_size: int, progress: Progress | None) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url, max_redirects=10) as response:
                if response.status != 200:
                    raise RegistryError(f"{url} answered HTTP {response.status}")
                total = response.content_length
                if total is not None and total > max_size:
                    raise RegistryError(f"{url} is {total} bytes, more than the {max_size} deck downloads")
                done = 0
                async for chunk in response.content.iter_chunked(CHUNK):
                    done += len(chunk)
                    if done > max_size:
                        raise RegistryError(f"{url} is more than the {max_size} bytes deck downloads")
                    digest.update(chunk)
                    out.write(chunk)
                    if progress is not None:
                        progress(done, total)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        reason = "timed out" if isinstance(exc, asyncio.TimeoutError) else (str(exc) or type(exc).__name__)
        raise RegistryError(f"cannot download {url}: {reason.splitlines()[0][:200]}") from None


def _copy_file(url: str, out: BinaryIO, digest: hashlib._Hash, max_size: int) -> None:
    path = Path(unquote(urlsplit(url).path))
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as src:
            info = os.fstat(src.fileno())
            if not stat.S_ISREG(info.st_mode):  # a FIFO would wait forever, a device never end
                raise RegistryError(f"{path} is not a regular file")
            if info.st_size > max_size:
                raise RegistryError(f"{path} is more than the {max_size} bytes deck downloads")
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror or exc}") from None
