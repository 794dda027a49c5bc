"""The config file edited in place (tomlkit): an `[agents.NAME]` added, changed or removed, every
other line, comment and entry kept as it was. The result is checked as deck checks a config before
it is written (atomically): an edit never leaves an invalid file.

The lines of a removed entry go with it: its header, the comment lines right above it, its keys and
the comments among them and right under them. tomlkit gives every comment after a table's keys to that
table, up to the next header; the ones set apart by a blank line, or that run straight into the next
header, are another entry's (or a commented-out one's, as `deck config init` writes) and stay where
they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.items import AoT, Comment, InlineTable, Item, Null, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from deck.config.check import parse
from deck.config.files import Changed, digest, read_text, write_atomic
from deck.errors import ExitCode
from deck.registry.catalog import RegistryError


@dataclass
class ConfigFile:
    """A config file's text, parsed with its layout, to edit and save."""

    path: Path
    doc: TOMLDocument
    base: str | None = None  # the digest of the text read: a file changed meanwhile is not overwritten

    @classmethod
    def open(cls, path: Path, new_text: str = "") -> ConfigFile:
        """The file at `path`; `new_text` stands for one that does not exist yet."""
        try:
            text = read_text(path)
        except FileNotFoundError:
            text = new_text
        except (OSError, UnicodeDecodeError) as exc:
            raise RegistryError(
                f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", ExitCode.USAGE
            ) from None
        try:
            return cls(path, tomlkit.parse(text), digest(text) if text is not new_text else None)
        except Exception as exc:  # tomlkit's ParseError, or any surprise of a hand-edited file
            raise RegistryError(f"{path} is not valid TOML: {str(exc)[:200]}", ExitCode.USAGE) from None

    def agents(self) -> dict[str, Any]:
        """The `[agents.…]` tables as they are now (plain values)."""
        table = self.doc.get("agents")
        return dict(table.unwrap()) if isinstance(table, Table) else {}

    def add(self, name: str, values: dict[str, Any], comment: str = "") -> None:
        """Append `[agents.NAME]` with `values` (in their order) after the other agents."""
        if name in self.agents():
            raise RegistryError(
                f"the config already has an agent {name!r}: pick another name with --as", ExitCode.USAGE
            )
        table = tomlkit.table()
        if comment:
            table.add(tomlkit.comment(comment))
        for key, value in values.items():
            table[key] = _inline(value)
        table.add(tomlkit.nl())
        if "agents" not in self.doc:
            self.doc.add("agents", tomlkit.table(is_super_table=True))
        self.doc["agents"][name] = table  # type: ignore[index]

    def change(self, name: str, values: dict[str, Any]) -> None:
        """Set `values` in `[agents.NAME]` (keys given None are removed); its other keys and comments stay."""
        table = self._table(name)
        for key, value in values.items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = _inline(value)

    def remove(self, name: str) -> None:
        """Remove `[agents.NAME]` with its own comments; the comment blocks below it that are not its
        own are kept in its place."""
        table = self._table(name)
        lines = list(_walk(self.doc))
        at = next(i for i, (_c, _i, item) in enumerate(lines) if item is table)
        end = at + 1 + len(list(_walk(table.value)))
        after = next((item for _c, _i, item in lines[end:] if not _unwritten(item)), None)
        kept = _not_its_own(lines[at + 1 : end], after)
        for container, index, _item in _heading(lines[:at], table):
            container.body[index] = (None, Null())  # as tomlkit itself deletes
        container, index, _item = lines[at]
        del self.doc["agents"][name]  # type: ignore[union-attr]
        if kept:
            blank = "\n" if "\n" in table.trivia.indent else ""
            container.body[index] = (None, Whitespace(blank + "".join(i.as_string() for i in kept), fixed=True))
            try:
                self.doc = tomlkit.parse(tomlkit.dumps(self.doc))  # those lines read as comments again
            except Exception as exc:  # tomlkit's ParseError: never written
                raise RegistryError(f"not written: the edited config would not be TOML: {str(exc)[:200]}") from None

    def _table(self, name: str) -> Table:
        agents = self.doc.get("agents")
        table = agents.get(name) if isinstance(agents, Table) else None
        if isinstance(table, InlineTable):  # `[agents] a = {…}`: a line of its own deck does not rewrite
            raise RegistryError(f"{name} is written as an inline table in {self.path} ({name} = {{…}}): "
                                f"edit it by hand, or write it as an [agents.{name}] table", ExitCode.USAGE)  # fmt: skip
        if not isinstance(table, Table):
            known = ", ".join(self.agents()) or "none"
            raise RegistryError(f"unknown agent {name!r} in {self.path} (agents: {known})", ExitCode.USAGE)
        return table

    def problem(self) -> str | None:
        """The first error deck finds in the config as it is now (`PATH:LINE:COL: MESSAGE`), or None."""
        errors = parse(self.text()).errors
        return errors[0].format(str(self.path)) if errors else None

    def text(self) -> str:
        return tomlkit.dumps(self.doc).rstrip("\n") + "\n"  # an entry added last leaves no blank line at the end

    def save(self) -> None:
        """Write the edited file at once, if deck reads it as a valid config; RegistryError otherwise."""
        text = self.text()
        if (problem := self.problem()) is not None:
            raise RegistryError(f"not written: the edited config would be invalid: {problem}")
        try:
            write_atomic(self.path, text, base=self.base)
        except Changed:
            raise RegistryError(
                f"not written: {self.path} changed meanwhile (another edit?): run the command again"
            ) from None
        except OSError as exc:
            raise RegistryError(f"cannot write {self.path}: {exc.strerror or exc}") from None


def _inline(value: Any) -> Any:
    """A dict as an inline table (`env = { A = "1" }`), as a hand-written entry reads; lists on one line."""
    if isinstance(value, dict):
        inline = tomlkit.inline_table()
        inline.update(value)
        return inline
    return value


Line = tuple[Container, int, Item]


def _walk(container: Container) -> Iterator[Line]:
    """Every item of `container` in the order its lines are written, tables' contents after their
    header: (the container holding it, its index there, the item)."""
    for index, (_key, item) in enumerate(container.body):
        yield container, index, item
        tables = item.body if isinstance(item, AoT) else [item] if isinstance(item, Table) else []
        for table in tables:
            if table is not item:
                yield container, index, table
            yield from _walk(table.value)


def _unwritten(item: Item) -> bool:
    """Nothing written (a deleted item), or a header never written (`[agents]` of `[agents.NAME]`)."""
    return isinstance(item, Null) or (isinstance(item, Table) and item.is_super_table())


def _blank(item: Item) -> bool:
    return isinstance(item, Whitespace) and "\n" in item.as_string()


def _heading(before: list[Line], table: Table) -> list[Line]:
    """The comment lines right above `table`'s header (no blank line between): its own, but for the
    comments that open the file (they speak of the whole file as often as of its first table)."""
    if "\n" in table.trivia.indent:
        return []
    own: list[Line] = []
    for line in reversed(before):
        if _unwritten(line[2]):
            continue
        if not isinstance(line[2], Comment):
            return own
        own.append(line)
    return []


def _not_its_own(inside: list[Line], after: Item | None) -> list[Item]:
    """Of a table's lines, the comments after its last key that are not its own, with the blank lines
    among them: those after a blank line, and a block that runs straight into what follows the table."""
    items = [item for _c, _i, item in inside if not isinstance(item, Null)]
    last_key = max((i for i, item in enumerate(items) if not isinstance(item, (Comment, Whitespace))), default=-1)
    trailing = items[last_key + 1 :]
    first_blank = next((i for i, item in enumerate(trailing) if _blank(item)), len(trailing))
    runs_on = after is not None and not _blank(after) and not (isinstance(after, Table) and "\n" in after.trivia.indent)
    start = 0 if first_blank == len(trailing) and runs_on else first_blank
    first_comment = next((i for i in range(start, len(trailing)) if isinstance(trailing[i], Comment)), None)
    return [] if first_comment is None else trailing[first_comment:]
