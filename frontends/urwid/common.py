"""Shared bits of the console: the palette, a clickable text, and small formatting helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import urwid
from urwid import text_layout

PALETTE = [
    ("text", "default", "default"),
    ("dim", "dark gray", "default"),
    ("thought", "dark gray", "default", "", "#888", "default"),
    ("heading", "bold,light cyan", "default"),
    ("strong", "bold", "default"),
    ("emphasis", "italics", "default"),
    ("code", "light green", "default"),
    ("link", "underline,light blue", "default"),
    ("quote", "dark cyan", "default"),
    ("user", "bold,light blue", "default"),
    ("agent", "bold,light magenta", "default"),
    ("system", "bold,yellow", "default"),
    ("error", "light red", "default"),
    ("warning", "yellow", "default"),
    ("ok", "light green", "default"),
    ("tool", "bold,light cyan", "default"),
    ("status pending", "yellow", "default"),
    ("status in_progress", "light cyan", "default"),
    ("status completed", "light green", "default"),
    ("status failed", "light red", "default"),
    ("diff add", "light green", "default"),
    ("diff del", "light red", "default"),
    ("diff hunk", "dark cyan", "default"),
    ("state stopped", "dark gray", "default"),
    ("state starting", "yellow", "default"),
    ("state ready", "light green", "default"),
    ("state busy", "light cyan", "default"),
    ("state error", "light red", "default"),
    ("outdated", "yellow", "default"),
    ("needs input", "black", "yellow"),
    ("talking", "black", "light cyan"),
    ("selected", "default", "dark blue"),
    ("panel", "default", "default"),
    ("button", "light gray", "dark gray"),
    ("button focus", "black", "light gray"),
    ("field", "white", "black"),
    ("field focus", "white", "dark blue"),
    ("gauge", "light cyan", "default"),
    ("status bar", "black", "light gray"),
    ("notice", "black", "yellow"),
    ("dialog", "default", "dark gray"),
    ("dialog title", "bold,white", "dark blue"),
    ("focus", "black", "light cyan"),
]

#: The light theme: the dark theme's bright colours, which vanish on a light background, as their dark twins.
LIGHT_COLOURS = {
    "light cyan": "dark cyan", "light green": "dark green", "light blue": "dark blue",
    "light magenta": "dark magenta", "light red": "dark red", "yellow": "brown", "white": "black",
}  # fmt: skip
THEMES = ("dark", "light")


def palette(theme: str) -> list[tuple[str, ...]]:
    """The console's palette for the config's `theme` ("dark", the default, or "light")."""
    if theme != "light":
        return PALETTE
    out = []
    for name, fg, bg, *rest in PALETTE:
        if bg == "default":  # text on the terminal's own background: darker colours
            fg = ",".join(LIGHT_COLOURS.get(part, part) for part in fg.split(","))
        elif fg == "default":  # the terminal's (dark) text on a dark highlight: a light one instead
            bg = "light gray"
        out.append((name, fg, bg, *rest))
    return out


SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _ascii_width(text: Any, start: int, end: int) -> int:
    return end - start


def _ascii_pos(text: Any, start: int, end: int, pref_col: int) -> tuple[int, int]:
    cols = min(end - start, max(pref_col, 0))
    return start + cols, cols


@contextmanager
def _ascii_measures() -> Iterator[None]:
    saved = text_layout.calc_width, text_layout.calc_text_pos
    text_layout.calc_width, text_layout.calc_text_pos = _ascii_width, _ascii_pos
    try:
        yield
    finally:
        text_layout.calc_width, text_layout.calc_text_pos = saved


class FastLayout(urwid.StandardTextLayout):
    """urwid's word wrapping, measuring printable ASCII as one column a character.

    urwid measures every text by grapheme clusters (wcwidth), some microseconds a
    character: re-laying out a streaming answer at each frame cost more than all the
    rest of the console. Any other text is measured by urwid as usual.
    """

    def calculate_text_segments(self, text: Any, width: int, wrap: Any) -> Any:
        if isinstance(text, str) and text.isascii() and text.replace("\n", "").isprintable():
            with _ascii_measures():
                return super().calculate_text_segments(text, width, wrap)
        return super().calculate_text_segments(text, width, wrap)


FAST_LAYOUT = FastLayout()


class Text(urwid.Text):
    """urwid.Text with the FastLayout: for text that changes often (streamed answers)."""

    def __init__(self, markup: Any, **kwargs: Any) -> None:
        kwargs.setdefault("layout", FAST_LAYOUT)
        super().__init__(markup, **kwargs)


class Clickable(urwid.WidgetWrap):
    """A line of text that runs `on_click` when clicked (and on Enter when focusable)."""

    def __init__(self, markup: Any, on_click: Callable[[], Any] | None = None, focusable: bool = False) -> None:
        self.text = urwid.Text(markup)
        self.on_click = on_click
        self._focusable = focusable
        super().__init__(urwid.AttrMap(self.text, None, "focus") if focusable else self.text)

    def selectable(self) -> bool:
        return self._focusable

    def keypress(self, size: Any, key: str) -> str | None:
        if self._focusable and key in ("enter", " ") and self.on_click:
            self.on_click()
            return None
        return key

    def mouse_event(self, size: Any, event: str, button: int, col: int, row: int, focus: bool) -> bool:
        if event == "mouse press" and button == 1 and self.on_click:
            self.on_click()
            return True
        return False


def gauge(used: int, size: int, cells: int = 10) -> str:
    """A context-usage bar: `███░░░░░░░ 31%`; only the count when the size is unknown."""
    if size <= 0:
        return human(used)
    ratio = min(1.0, max(0.0, used / size))
    full = round(ratio * cells)
    return "█" * full + "░" * (cells - full) + f" {round(ratio * 100)}%"


def human(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}M"
    if count >= 1000:
        return f"{count / 1000:.1f}k"
    return str(count)


def canvas_text(widget: urwid.Widget, cols: int, rows: int | None = None) -> str:
    """A widget rendered to plain text (tests and debugging)."""
    size = (cols,) if rows is None else (cols, rows)
    return "\n".join(line.decode().rstrip() for line in widget.render(size).text)
