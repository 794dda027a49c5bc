"""Markdown-ish text → urwid text markup, in blocks so a streaming answer re-lays out only its end.

Handles what agents write most: headings, lists, quotes, fenced code, `inline code`,
**bold**, *emphasis* and [links](url). Pure functions, no urwid import.
"""

from __future__ import annotations

import re

#: A block longer than this is cut at a space, so a long streamed paragraph is re-laid
#: out a piece at a time rather than whole at every frame.
MAX_BLOCK = 2000

Markup = list[tuple[str, str] | str]

_INLINE = re.compile(r"(`[^`\n]+`|\*\*[^*\n]+\*\*|__[^_\n]+__|(?<![\w*])\*[^*\n]+\*(?!\w)|\[[^\]\n]+\]\([^)\s]+\))")


def blocks(text: str) -> list[tuple[str, bool, bool]]:
    """Split `text` into (block, is_code, starts_paragraph) pieces at blank lines, code fences and MAX_BLOCK."""
    out: list[tuple[str, bool, bool]] = []
    current: list[str] = []
    in_code = False

    def flush() -> None:
        if current:
            pieces = _cut("\n".join(current))
            out.extend((piece, in_code, i == 0 and bool(out)) for i, piece in enumerate(pieces))
            current.clear()

    for line in text.split("\n"):
        line = line.removesuffix("\r")  # CR LF ends a line as LF does
        if line.lstrip().startswith("```"):
            if in_code:
                current.append(line)
                flush()
                in_code = False
            else:
                flush()
                in_code = True
                current.append(line)
            continue
        if not in_code and not line.strip():
            flush()
            continue
        current.append(line)
    flush()
    return out


def _cut(block: str) -> list[str]:
    if len(block) <= MAX_BLOCK:
        return [block]
    pieces, start = [], 0
    while len(block) - start > MAX_BLOCK:
        at = block.rfind(" ", start + MAX_BLOCK // 2, start + MAX_BLOCK)
        at = start + MAX_BLOCK if at < 0 else at + 1
        pieces.append(block[start:at])
        start = at
    pieces.append(block[start:])
    return pieces


def render(block: str, is_code: bool, base: str = "text") -> Markup:
    """One block as markup; `base` is the attribute of plain text (e.g. "thought")."""
    if is_code:
        lines = [ln for ln in block.split("\n") if not ln.lstrip().startswith("```")]
        return [("code", "\n".join(lines) or " ")]
    markup: Markup = []
    for i, line in enumerate(block.split("\n")):
        if i:
            markup.append((base, "\n"))
        markup.extend(_line(line, base))
    return markup


def _line(line: str, base: str) -> Markup:
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    if m := re.match(r"(#{1,6})\s+(.*)", stripped):
        return [("heading", m.group(2))]
    if re.fullmatch(r"(-{3,}|\*{3,}|_{3,})", stripped):
        return [(base, "─" * 20)]
    if m := re.match(r"[-*+]\s+(.*)", stripped):
        return [(base, indent + "• "), *inline(m.group(1), base)]
    if m := re.match(r"(\d+[.)])\s+(.*)", stripped):
        return [(base, f"{indent}{m.group(1)} "), *inline(m.group(2), base)]
    if stripped.startswith(">"):
        return [("quote", "│ " + stripped[1:].lstrip())]
    return inline(line, base)


def inline(text: str, base: str = "text") -> Markup:
    """Inline code, bold, emphasis and links of one line."""
    out: Markup = []
    for piece in _INLINE.split(text):
        if not piece:
            continue
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 2:
            out.append(("code", piece[1:-1]))
        elif (piece.startswith("**") or piece.startswith("__")) and len(piece) > 4:
            out.append(("strong", piece[2:-2]))
        elif piece.startswith("*") and piece.endswith("*") and len(piece) > 2:
            out.append(("emphasis", piece[1:-1]))
        elif piece.startswith("[") and (m := re.fullmatch(r"\[([^\]]+)\]\(([^)]+)\)", piece)):
            out.append(("link", m.group(1)))
            out.append((base, f" ({m.group(2)})"))
        else:
            out.append((base, piece))
    return out or [(base, "")]
