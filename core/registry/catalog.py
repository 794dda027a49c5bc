"""The ACP registry's format (its repository's FORMAT.md) read into typed entries, and its errors.

The registry is untrusted input: its size, the number of its agents and each string are capped,
an id and a version become folder names (so they are checked as such), a package or a command
must not start with `-` (npx and uvx would read it as their own option). An agent whose entry is
not valid is left out and said in `Catalog.problems`; a registry whose top is not the format is
an error.
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass, field
from typing import Any

from deck.errors import DeckError, ExitCode

#: The largest registry deck reads (today's is some 200 KiB).
MAX_REGISTRY = 16 << 20
#: The most agents one registry may list.
MAX_AGENTS = 5000
#: The longest string deck keeps from an entry (a URL, a description).
MAX_TEXT = 4096
#: The most arguments, environment variables or platforms an entry may give.
MAX_ITEMS = 64

#: An id and a version name folders (`…/agents/ID/VERSION/`): no `/`, no leading dot.
_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_PLATFORM = re.compile(r"(darwin|linux|windows)-(aarch64|x86_64)")
#: Variables an entry may not set: they would change which program runs, or load code into it,
#: beyond the package the user chose (the launcher found on another PATH, a library preloaded).
_LOADER_ENV = re.compile(
    r"(PATH|LD_\w+|DYLD_\w+|NODE_OPTIONS|NODE_PATH|PYTHON\w*|BASH_ENV|ENV|UV_\w+|NPM_CONFIG_\w+)", re.IGNORECASE
)


def valid_id(ident: str) -> bool:
    """Whether `ident` is a registry id, which names a folder (`…/agents/ID/`)."""
    return _ID.fullmatch(ident) is not None


def valid_version(version: str) -> bool:
    """Whether `version` is one deck accepts, which names a folder (`…/agents/ID/VERSION/`)."""
    return _VERSION.fullmatch(version) is not None


class RegistryError(DeckError):
    """A registry or an install that failed: one line, and the `ExitCode` the command exits with."""

    def __init__(self, message: str, exit_code: ExitCode = ExitCode.ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class BadEntry(ValueError):
    """One agent's entry is not the format (the message names the field)."""


@dataclass(frozen=True)
class Package:
    """An `npx` or `uvx` distribution: a package run by its launcher, pinned to the entry's version."""

    kind: str  # "npx" | "uvx"
    package: str
    cmd: str
    args: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True)
class Binary:
    """A `binary` distribution for one platform: an archive (or a bare file) and the command in it."""

    platform: str
    archive: str
    cmd: str
    args: tuple[str, ...]
    env: dict[str, str]
    sha256: str | None


@dataclass(frozen=True)
class Entry:
    """One agent of the registry."""

    id: str
    name: str
    version: str
    description: str = ""
    repository: str = ""
    license: str = ""
    authors: tuple[str, ...] = ()
    packages: dict[str, Package] = field(default_factory=dict)  # "npx", "uvx"
    binaries: dict[str, Binary] = field(default_factory=dict)  # by platform key

    def methods(self) -> list[str]:
        """How it installs: "npx", "uvx", "binary"."""
        return [*self.packages, *(["binary"] if self.binaries else [])]


@dataclass(frozen=True)
class Catalog:
    """The registry: its agents by id, in its order, and the entries left out with why."""

    version: str
    agents: dict[str, Entry]
    problems: tuple[str, ...] = ()


def parse(data: bytes, where: str) -> Catalog:
    """The registry in `data` (from `where`, named in errors); RegistryError if it is not JSON or not the format."""
    if len(data) > MAX_REGISTRY:
        raise RegistryError(f"the registry at {where} is larger than {MAX_REGISTRY >> 20} MiB")
    try:
        top = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RegistryError(f"the registry at {where} is not valid JSON: {_short(exc)}") from None
    if not isinstance(top, dict) or not isinstance(top.get("agents"), list):
        raise RegistryError(f'the registry at {where} is not in the ACP registry format: no "agents" list')
    if len(top["agents"]) > MAX_AGENTS:
        raise RegistryError(f"the registry at {where} lists more than {MAX_AGENTS} agents")
    agents: dict[str, Entry] = {}
    problems = []
    for index, raw in enumerate(top["agents"]):
        try:
            entry = _entry(raw)
        except BadEntry as exc:
            name = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else f"#{index}"
            problems.append(f"agent {str(name)[:64]!r} left out: {exc}")
            continue
        if entry.id in agents:
            problems.append(f"agent {entry.id!r} listed twice: the first kept")
            continue
        agents[entry.id] = entry
    version = top.get("version")
    return Catalog(version if isinstance(version, str) else "", agents, tuple(problems))


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _entry(raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise BadEntry("not an object")
    ident = _text(raw, "id", required=True)
    if not _ID.fullmatch(ident):
        raise BadEntry(f"id {ident[:64]!r} is not an id (a-z, 0-9, '.', '_', '-')")
    version = _text(raw, "version", required=True)
    if not _VERSION.fullmatch(version):
        raise BadEntry(f"version {version[:64]!r} is not a version")
    distribution = raw.get("distribution")
    if not isinstance(distribution, dict):
        raise BadEntry('no "distribution" object')
    packages = {kind: _package(kind, distribution[kind], version) for kind in ("npx", "uvx") if kind in distribution}
    binaries = _binaries(distribution.get("binary"))
    if not packages and not binaries:
        raise BadEntry("no distribution deck knows (npx, uvx, binary)")
    given = raw.get("authors")
    authors: list[Any] = given if isinstance(given, list) else []
    return Entry(
        id=ident, name=_shown(raw, "name") or ident, version=version, description=_shown(raw, "description"),
        repository=_shown(raw, "repository"), license=_shown(raw, "license"),
        authors=tuple(a[:MAX_TEXT] for a in authors[:MAX_ITEMS] if isinstance(a, str)),
        packages=packages, binaries=binaries,
    )  # fmt: skip


def _text(raw: dict[str, Any], key: str, required: bool = False) -> str:
    """A string of the entry; one longer than MAX_TEXT refuses the entry (a URL, a package, a command)."""
    value = raw.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise BadEntry(f"{key} is not a string" if value is not None else f"no {key}")
    if len(value) > MAX_TEXT:
        raise BadEntry(f"{key} is longer than {MAX_TEXT} characters")
    return value


def _shown(raw: dict[str, Any], key: str) -> str:
    """A string only shown (a name, a description): a long one is cut, anything else than a string is ""."""
    value = raw.get(key)
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _strings(raw: dict[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise BadEntry(f"{key} is not a list of at most {MAX_ITEMS} strings")
    if not all(isinstance(v, str) and len(v) <= MAX_TEXT and "\0" not in v for v in value):
        raise BadEntry(f"{key} holds something else than strings")
    return tuple(value)


def _env(raw: dict[str, Any]) -> dict[str, str]:
    value = raw.get("env", {})
    if not isinstance(value, dict) or len(value) > MAX_ITEMS:
        raise BadEntry(f"env is not an object of at most {MAX_ITEMS} strings")
    for name, text in value.items():
        if not _ENV_NAME.fullmatch(name) or not isinstance(text, str) or len(text) > MAX_TEXT or "\0" in text:
            raise BadEntry(f"env {name[:64]!r} is not a variable name with a string")
        if _LOADER_ENV.fullmatch(name):
            raise BadEntry(f"env {name!r} would change which program runs or what it loads: refused")
    return dict(value)


def _word(raw: dict[str, Any], key: str, what: str, required: bool = False) -> str:
    """A package or command name: one word, never read as an option of npx, uvx or the shell."""
    value = _text(raw, key, required)
    if value and (value.startswith("-") or any(c.isspace() or c == "\0" for c in value)):
        raise BadEntry(f"{what} {value[:64]!r} is not a {what} (no leading '-', no spaces)")
    return value


def _package(kind: str, raw: Any, version: str) -> Package:
    if not isinstance(raw, dict):
        raise BadEntry(f"distribution.{kind} is not an object")
    package = pinned(kind, _word(raw, "package", "package", required=True), version)
    return Package(kind, package, _word(raw, "cmd", "command"), _strings(raw, "args"), _env(raw))


def pinned(kind: str, package: str, version: str) -> str:
    """`package` with a version: `@scope/pkg@1.2.3` for npx, `pkg==1.2.3` for uvx; one it gives is kept."""
    if kind == "npx":
        return package if "@" in package.lstrip("@") else f"{package}@{version}"
    return package if any(op in package for op in ("==", "@", ">", "<", "~=")) else f"{package}=={version}"


def _binaries(raw: Any) -> dict[str, Binary]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_ITEMS:
        raise BadEntry("distribution.binary is not an object of platforms")
    binaries = {}
    for key, target in raw.items():
        if not _PLATFORM.fullmatch(key):
            continue  # a platform deck does not know (a future one): not an error
        if not isinstance(target, dict):
            raise BadEntry(f"distribution.binary.{key} is not an object")
        archive = _text(target, "archive", required=True)
        if not archive.startswith(("https://", "http://", "file:")):
            raise BadEntry(f"distribution.binary.{key}.archive is not an http, https or file URL")
        digest = _text(target, "sha256").lower() or None
        if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise BadEntry(f"distribution.binary.{key}.sha256 is not a SHA-256 digest")
        cmd = relative_cmd(_text(target, "cmd", required=True), key)
        binaries[key] = Binary(key, archive, cmd, _strings(target, "args"), _env(target), digest)
    return binaries


def relative_cmd(cmd: str, key: str) -> str:
    """The command's path inside the unpacked folder (`./goose` → `goose`); never out of it."""
    parts = [p for p in cmd.replace("\\", "/").split("/") if p not in ("", ".")]
    if cmd.startswith(("/", "\\")) or not parts or ".." in parts or "\0" in cmd:
        raise BadEntry(f"distribution.binary.{key}.cmd {cmd[:64]!r} is not a path inside the archive")
    return "/".join(parts)


def platform_key(system: str | None = None, machine: str | None = None) -> str:
    """This machine's platform as the registry names it (`linux-x86_64`, `darwin-aarch64`); or a host's,
    from its `uname -s` and `uname -m`."""
    os_name = (system or platform.system()).lower()
    arch = (machine or platform.machine()).lower()
    arch = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}.get(arch, arch)
    return f"{os_name}-{arch}"


def closest(ident: str, catalog: Catalog) -> list[str]:
    """The registry's ids nearest `ident`, for "unknown id" (difflib), at most three."""
    import difflib

    near = difflib.get_close_matches(ident, list(catalog.agents), n=3, cutoff=0.5)
    return near or [i for i in catalog.agents if ident in i][:3]


def find(ident: str, catalog: Catalog) -> Entry:
    """The entry of `ident`; RegistryError (exit 2) naming the closest ids when there is none."""
    if ident in catalog.agents:
        return catalog.agents[ident]
    left_out = [p for p in catalog.problems if p.startswith(f"agent {ident!r} ")]
    if left_out:
        raise RegistryError(f"the registry's {left_out[0]}")
    near = closest(ident, catalog)
    hint = f"; did you mean {', '.join(near)}?" if near else "; `deck agents search` lists them"
    raise RegistryError(f"unknown registry agent {ident!r}{hint}", ExitCode.USAGE)


def search(words: list[str], catalog: Catalog) -> list[Entry]:
    """The entries whose id, name or description hold every word (any case); all with no words."""
    wanted = [w.lower() for w in words]
    return [
        e for e in catalog.agents.values()
        if all(w in f"{e.id} {e.name} {e.description}".lower() for w in wanted)
    ]  # fmt: skip
