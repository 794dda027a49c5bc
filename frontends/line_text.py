"""Line mode's streamed text: an agent's text and thoughts as they stream, complete lines out at once.

One stream per place lines show (`agent`, `agent › child`, a message between sessions): its part's
partial line waits for its end, a line longer than the width left flows out whole words at a time
(plain text), and Markdown (on a terminal) goes out a block at a time. `end` says what waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from deck.frontends.subagents import NESTED

FENCES = ("```", "~~~")


@dataclass
class Stream:
    """A text or thought part being streamed: complete lines go out, the rest waits."""

    message_id: str
    index: int
    kind: str
    partial: list[str] = field(default_factory=list)
    partial_len: int = 0
    block: list[str] = field(default_factory=list)  # Markdown lines not yet rendered
    in_fence: bool = False
    lines_out: int = 0
    blanks: int = 0  # blank lines held back: shown only when more words follow



class StreamedText:
    """The streams of one line frontend, written through its `emit(agent, body, style, markdown=)`."""

    def __init__(self, emit: Callable[..., None], width: Callable[[], int | None], markdown: bool) -> None:
        self.emit = emit
        self.width = width
        self.markdown = markdown
        self.streams: dict[str, Stream] = {}

    def __bool__(self) -> bool:
        return bool(self.streams)

    def delta(self, agent: str, message_id: str, index: int, kind: str, text: str) -> None:
        """A chunk of a text or thought part: a part other than the one streaming there ends that one."""
        stream = self.streams.get(agent)
        if stream is None or (stream.message_id, stream.index) != (message_id, index):
            self.end(agent)
            stream = self.streams[agent] = Stream(message_id, index, kind)
        self._feed(agent, stream, text)

    def end_all(self) -> None:
        for agent in list(self.streams):
            self.end(agent)

    def _feed(self, agent: str, stream: Stream, text: str) -> None:
        *complete, rest = text.split("\n")
        for piece in complete:
            stream.partial.append(piece)
            line = "".join(stream.partial).removesuffix("\r")  # CR LF ends a line as LF does
            stream.partial.clear()
            stream.partial_len = 0
            self._line(agent, stream, line)
        if rest:
            stream.partial.append(rest)
            stream.partial_len += len(rest)
            self._wrap_partial(agent, stream)

    def _wrap_partial(self, agent: str, stream: Stream) -> None:
        """Text without newlines still flows: whole lines of the width left go out as they fill."""
        width = self.width()
        if width is None or (self.markdown and stream.kind == "text"):
            return
        room = max(20, width - len(agent) - 3)
        if stream.partial_len <= room:
            return
        text = "".join(stream.partial)
        while len(text) > room:
            cut = text.rfind(" ", 0, room + 1)
            cut = cut if cut > 0 else room
            self._line(agent, stream, text[:cut])
            text = text[cut:].lstrip(" ")
        stream.partial[:] = [text] if text else []
        stream.partial_len = len(text)

    def _line(self, agent: str, stream: Stream, line: str) -> None:
        if self.markdown and stream.kind == "text":
            stripped = line.lstrip()
            if stripped.startswith(FENCES):
                stream.in_fence = not stream.in_fence
            if not stream.in_fence and not line.strip():
                self._render_block(agent, stream)
            else:
                stream.block.append(line)
            return
        if not line.strip():
            stream.blanks += stream.lines_out > 0  # none before a part's first words, none after its last
            return
        for _ in range(stream.blanks):
            self.emit(agent, "")
        stream.blanks = 0
        if stream.kind == "thought":
            shown = "thinking: " + line.strip() if stream.lines_out == 0 else "  " + line.rstrip()
            self.emit(agent, shown, "dim italic")
        else:
            self.emit(agent, line.rstrip())
        stream.lines_out += 1

    def _render_block(self, agent: str, stream: Stream) -> None:
        """Render the Markdown lines gathered so far (one or more complete blocks)."""
        if not "".join(stream.block).strip():
            stream.block.clear()
            return
        if stream.lines_out:
            self.emit(agent, "")
        self.emit(agent, "\n".join(stream.block), markdown=True)
        stream.block.clear()
        stream.lines_out += 1

    def end_family(self, agent: str) -> None:
        """End the streams of `agent`'s subagents and of its messages between sessions."""
        for key in [k for k in self.streams if k.startswith((agent + NESTED, agent + " · "))]:
            self.end(key)

    def end(self, agent: str) -> None:
        stream = self.streams.pop(agent, None)
        if stream is None:
            return
        if stream.partial:
            self._line(agent, stream, "".join(stream.partial))
        if stream.block:
            stream.in_fence = False
            self._render_block(agent, stream)

