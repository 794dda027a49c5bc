"""The client side of ACP's fs/* methods, confined to the agent's working directory."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from .errors import AcpError

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()


def inside(root: str, path: Any) -> str:
    """`path` resolved (symlinks, ..) if it lies inside `root`; else a JSON-RPC error."""
    if not isinstance(path, str) or not path:
        raise AcpError(INVALID_PARAMS, "path must be a non-empty string")
    if not os.path.isabs(path):
        raise AcpError(INVALID_PARAMS, f"path must be absolute: {path}")
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise AcpError(INVALID_PARAMS, f"path outside the agent's working directory refused: {path}")
    return real


def read_text_file(root: str, params: dict[str, Any]) -> dict[str, Any]:
    path = inside(root, params.get("path"))
    line, limit = params.get("line"), params.get("limit")
    for name, value in (("line", line), ("limit", limit)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "line" else 0)):
            raise AcpError(INVALID_PARAMS, f"{name} must be a positive integer")
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise AcpError(INVALID_PARAMS, f"not a regular file: {params.get('path')}")  # a FIFO would block
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            if line is None and limit is None:
                return {"content": f.read()}
            lines = f.read().splitlines(keepends=True)
    except FileNotFoundError as exc:
        raise AcpError(RESOURCE_NOT_FOUND, f"no such file: {params.get('path')}") from exc
    except IsADirectoryError as exc:
        raise AcpError(INVALID_PARAMS, f"is a directory: {params.get('path')}") from exc
    except OSError as exc:
        raise AcpError(-32603, f"cannot read {params.get('path')}: {exc.strerror}") from exc
    start = (line or 1) - 1
    end = start + limit if limit is not None else None
    return {"content": "".join(lines[start:end])}


def write_text_file(root: str, params: dict[str, Any]) -> dict[str, Any]:
    path = inside(root, params.get("path"))
    content = params.get("content")
    if not isinstance(content, str):
        raise AcpError(INVALID_PARAMS, "content must be a string")
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise AcpError(RESOURCE_NOT_FOUND, f"no such directory: {directory}")
    # An existing file keeps its mode; a new one gets what open() would give it (mkstemp's is 0600).
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~UMASK
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".deck-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        os.chmod(temp, mode)
        os.replace(temp, path)  # atomic: readers see the old file or the new one, never half
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return {}  # WriteTextFileResponse is an object, never null
