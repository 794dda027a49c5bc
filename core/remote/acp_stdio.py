"""`deck acp AGENT` on stdio: the ACP client's lines on stdin, deck's answers and updates on stdout,
through the translator (`deck.remote.acp_proxy`). The frontend of a deck of its own, or a client of
the config's running server; either way stdout is the ACP channel and nothing else: `take_stdio`
points file descriptor 1 at stderr before anything runs, so a stray print can never reach it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from deck.frontend import Frontend, read_lines
from deck.remote.acp_proxy import AcpProxy

#: How long the end of the connection waits for stdout to take what is left.
CLOSE_SECONDS = 2.0


def take_stdio() -> tuple[int, int]:
    """The ACP channel: (a descriptor reading stdin, one writing the real stdout). From now on
    descriptor 1 is stderr, so that nothing but ACP ever goes to the client."""
    channel_out = os.dup(1)
    os.dup2(2, 1)
    return os.dup(0), channel_out


class AcpStdio(Frontend):
    """One ACP client on the process's stdin and stdout, driving `agent`: until its stdin ends."""

    name = "acp"
    description = "one ACP client on stdin/stdout (deck acp)"

    def __init__(self, client: Any, *, agent: str, channel: tuple[int, int], **options: Any) -> None:
        super().__init__(client, agent=agent, **options)
        self.agent = agent
        self.input_fd, self.output_fd = channel

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[str] = loop.create_future()
        output = await _write_end(loop, self.output_fd, ended)
        reading: list[asyncio.ReadTransport] = []  # stdin's, once it is read

        def backlog(full: bool) -> None:  # a client that does not read its answers is not read either
            for transport in reading:
                if full:
                    transport.pause_reading()
                else:
                    transport.resume_reading()

        proxy = AcpProxy(
            self.client, self.agent, output.write, backlog=output.get_write_buffer_size,
            on_close=lambda why: _end(ended), on_backlog=backlog, cwd=os.getcwd(),
        )  # fmt: skip
        self.client.subscribe(proxy.on_event)
        transport = await _read(loop, self.input_fd, proxy, ended)
        if transport is not None:
            reading.append(transport)
        try:
            await ended
            if ended.result() == "eof":  # the client sent all it had: what it asked is answered first,
                await self.client.end_of_input(drain=False)  # and nobody is left to answer for it (a deck of its own)
                await proxy.drain()
        finally:
            self.client.unsubscribe(proxy.on_event)
            proxy.flush_now()
            proxy.close()
            for transport in reading:
                transport.close()
            await _closed(output)
        return 0


async def _write_end(loop: asyncio.AbstractEventLoop, fd: int, ended: asyncio.Future[str]) -> asyncio.WriteTransport:
    """stdout as a transport that never blocks the loop: a pipe's or a socket's, else (a file) plain writes."""
    pipe = os.fdopen(fd, "wb", 0)
    try:
        transport, _ = await loop.connect_write_pipe(lambda: _Output(ended), pipe)
        return transport  # type: ignore[return-value]
    except ValueError:  # a regular file: written at once, it never holds the loop long
        return _FileOutput(pipe, _Output(ended))


class _FileOutput(asyncio.WriteTransport):
    """A regular file as stdout: each write goes out whole, at once."""

    def __init__(self, file: Any, protocol: _Output) -> None:
        super().__init__()
        self.file = file
        self.protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self.file.write(data)
        except OSError:
            self.close()

    def get_write_buffer_size(self) -> int:
        return 0

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol

    def is_closing(self) -> bool:
        return self.file.closed  # type: ignore[no-any-return]

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()
            self.protocol.connection_lost(None)

    def abort(self) -> None:
        self.close()


class _Output(asyncio.Protocol):
    """The write end of stdout: the client closing it ends the connection."""

    def __init__(self, ended: asyncio.Future[str]) -> None:
        self.ended = ended
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        _end(self.ended)
        if not self.lost.done():
            self.lost.set_result(None)


class _Input(asyncio.Protocol):
    """stdin, a pipe or a socket: its bytes to the translator, its end the connection's."""

    def __init__(self, proxy: AcpProxy, ended: asyncio.Future[str]) -> None:
        self.proxy = proxy
        self.ended = ended

    def data_received(self, data: bytes) -> None:
        self.proxy.feed(data)

    def eof_received(self) -> bool:
        self.proxy.framer.close()
        _end(self.ended, "eof")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        _end(self.ended)


async def _read(loop: asyncio.AbstractEventLoop, fd: int, proxy: AcpProxy, ended: asyncio.Future[str]) -> asyncio.ReadTransport | None:
    """Read stdin into `proxy`: on the event loop where it is a pipe or a socket, else (a file) by a thread."""
    pipe = os.fdopen(fd, "rb", 0)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: _Input(proxy, ended), pipe)
        return transport
    except ValueError:  # a regular file: no event loop reads one
        pass
    lines = read_lines(os.dup(fd))
    pipe.close()

    async def pump() -> None:
        while (line := await lines.get()) is not None:
            proxy.handle_line(line)
        _end(ended, "eof")

    task = loop.create_task(pump())
    ended.add_done_callback(lambda _: task.cancel())
    return None


async def _closed(output: asyncio.WriteTransport) -> None:
    """stdout closed once what it holds is written (CLOSE_SECONDS at most)."""
    protocol = output.get_protocol()
    assert isinstance(protocol, _Output)
    output.close()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CLOSE_SECONDS):
            await protocol.lost
    if not protocol.lost.done():
        output.abort()


def _end(ended: asyncio.Future[str], why: str = "lost") -> None:
    """The connection ends: `eof`, the client sent all it had; `lost`, it is gone (or closed)."""
    if not ended.done():
        ended.set_result(why)
