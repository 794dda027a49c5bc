"""What reaches the user's terminal: untrusted text made printable, and log records kept to one line.

An agent's text, thoughts, tool titles and stderr lines, and the names in a config file, may
carry control characters: ESC sequences that write the clipboard (OSC 52), clear the screen or
move the cursor, C1 controls (U+009B is CSI on many terminals), a carriage return or a backspace
that overwrites what was printed, bidi overrides that show a line in another order than it is
read ("Trojan Source"). `printable` turns each into a visible stand-in, so nothing is run and
nothing silently disappears. Frontends apply it where such text enters their rendering.

Log records: the whole record, traceback included, goes to deck's log file (`LogFile`); a
problem (warning and worse) is also one printable line on stderr (`TerminalLog`), shown once
however often it recurs, or handed to a full-screen frontend while it owns the screen.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

#: Unicode's control characters (category Cc) but tab and line feed, the bidi embeddings,
#: overrides and isolates, and lone surrogates (no terminal encoding can write one). One character class: the scan of text that has none is the cost on
#: every line shown (an alternation would double it).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The same, a CR LF pair matched whole: the newline it is.
_REPLACED = re.compile("\r\n|" + _UNSAFE.pattern)
#: C0 controls and DEL as their Control Pictures (ESC → ␛, CR → ␍), the rest as an escape (`\x9b`, `\u202e`,
#: a lone surrogate `\ud800`).
_SHOWN = {
    "\r\n": "\n",
    **{chr(c): chr(0x2400 + c) for c in range(0x20)},
    "\x7f": "\u2421",
    **{chr(c): f"\\x{c:02x}" for c in range(0x80, 0xA0)},
    **{chr(c): f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}
#: What JSON leaves raw in its strings and a terminal may still run: DEL, C1, the bidi controls.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    found = match.group()
    return _SHOWN.get(found) or f"\\u{ord(found):04x}"  # a lone surrogate


def printable(text: str) -> str:
    """`text` with every control character but tab and newline, and every bidi control, made visible.

    Text without any (nearly all of it) is returned itself after one regex scan, so
    `printable(text) is text` says that there was nothing to show.
    """
    if _UNSAFE.search(text) is None:
        return text
    return _REPLACED.sub(_shown, text)


def json_printable(line: str) -> str:
    """A JSON text with the characters JSON writes raw but a terminal may run (DEL, C1, bidi) as `\\u` escapes.

    The JSON value is the same: outside strings JSON is ASCII, and JSON itself escapes C0 controls.
    """
    if _JSON_UNSAFE.search(line) is None:
        return line
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


# -- a command's output ---------------------------------------------------------------------------

#: Every escape sequence a terminal would run: CSI (ESC [ or C1 U+009B), OSC, DCS, SOS, PM and APC
#: strings up to their terminator (or the end of the text: an unterminated one is dropped whole),
#: and the two-character ESC sequences (charset and keypad switches, ESC c that resets the terminal).
_ESCAPE = re.compile(
    "(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]?"
    "|(?:\x1b[]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\\\|\x9c|$)"
    "|\x1b[ -/]*[0-~]",
    re.DOTALL,
)
#: A Select Graphic Rendition (colours, bold) with few, small parameters: the only sequence kept, where kept.
_SGR = re.compile("\x1b\\[((?:\\d{1,3})?(?:;\\d{1,3}){0,15})m")
#: A line's text before a carriage return that is not part of a CR LF: a progress bar redrawing itself.
_OVERWRITTEN = re.compile("[^\n]*\r(?!\n)")


def terminal_text(text: str, keep_sgr: bool = False) -> str:
    """A command's output made safe to show: every escape sequence removed (with `keep_sgr`, a
    Select Graphic Rendition with small parameters stays), what a carriage return overwrites
    dropped, and any other control character made visible as `printable` does."""
    if "\r" in text:
        text = _OVERWRITTEN.sub("", text.replace("\r\n", "\n"))
    if keep_sgr:
        text = _ESCAPE.sub(lambda m: m.group() if _SGR.fullmatch(m.group()) else "", text)
        kept = _SGR.split(text)  # text, params, text, …: only the text between them is made printable
        return "".join(f"\x1b[{piece}m" if i % 2 else printable(piece) for i, piece in enumerate(kept))
    return printable(_ESCAPE.sub("", text))


#: The basic SGR colours by their foreground code: 30-37, and 90-97 for the bright ones.
SGR_COLOURS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def sgr_spans(text: str) -> list[tuple[str | None, bool, str]]:
    """`text` (from `terminal_text(…, keep_sgr=True)`) as (colour, bold, text) spans: colour one of
    SGR_COLOURS (a bright one prefixed "light "), None for the default."""
    spans: list[tuple[str | None, bool, str]] = []
    colour: str | None = None
    bold = False
    pieces = _SGR.split(text)
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            if piece:
                spans.append((colour, bold, piece))
            continue
        for code in [int(c) for c in piece.split(";") if c] or [0]:
            if code == 0:
                colour, bold = None, False
            elif code == 1:
                bold = True
            elif code == 22:
                bold = False
            elif code == 39:
                colour = None
            elif 30 <= code <= 37:
                colour = SGR_COLOURS[code - 30]
            elif 90 <= code <= 97:
                colour = "light " + SGR_COLOURS[code - 90]
    return spans


# -- attention -----------------------------------------------------------------------------------

BELL = "\a"
#: What of a title or body goes into a terminal notification.
NOTIFICATION_MAX = 200


def one_line(text: str, limit: int) -> str:
    """`text` as one line of printable characters, at most `limit` of them (cut with "…"): what of
    an agent's text may go into an environment variable, a program's arguments or an escape
    sequence. Every character that is not printable (controls, bidi overrides, line breaks)
    becomes a space, and runs of spaces one."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def notification(title: str, body: str) -> str:
    """A terminal notification, as OSC 777 (urxvt, foot, WezTerm, VTE, Ghostty) and OSC 9 (iTerm2,
    Windows Terminal, kitty): both, since a terminal ignores the one it does not know. The texts
    come from agents: made `one_line`, and `;` (OSC 777's separator) a space."""
    title, body = (one_line(text.replace(";", " "), NOTIFICATION_MAX) for text in (title, body))
    return f"\x1b]777;notify;{title};{body}\x07\x1b]9;{title}: {body}\x07"


def alert(agent: str, title: str, bell: bool, desktop: bool) -> str:
    """What a terminal frontend writes for a `notify:sent`: the bell, and a terminal notification."""
    return (BELL if bell else "") + (notification(f"deck: {agent}", title) if desktop else "")


# -- log records ---------------------------------------------------------------------------------

MAX_BYTES = 1024 * 1024
BACKUPS = 3
#: Distinct problems shown on the terminal in one run; the log file has every one.
MAX_SHOWN = 100


class LogFile(logging.handlers.RotatingFileHandler):
    """deck's log file: every record with its traceback, printable, rotated; a failed write (disk full) is skipped."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8", delay=True)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # a log file that cannot be written must not print tracebacks in its turn


class TerminalLog(logging.Handler):
    """One printable line per problem on stderr: its message and exception, never the traceback.

    An exception is one problem wherever the data that hit it came from (`_problem`), so a
    malformed agent repeating one mistake gets one line, not hundreds; after MAX_SHOWN problems
    a last line says the rest is in the log file. While a full-screen frontend owns the terminal
    (`diverted`), the lines go to it instead of stderr.
    """

    _divert: ClassVar[list[Callable[[str], None]]] = []

    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(logging.WARNING)
        self.log_path = log_path
        self._seen: set[tuple[object, ...]] = set()
        self._seen_lock = threading.Lock()

    @classmethod
    @contextlib.contextmanager
    def diverted(cls, show: Callable[[str], None]) -> Iterator[None]:
        """Within the block, problem lines go to `show` (called from the thread that logged) and not to stderr."""
        cls._divert.append(show)
        try:
            yield
        finally:
            cls._divert.remove(show)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            key = _problem(record)
            with self._seen_lock:
                if key in self._seen or len(self._seen) > MAX_SHOWN:
                    return
                self._seen.add(key)
                last = len(self._seen) > MAX_SHOWN
            line = "more problems, not shown here" if last else self.line(record)
            if self.log_path is not None and (last or record.exc_info):
                line += f" (details in {self.log_path})"
            line = "deck: " + printable(line).replace("\n", " ")
            if self._divert:
                self._divert[-1](line)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:
            self.handleError(record)

    @staticmethod
    def line(record: logging.LogRecord) -> str:
        """The record's message, with its exception's type and message, in one line."""
        text = _first_line(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f": {type(exc).__name__}" + (f": {_first_line(str(exc))}" if str(exc) else "")
        return text

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # stderr is gone: the log file still has the record


def _problem(record: logging.LogRecord) -> tuple[object, ...]:
    """What makes two records the same problem: the logger and the message; for an exception, the
    message before its arguments and the line that raised (one bug, whatever the data that hit it)."""
    exc_info = record.exc_info
    if not exc_info or exc_info[1] is None:
        return (record.name, record.getMessage())
    tb = exc_info[2]
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else None
    return (record.name, str(record.msg), type(exc_info[1]).__name__, where)


def _first_line(text: str) -> str:
    first, newline, _ = text.strip().partition("\n")
    return first + (" …" if newline else "")
