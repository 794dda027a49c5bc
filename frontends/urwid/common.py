"""Shared bits of the console: the palette, its text widgets, a clickable text, the hint bar,
and small formatting helpers.

Every text of the console is a `Text` (titles a `LineBox`): what an agent, a config or a
directory listing says is shown with its control characters made visible, never sent raw to
the terminal, whatever urwid's version would do with them.

Text attributes are drawn on the terminal's own background. Inside a highlight (the selected
agent, a dialog, a focused line) each is mapped to a twin with the highlight's background
(`on_background`, `FOCUS_MAP`): else every styled run would cut a hole in the highlight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import urwid
from deck.tty import printable
from urwid import text_layout

PALETTE = [
    ("text", "default", "default"),
    ("dim", "dark gray", "default"),
    ("label", "dark gray", "default"),  # a dim word of an agent's row: `ctx`, `±1 file`
    ("thought", "dark gray", "default", "", "#888", "default"),
    ("heading", "bold,light cyan", "default"),
    ("strong", "bold", "default"),
    ("emphasis", "italics", "default"),
    ("code", "light green", "default"),
    ("output", "default", "default"),  # a tool's or a command's output: the terminal's own colour, never a diff's green
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
    ("sandbox", "light green", "default"),  # the mark of an agent that runs in a sandbox
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
    ("status key", "bold,dark blue", "light gray"),
    ("config error", "white", "dark red"),
    ("notice", "black", "yellow"),
    # A plugin's notice in the status line, by its level.
    ("notice info", "black", "light cyan"),
    ("notice warning", "black", "yellow"),
    ("notice error", "white", "dark red"),
    ("dialog", "default", "dark gray"),
    ("dialog title", "bold,white", "dark blue"),
    ("focus", "black", "light cyan"),
    # A command's own colours (SGR 30-37, 90-97), in a terminal box of a tool call.
    *((f"sgr {name}", fg, "default") for name, fg in (
        ("black", "dark gray"), ("red", "dark red"), ("green", "dark green"), ("yellow", "brown"),
        ("blue", "dark blue"), ("magenta", "dark magenta"), ("cyan", "dark cyan"), ("white", "light gray"),
        ("light black", "dark gray"), ("light red", "light red"), ("light green", "light green"),
        ("light yellow", "yellow"), ("light blue", "light blue"), ("light magenta", "light magenta"),
        ("light cyan", "light cyan"), ("light white", "white"),
    )),  # fmt: skip
]

#: The light theme: the dark theme's bright colours, which vanish on a light background, as their dark twins.
LIGHT_COLOURS = {
    "light cyan": "dark cyan", "light green": "dark green", "light blue": "dark blue",
    "light magenta": "dark magenta", "light red": "dark red", "yellow": "brown", "white": "black",
}  # fmt: skip


#: The highlights that text attributes are drawn inside of, each with a twin of every text attribute.
BACKGROUNDS = ("selected", "dialog")
#: The attributes drawn on the terminal's own background (those that need twins).
TEXT_ATTRS = tuple(name for name, _fg, bg, *_rest in PALETTE if bg == "default")
#: Text attributes drawn in a highlight's own colours, whatever theirs are: the labels of the selected
#: agent's row read on the selection bar as its name does (dark gray fades on its dark blue).
PLAIN_ON = {"selected": frozenset({"label"})}
#: A foreground that would vanish on a background of its own colour, and the one used instead.
CONTRAST = {"dark gray": "light gray", "light gray": "black", "dark blue": "light blue", "black": "white", "white": "black"}


def palette(theme: str) -> list[tuple[str, ...]]:
    """The console's palette for the config's `theme` ("dark", the default, or "light"),
    then the twins of its text attributes for each highlight (`on_background`)."""
    out = []
    for name, fg, bg, *rest in PALETTE:
        if theme == "light":
            if bg == "default":  # text on the terminal's own background: darker colours
                fg = ",".join(LIGHT_COLOURS.get(part, part) for part in fg.split(","))
            elif fg == "default":  # the terminal's (dark) text on a dark highlight: a light one instead
                bg = "light gray"
        out.append((name, fg, bg, *rest))
    backgrounds = {entry[0]: entry[2] for entry in out}
    foregrounds = {entry[0]: entry[1] for entry in out}
    for highlight in BACKGROUNDS:
        bg = backgrounds[highlight]
        for name, fg, *_rest in [entry for entry in out if entry[0] in TEXT_ATTRS]:
            if name in PLAIN_ON.get(highlight, ()):
                out.append((on(name, highlight), foregrounds[highlight], bg))
                continue
            # Basic colours only: a 256-colour shade chosen for the terminal's background may vanish on this one.
            parts = [CONTRAST.get(part, "default") if part == bg else part for part in fg.split(",")]
            out.append((on(name, highlight), ",".join(parts), bg))
    return out


def on(name: str, highlight: str) -> str:
    """The palette name of text attribute `name` drawn inside `highlight`."""
    return f"{name} on {highlight}"


def on_background(highlight: str) -> dict[str | None, str]:
    """An AttrMap map drawing text, and every text attribute in it, on `highlight`'s background."""
    return {None: highlight, **{name: on(name, highlight) for name in TEXT_ATTRS}}


#: The focus map of a focused line: one highlight, whatever the attributes of its text.
FOCUS_MAP: dict[str | None, str] = {None: "focus", **{name: "focus" for name in TEXT_ATTRS}, "button": "button focus"}


SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _ascii_width(text: str | bytes, start_offs: int, end_offs: int) -> int:
    return end_offs - start_offs


def _ascii_pos(text: str | bytes, start_offs: int, end_offs: int, pref_col: int) -> tuple[int, int]:
    cols = min(end_offs - start_offs, max(pref_col, 0))
    return start_offs + cols, cols


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


def printable_markup(markup: Any) -> Any:
    """urwid text markup with every string in it made printable, its attributes as they were."""
    if isinstance(markup, str):
        return printable(markup)
    if isinstance(markup, tuple):
        attr, inner = markup
        return (attr, printable_markup(inner))
    if isinstance(markup, list):
        return [printable_markup(item) for item in markup]
    return markup


class Text(urwid.Text):
    """urwid.Text whose text is made printable, laid out with the FastLayout (cheap for text that
    changes often, like streamed answers). The console's only text widget."""

    def __init__(self, markup: Any, **kwargs: Any) -> None:
        kwargs.setdefault("layout", FAST_LAYOUT)
        super().__init__(markup, **kwargs)

    def set_text(self, markup: Any) -> None:
        super().set_text(markup)
        text = self.text
        if isinstance(text, str) and printable(text) is not text:  # one scan: most text has no control
            super().set_text(printable_markup(markup))


class ClippedLayout(FastLayout):
    """Word wrapping to at most `lines` lines, the last one cut with an ellipsis when more text follows.

    For one paragraph: after a line break in the last line shown, the rest is cut without a mark."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines

    def layout(self, text: Any, width: int, align: Any, wrap: Any) -> Any:
        lines = super().layout(text, width, align, wrap)
        if len(lines) <= self.lines:
            return lines
        start = next(seg[1] for seg in lines[self.lines - 1] if len(seg) > 1 and seg[1] is not None)
        last = super().layout(text[start:], width, align, "ellipsis")[0]
        return lines[: self.lines - 1] + [[_shifted(seg, start) for seg in last]]


def _shifted(segment: tuple[Any, ...], by: int) -> tuple[Any, ...]:
    """A layout segment of a text's tail as a segment of the whole text, `by` characters further."""
    if len(segment) == 2:
        return segment if segment[1] is None else (segment[0], segment[1] + by)
    if isinstance(segment[2], int):
        return (segment[0], segment[1] + by, segment[2] + by)
    return (segment[0], segment[1] + by, segment[2])


class LineBox(urwid.LineBox):
    """urwid.LineBox whose title is made printable (an agent's title, a file name)."""

    def format_title(self, text: Any) -> Any:
        return super().format_title(printable_markup(text))


class Clickable(urwid.WidgetWrap):
    """A line of text that runs `on_click` when clicked (and on Enter when focusable)."""

    def __init__(self, markup: Any, on_click: Callable[[], Any] | None = None, focusable: bool = False) -> None:
        self.text = Text(markup)
        self.on_click = on_click
        self._focusable = focusable
        super().__init__(urwid.AttrMap(self.text, None, FOCUS_MAP) if focusable else self.text)

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


def percent(used: int, size: int) -> str:
    """The share of the context in use, as every frontend rounds it: `round(100 * used / size)`
    (Python's, half to even), "<1%" for a use that rounds to nothing; "" when the size is unknown."""
    if size <= 0:
        return ""
    share = round(100 * used / size)
    return "<1%" if used > 0 and share <= 0 else f"{share}%"


def gauge(used: int, size: int, cells: int = 10) -> str:
    """A context-usage bar: `███░░░░░░░ 31%` (just `31%` with no cells); only the count when the size is unknown."""
    if size <= 0:
        return human(used)
    if cells <= 0:
        return percent(used, size)
    full = round(min(1.0, max(0.0, used / size)) * cells)
    return "█" * full + "░" * (cells - full) + " " + percent(used, size)


class HintBar(urwid.Widget):
    """One line of key hints, in their order, leaving out the least important (highest rank) ones
    that do not fit the width. A hint is "KEYS|words": the keys are drawn as keys."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    ignore_focus = True
    SEPARATOR = "  "

    def __init__(self, hints: list[tuple[str, int]]) -> None:
        super().__init__()
        self.hints: list[tuple[tuple[str, str], int]] = [((h.partition("|")[0], h.partition("|")[2]), r) for h, r in hints]

    def fitting(self, width: int) -> list[tuple[str, str]]:
        """The (keys, words) of the hints shown at `width` columns."""
        shown = list(self.hints)
        while len(shown) > 1 and _width(self.SEPARATOR.join(" ".join(filter(None, h)) for h, _ in shown)) > width:
            shown.remove(max(reversed(shown), key=lambda hint: hint[1]))  # the last of the least important
        return [hint for hint, _rank in shown]

    def rows(self, size: Any, focus: bool = False) -> int:
        return 1

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        markup: list[Any] = []
        for keys, words in self.fitting(size[0]):
            markup += [self.SEPARATOR if markup else "", ("status key", keys), f" {words}" if words else ""]
        return Text(markup or "", wrap="clip").render(size)


def _width(text: str) -> int:
    return int(urwid.calc_width(text, 0, len(text)))


class Fitting(urwid.Widget):
    """A text in the first of its `variants` (markup, the fullest first; a line break in one starts
    another line) whose every line fits the width; when none does, the last one wrapped by words on
    at most `lines` lines, the last cut with an ellipsis. Nothing said is cut while a shorter way
    of saying it fits."""

    _sizing = frozenset([urwid.Sizing.FLOW])
    ignore_focus = True

    def __init__(self, variants: Sequence[Any], lines: int = 2) -> None:
        super().__init__()
        self.texts = [Text(markup, wrap="clip") for markup in variants]
        self.fallback = Text(variants[-1], layout=ClippedLayout(lines))

    def chosen(self, cols: int) -> Text:
        """The text shown at `cols` columns."""
        for text in self.texts:
            if all(_width(line) <= cols for line in str(text.text).split("\n")):
                return text
        return self.fallback

    def rows(self, size: Any, focus: bool = False) -> int:
        return int(self.chosen(size[0]).rows(size))

    def render(self, size: Any, focus: bool = False) -> urwid.Canvas:
        return self.chosen(size[0]).render(size)


# -- key bindings ------------------------------------------------------------------------------------

Owner = TypeVar("Owner")


@dataclass(frozen=True)
class Binding(Generic[Owner]):
    """A key binding of a table the handling and the help (F1) both read: its keys (urwid's names),
    the string key of what it does, and `action(owner, key)`, run when `when(owner, key)` allows;
    without an action the focused widget handles the key (the table lists it for the help).
    `shown`: how the help writes the keys, when not as `keys_label` does."""

    keys: tuple[str, ...]
    does: str
    action: Callable[[Owner, str], object] | None = None
    when: Callable[[Owner, str], bool] | None = None
    shown: str = ""

    def applies(self, owner: Owner, key: str) -> bool:
        return key in self.keys and self.action is not None and (self.when is None or self.when(owner, key))


def run_binding(table: Sequence[Binding[Owner]], owner: Owner, key: str) -> bool:
    """Run the first binding of `table` that applies to `key`; True when one did."""
    for binding in table:
        if binding.applies(owner, key):
            assert binding.action is not None
            binding.action(owner, key)
            return True
    return False


#: urwid's names of keys as the console writes them (modifiers apart), in English.
KEY_NAMES = {"enter": "Enter", "esc": "Esc", "tab": "Tab", "page up": "PgUp", "page down": "PgDn", "up": "↑",
             "down": "↓", "left": "←", "right": "→", "backspace": "Backspace", "delete": "Del", "home": "Home",
             "end": "End", " ": "Space"}  # fmt: skip
MODIFIERS = {"ctrl": "Ctrl", "meta": "Alt", "shift": "Shift"}


def key_label(key: str, names: dict[str, str] | None = None) -> str:
    """One of urwid's key names as a user reads it: `ctrl q` Ctrl-Q, `meta enter` Alt-Enter, `f1` F1;
    `names` translates the names of keys (Enter, Esc…)."""
    words = key.split(" ")
    mods: list[str] = []
    while len(words) > 1 and words[0] in MODIFIERS:
        mods.append(MODIFIERS[words.pop(0)])
    rest = " ".join(words)
    name = (names or {}).get(rest) or KEY_NAMES.get(rest)
    if name is None:  # a letter after a modifier is written as a capital (Ctrl-Q), as a function key (F1)
        name = rest.upper() if (len(rest) == 1 and mods) or (rest[:1] == "f" and rest[1:].isdigit()) else rest
    return "-".join([*mods, name])


def keys_label(keys: Sequence[str], names: dict[str, str] | None = None) -> str:
    """Keys as the help writes them: `Ctrl-Q, F10`; a run of keys that differ only by their last
    digit as one, `Alt-1…9`."""
    out: list[str] = []
    i = 0
    while i < len(keys):
        j = i
        while (j + 1 < len(keys) and keys[j + 1][:-1] == keys[i][:-1] and keys[j + 1][-1:].isdigit()
               and keys[i][-1:].isdigit() and int(keys[j + 1][-1]) == int(keys[j][-1]) + 1):  # fmt: skip
            j += 1
        label = key_label(keys[i], names)
        out.append(f"{label}…{keys[j][-1]}" if j - i >= 2 else label)
        if 0 < j - i < 2:
            out += [key_label(k, names) for k in keys[i + 1 : j + 1]]
        i = j + 1
    return ", ".join(out)


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
