"""A real local HTTP server (http.server in a thread) serving an ACP registry and the archives the
tests build, with ETags and a log of what was asked; and the archives themselves, hostile ones too."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from deck.registry.catalog import platform_key

from tests.conftest import FAKE_AGENT

#: This machine's platform key, as the registry names it.
HERE = platform_key()


@dataclass
class Served:
    body: bytes
    etag: bool = True
    status: int = 200
    stall: float = 0.0  # seconds to wait after the headers, before the body
    together: threading.Barrier | None = None  # requests held until this many have come (a race made sure)
    length: bool = True  # a Content-Length header (else the body ends when the connection closes)


@dataclass
class RegistryServer:
    """ThreadingHTTPServer on 127.0.0.1: `routes` path → what it serves; `hits` each request's path and headers."""

    routes: dict[str, Served] = field(default_factory=dict)
    hits: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.hits.append((self.path, dict(self.headers)))
                served = server.routes.get(self.path)
                if served is None:
                    self.send_error(404)
                    return
                tag = f'"{hashlib.sha256(served.body).hexdigest()[:16]}"'
                if served.etag and self.headers.get("If-None-Match") == tag:
                    self.send_response(304)
                    self.send_header("ETag", tag)
                    self.end_headers()
                    return
                self.send_response(served.status)
                if served.etag:
                    self.send_header("ETag", tag)
                if served.length:
                    self.send_header("Content-Length", str(len(served.body)))
                self.end_headers()
                if served.stall:
                    time.sleep(served.stall)
                if served.together is not None:
                    try:
                        served.together.wait(timeout=60)
                    except threading.BrokenBarrierError:
                        pass
                try:
                    self.wfile.write(served.body)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Shut it down and close its socket: a connection is refused from now on."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def serve(self, path: str, body: bytes, **how: Any) -> str:
        self.routes[path] = Served(body, **how)
        return self.url(path)

    def serve_registry(self, agents: list[dict[str, Any]]) -> str:
        return self.serve("/registry.json", json.dumps({"version": "1.0.0", "agents": agents}).encode())

    def registry_hits(self) -> int:
        return sum(1 for path, _ in self.hits if path == "/registry.json")


# -- archives ----------------------------------------------------------------------------------


def tar_bytes(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> bytes:
    """A tar (gzip by default) of `members`: (name, content) files, or TarInfo for anything else."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:  # type: ignore[call-overload]
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                name, content = member
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def tar_special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def zip_bytes(members: list[tuple[str, bytes] | tuple[str, bytes, int]]) -> bytes:
    """A zip of (name, content) or (name, content, unix mode) members."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for member in members:
            info = zipfile.ZipInfo(member[0])
            info.external_attr = (member[2] if len(member) == 3 else 0o100755) << 16  # type: ignore[misc]
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member[1])
    return buffer.getvalue()


def binary_agent(ident: str, version: str, archive_url: str, digest: str | None = None, cmd: str = "./bin/agent",
                 platform: str = HERE, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A registry entry whose only distribution is a binary for `platform`."""
    target: dict[str, Any] = {"archive": archive_url, "cmd": cmd, "args": ["acp"]}
    if digest:
        target["sha256"] = digest
    return {"id": ident, "name": ident.title(), "version": version, "description": f"{ident} agent",
            "distribution": {"binary": {platform: target}}, **extra}  # fmt: skip


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def agent_tar() -> bytes:
    """An archive whose bin/agent runs the fake agent: a real ACP agent once unpacked (on this machine,
    or on the tests' sshd host, which is this machine too)."""
    script = f"#!/bin/sh\nexec {sys.executable} {FAKE_AGENT}\n".encode()
    return tar_bytes([("bin/agent", script), ("LICENSE", b"MIT")])
