"""The config file edited in place (tomlkit): an `[agents.NAME]` added, changed or removed, every
other line, comment and entry kept as it was. The result is checked as deck checks a config before
it is written (atomically): an edit never leaves an invalid file.

The lines of a removed entry go with it, comments under its header included.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table
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
        self._table(name)
        del self.doc["agents"][name]  # type: ignore[union-attr]

    def _table(self, name: str) -> Table:
        agents = self.doc.get("agents")
        table = agents.get(name) if isinstance(agents, Table) else None
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
