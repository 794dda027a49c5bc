"""Line diffs of a tool call's old and new text, in time bounded by their size.

An agent's diff is untrusted input: difflib's matcher can take seconds on text made to defeat its
heuristics (lines each repeated just under its "popular" cut, shuffled: 125 KB a side took 4–5 s),
and a frontend asks again on every update of the tool call. Here the common first and last lines
are set aside in linear time (a one-line edit of a huge file compares one line), and difflib
compares only what lies between: at most `MAX_LINES` lines, within `MAX_WORK` (its work counted
before each search it makes, so a search past it is never made). Text over `MAX_CHARS`, or a
comparison that would need more, is reported as changed, with its line counts, and not compared:
the slowest comparison allowed takes about 15 ms. The last `CACHE_ENTRIES` comparisons are kept,
so an unchanged diff is compared once however often it is shown.

`compare(old, new)` is the comparison; `unified_lines` the unified diff, as difflib writes it;
`summary` its counts in a few words.
"""

from __future__ import annotations

import difflib
import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["CACHE_ENTRIES", "MAX_CHARS", "MAX_LINES", "MAX_WORK", "Comparison", "compare", "summary", "unified_lines"]

#: Text of more characters, both sides together, is not compared.
MAX_CHARS = 4 << 20
#: Lines between the common ones, both sides together, that difflib may be given.
MAX_LINES = 20_000
#: The work difflib may do on them: each search for a longest match counts LINE_WORK for each old
#: line it looks at, and one for each place of the new side it looks at for that line.
MAX_WORK = 250_000
LINE_WORK = 4
#: Comparisons kept, the most recently used.
CACHE_ENTRIES = 64
#: The characters of the texts the kept comparisons hold, at most (they are held by the diffs shown anyway).
CACHE_CHARS = 32 << 20

#: difflib's opcode: (tag, old start, old end, new start, new end), tag one of equal, replace, delete, insert.
Opcode = tuple[str, int, int, int, int]


@dataclass(frozen=True, slots=True)
class Comparison:
    """How `new` differs from `old`, line by line; `opcodes` is None when it was too large to compare."""

    old_lines: int
    new_lines: int
    opcodes: tuple[Opcode, ...] | None

    @property
    def compared(self) -> bool:
        return self.opcodes is not None

    @property
    def added(self) -> int:
        return sum(j2 - j1 for tag, _i1, _i2, j1, j2 in self.opcodes or () if tag in ("replace", "insert"))

    @property
    def removed(self) -> int:
        return sum(i2 - i1 for tag, i1, i2, _j1, _j2 in self.opcodes or () if tag in ("replace", "delete"))

    def summary(self) -> str:
        """`+2 -1` (lines added, removed), or `changed: 9 → 12 lines, too large to compare`."""
        if self.opcodes is None:
            return f"changed: {self.old_lines} → {self.new_lines} lines, too large to compare"
        return f"+{self.added} -{self.removed}"


class _TooLarge(Exception):
    """difflib would do more than its allowance of work."""


class _BoundedMatcher(difflib.SequenceMatcher[str]):
    """difflib's matcher, with each search for a longest match charged before it runs: a search over
    old lines [alo, ahi) looks at each of them and at every place of the new side holding it."""

    def __init__(self, old: list[str], new: list[str], allowance: int) -> None:
        super().__init__(None, old, new)
        self.old_count = len(old)
        self.allowance = allowance
        places: dict[str, list[int]] = self.b2j  # type: ignore[attr-defined]  # difflib documents it, typeshed does not
        self.work = [0, *itertools.accumulate(len(places.get(line, ())) + LINE_WORK for line in old)]

    def find_longest_match(self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None) -> difflib.Match:
        ahi = self.old_count if ahi is None else ahi
        self.allowance -= self.work[ahi] - self.work[alo] + 1
        if self.allowance < 0:
            raise _TooLarge
        return super().find_longest_match(alo, ahi, blo, bhi)


def compare(old: str, new: str) -> Comparison:
    """The line comparison of `old` and `new`; one of the last pairs compared is not compared again."""
    if len(old) + len(new) > MAX_CHARS:  # counted in C, never kept: hashing them would cost as much
        return Comparison(_count_lines(old), _count_lines(new), None)
    key = (old, new)
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
            return kept
    comparison = _compare(old, new)
    _keep(key, comparison)
    return comparison


def unified_lines(old: str, new: str, before: str = "", after: str = "", context: int = 3) -> list[str]:
    """The unified diff of `old` to `new` as `difflib.unified_diff(..., lineterm="")` writes it:
    `--- before`, `+++ after`, then hunks with `context` lines around each change; no line when
    they are the same. Too large to compare: the two names, then one line saying so."""
    comparison = compare(old, new)
    if comparison.opcodes is None:
        return [f"--- {before}", f"+++ {after}", comparison.summary()]
    hunks = list(_hunks(list(comparison.opcodes), max(0, context)))
    if not hunks:
        return []
    old_lines, new_lines = old.splitlines(), new.splitlines()
    out = [f"--- {before}", f"+++ {after}"]
    for hunk in hunks:
        out += _hunk_lines(hunk, old_lines, new_lines)
    return out


def summary(old: str, new: str) -> str:
    """`+2 -1`: the lines added and removed; or `changed: 9 → 12 lines, too large to compare`."""
    return compare(old, new).summary()


# -- comparing ------------------------------------------------------------------------------------


def _compare(old: str, new: str) -> Comparison:
    a, b = old.splitlines(), new.splitlines()
    return Comparison(len(a), len(b), _opcodes(a, b))


def _opcodes(a: list[str], b: list[str]) -> tuple[Opcode, ...] | None:
    """difflib's opcodes turning `a` into `b`, its matcher run only between their common first and
    last lines; None when that would take more than MAX_WORK."""
    head = _common(a, b, min(len(a), len(b)))
    tail = _common(reversed(a), reversed(b), min(len(a), len(b)) - head)
    middle_a, middle_b = a[head:len(a) - tail], b[head:len(b) - tail]
    try:
        inner = _middle(middle_a, middle_b)
    except _TooLarge:
        return None
    codes: list[Opcode] = [("equal", 0, head, 0, head)] if head else []
    codes += [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in inner]
    if tail:
        codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return tuple(codes)


def _middle(a: list[str], b: list[str]) -> list[Opcode]:
    """The opcodes of lines that share neither their first nor their last line."""
    if not a or not b:
        tag = "insert" if b else "delete" if a else ""
        return [(tag, 0, len(a), 0, len(b))] if tag else []
    if len(a) + len(b) > MAX_LINES:
        raise _TooLarge
    return [*_BoundedMatcher(a, b, MAX_WORK).get_opcodes()]


def _common(a: Iterable[str], b: Iterable[str], most: int) -> int:
    """How many first lines `a` and `b` share, at most `most` (the scan runs in C)."""
    pairs = itertools.islice(map(operator.ne, a, b), most)
    return next(itertools.compress(itertools.count(), pairs), most)


def _count_lines(text: str) -> int:
    """Lines of `text`, as `splitlines` counts those ended by a newline (counted without splitting)."""
    return text.count("\n") + (bool(text) and not text.endswith("\n"))


# -- the unified format ---------------------------------------------------------------------------


def _hunks(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """The opcodes in hunks with `context` equal lines around their changes (difflib's grouping)."""
    if codes and codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    if codes and codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _hunk_lines(hunk: list[Opcode], a: list[str], b: list[str]) -> list[str]:
    first, last = hunk[0], hunk[-1]
    out = [f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@"]
    for tag, i1, i2, j1, j2 in hunk:
        if tag == "equal":
            out += [" " + line for line in a[i1:i2]]
            continue
        if tag in ("replace", "delete"):
            out += ["-" + line for line in a[i1:i2]]
        if tag in ("replace", "insert"):
            out += ["+" + line for line in b[j1:j2]]
    return out


def _range(start: int, stop: int) -> str:
    """A hunk's range of lines as the unified format writes it: `3`, `3,4`, or `2,0` when empty."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


# -- the kept comparisons -------------------------------------------------------------------------

_lock = threading.Lock()
_kept: OrderedDict[tuple[str, str], Comparison] = OrderedDict()


def _keep(key: tuple[str, str], comparison: Comparison) -> None:
    """Keep `comparison` for its texts; drop the least recently used past CACHE_ENTRIES or CACHE_CHARS."""
    if len(key[0]) + len(key[1]) > CACHE_CHARS:
        return
    with _lock:
        _kept[key] = comparison
        _kept.move_to_end(key)
        while len(_kept) > CACHE_ENTRIES or sum(len(o) + len(n) for o, n in _kept) > CACHE_CHARS:
            _kept.popitem(last=False)
