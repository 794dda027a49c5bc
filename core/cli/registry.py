"""`deck agents search|add|update|remove`: agents from the ACP registry, written into the config
file in place (`deck.registry`). `deck agents` (the listing, in `agents.py`) says where each entry
came from with `entry_origins`, from the cached registry only."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from deck.cli.common import config_file, echo, echo_json, fail, run_async
from deck.errors import ExitCode

if TYPE_CHECKING:
    from deck.registry.catalog import Catalog, Entry
    from deck.registry.edit import ConfigFile
    from deck.registry.install import Installed
    from deck.registry.source import Loaded

#: The words `deck agents` reads as actions, never as an agent's name: an agent so named is listed
#: with the others, and `deck agents add` does not give one of these names.
ACTIONS = ("logout", "search", "add", "update", "remove")


def run(action: str, args: list[str], config: Optional[Path], options: dict[str, Any]) -> int:
    """Run `deck agents ACTION ARGS`; one line and its exit code for any registry error."""
    from deck.registry.catalog import RegistryError

    try:
        if action == "search":
            return search(args, config, options["as_json"])
        if len(args) > 1 or (action != "update" and not args):
            fail(f"deck agents {action} takes {'one ID' if action == 'add' else 'one agent NAME'}"
                 f"{' (or none: every registry agent)' if action == 'update' else ''}")  # fmt: skip
        if action == "add":
            return add(args[0], config, options)
        if action == "update":
            return update(args[0] if args else None, config)
        return remove(args[0], config, bool(options.get("force")))
    except RegistryError as exc:
        fail(str(exc), exc.exit_code)
    except OSError as exc:  # a folder deck cannot make or write (the data or cache folder)
        fail(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", ExitCode.ERROR)


# -- the registry and the config file ---------------------------------------------------------


def _config(config: Optional[Path]) -> tuple[ConfigFile, str]:
    """The config file to edit (the one deck would run with; a new one in XDG's place when there is
    none, begun as `deck config init`'s) and the registry's URL it names."""
    from deck.config.files import xdg_config_file
    from deck.config.template import starter_config
    from deck.registry.catalog import RegistryError
    from deck.registry.edit import ConfigFile
    from deck.registry.source import registry_url

    path, _source = config_file(config)
    edited = ConfigFile.open(path or xdg_config_file(), new_text=starter_config())
    if (problem := edited.problem()) is not None:  # before any download: the edit could not be saved
        raise RegistryError(f"the config has an error, fix it first: {problem}", ExitCode.USAGE)
    table = edited.doc.get("registry")
    url = table.get("url") if isinstance(table, dict) else None
    return edited, registry_url(url if isinstance(url, str) and url else None)


def _load(url: str, refresh: bool = False) -> Loaded:
    from deck.registry.source import load

    loaded: Loaded = run_async(load(url, refresh=refresh))
    if isinstance(loaded, int):  # interrupted
        raise SystemExit(loaded)
    if note := loaded.note():
        echo(f"deck: {note}", err=True)
    return loaded


# -- search -----------------------------------------------------------------------------------


def search(words: list[str], config: Optional[Path], as_json: bool) -> int:
    """List the registry's agents whose id, name or description hold every word."""
    from deck.registry.catalog import search as matching

    _edited, url = _config(config)
    loaded = _load(url)
    found = matching(words, loaded.catalog)
    problems = loaded.catalog.problems
    _say_left_out(problems)
    if as_json:
        registry = {"url": url, "how": loaded.how, "age": round(loaded.age)}
        echo_json({"registry": registry, "agents": [_row(e) for e in found], "left_out": list(problems)})
        return ExitCode.OK
    for entry in found:
        echo(
            f"{entry.id:<24} {entry.version:<12} {', '.join(entry.methods()):<16} "
            f"{entry.name}: {entry.description[:100]}"
        )
    if not found:
        echo(f"no agent of the registry matches {' '.join(words)!r}", err=True)
    if loaded.how == "cached":
        from deck.registry.source import format_age

        echo(f"(the registry as cached {format_age(loaded.age)} ago)", err=True)
    return ExitCode.OK


def _say_left_out(problems: tuple[str, ...], shown: int = 5) -> None:
    """The registry's entries left out, and why (the registry's to fix): the first few, then how many
    more, so a long list neither floods the terminal nor looks shorter than it is."""
    for problem in problems[:shown]:
        echo(f"deck: registry: {problem}", err=True)
    if len(problems) > shown:
        more = len(problems) - shown
        echo(f"deck: registry: … and {more} more left out (`deck agents search --json` lists them all, in left_out)",
             err=True)  # fmt: skip


def _row(entry: Entry) -> dict[str, Any]:
    return {
        "id": entry.id, "name": entry.name, "version": entry.version, "description": entry.description,
        "repository": entry.repository, "license": entry.license, "authors": list(entry.authors),
        "install": entry.methods(), "platforms": list(entry.binaries),
    }  # fmt: skip


# -- add --------------------------------------------------------------------------------------


def add(ident: str, config: Optional[Path], options: dict[str, Any]) -> int:
    """Write `[agents.NAME]` for the registry's agent `ident`, its command pinned (a binary installed)."""
    from deck.registry.catalog import find

    edited, url = _config(config)
    name = options.get("as_name") or ident
    if name in ACTIONS:
        fail(f"{name!r} is one of `deck agents`' action words: give the agent another name with --as")
    if name in edited.agents():
        fail(f"the config already has an agent {name!r}: pick another name with --as, or `deck agents update {name}`")
    host, cwd, ssh = options.get("host") or "", options.get("cwd") or "", list(options.get("ssh") or [])
    if host and not cwd:
        fail(f"an agent on {host} needs --cwd, an absolute folder there (its sessions open in it)")
    if ssh and not host:
        fail("--ssh is for an agent on a host: add --host")
    entry = find(ident, _load(url).catalog)
    installed, method = _install(entry, host, options.get("via"), ssh)
    values: dict[str, Any] = {"title": entry.name, "description": entry.description[:200], "command": installed.command}
    values |= {"env": installed.env} if installed.env else {}
    values |= {"host": host} if host else {}
    values |= {"ssh": ssh} if ssh else {}
    values |= {"cwd": cwd} if cwd else {}
    values["registry"] = f"{entry.id}@{entry.version}"
    edited.add(name, values, comment=f"From the ACP registry ({method}): `deck agents update {name}` moves it on")
    _save_or_undo(edited, name, installed, host, ssh)
    echo(f"added {name}: {entry.id} {entry.version} ({method}{f', on {host}' if host else ''}) to {edited.path}")
    _say_missing_launcher(installed.command, host)
    return ExitCode.OK


def _install(entry: Entry, host: str, via: Optional[str], ssh: Optional[list[str]] = None) -> tuple[Installed, str]:
    """The distribution chosen for this machine (or `host`), installed: what the entry gets, and how."""
    from deck.registry.catalog import Package, platform_key
    from deck.registry.install import Installed, choose, install_binary, package_command

    platform = platform_key()
    if host and (via == "binary" or (via is None and not entry.packages)):  # npx and uvx need not ask the host
        from deck.registry.host import host_platform

        platform = host_platform(host, ssh or [])
    dist = choose(entry, platform, via)
    if isinstance(dist, Package):
        return Installed(package_command(dist), dict(dist.env)), dist.kind
    progress = _progress(f"{entry.id} {entry.version}")
    if host:
        from deck.registry.host import install_on_host

        return _installed(run_async(install_on_host(host, ssh or [], entry, dist, progress))), f"binary {platform}"
    return _installed(run_async(install_binary(entry, dist, progress))), f"binary {platform}"


def _installed(result: Any) -> Installed:
    if isinstance(result, int):  # interrupted: run_async's exit code
        raise SystemExit(result)
    return result  # type: ignore[no-any-return]


def _save_or_undo(edited: ConfigFile, name: str, installed: Installed, host: str, ssh: list[str]) -> None:
    """Save the config; if it cannot be, remove the binary just installed unless another entry uses it."""
    from deck.registry.catalog import RegistryError

    try:
        edited.save()
    except RegistryError:
        if installed.folder and not _users(edited.agents(), installed.folder, host, skip=name):
            _remove_folder(installed.folder, host, ssh)
        raise


def _say_missing_launcher(command: list[str], host: str) -> None:
    if not host and command[0] in ("npx", "uvx") and shutil.which(command[0]) is None:
        need = "Node.js (npx)" if command[0] == "npx" else "uv (uvx)"
        echo(f"deck: note: {command[0]} is not on this PATH: install {need} to run it", err=True)


def _progress(what: str) -> Any:
    """A download's progress on a terminal, one line at each tenth (none when stderr is not a terminal)."""
    if not sys.stderr.isatty():
        return None
    said = [-1]

    def told(done: int, total: Optional[int]) -> None:
        step = done * 10 // total if total else done >> 23
        if step != said[0]:
            said[0] = step
            shown = f"{step * 10}% of {total / 1048576:.1f} MiB" if total else f"{done / 1048576:.0f} MiB"
            echo(f"deck: downloading {what}: {shown}", err=True)

    return told


# -- update -----------------------------------------------------------------------------------


def update(name: Optional[str], config: Optional[Path]) -> int:
    """Move NAME (else every entry of the registry) to the registry's current version."""
    from deck.registry.catalog import RegistryError
    from deck.registry.origin import split_registry

    edited, url = _config(config)
    agents = edited.agents()
    if name is not None and name not in agents:
        fail(f"unknown agent {name!r} (agents: {', '.join(agents) or 'none'})")
    names = [name] if name else [n for n, t in agents.items() if "@" in str(t.get("registry", ""))]
    if name is not None and not split_registry(str(agents[name].get("registry", "")))[0]:
        fail(f"{name} is not from the ACP registry (no registry key): nothing to update")
    if not names:
        echo("no agent of the config comes from the ACP registry")
        return ExitCode.OK
    catalog = _load(url, refresh=True).catalog
    if name is not None:
        _update_one(edited, name, agents[name], catalog)
        return ExitCode.OK
    failed = False
    for each in names:  # one that cannot be updated is said, and the others still are
        try:
            _update_one(edited, each, agents[each], catalog)
        except RegistryError as exc:
            echo(f"deck: {each}: {exc}", err=True)
            failed = True
    return ExitCode.ERROR if failed else ExitCode.OK


def _update_one(edited: ConfigFile, name: str, table: dict[str, Any], catalog: Catalog) -> None:
    from deck.registry.catalog import find
    from deck.registry.origin import split_registry

    ident, version = split_registry(str(table.get("registry", "")))
    entry = find(ident, catalog)
    if entry.version == version:
        echo(f"{name} is up to date: {ident} {version}")
        return
    host, ssh = str(table.get("host", "")), [str(a) for a in table.get("ssh", [])]
    old_folder = _binary_folder(table)
    program = str((table.get("command") or [""])[0])
    current = "binary" if old_folder else program if program in ("npx", "uvx") else None
    # The way it was installed while the registry still offers it; a preset's (no version) the default way.
    via = current if version and current in entry.methods() else None
    installed, method = _install(entry, host, via, ssh)
    old_env = {str(k): str(v) for k, v in dict(table.get("env", {})).items()}
    values: dict[str, Any] = {"command": installed.command, "registry": f"{entry.id}@{entry.version}"}
    if {**old_env, **installed.env} != old_env:  # the registry's variables set, the user's own kept
        values["env"] = {**old_env, **installed.env}
    edited.change(name, values)
    _save_or_undo(edited, name, installed, host, ssh)
    echo(f"updated {name}: {ident} {version or '(preset)'} → {entry.version} ({method})")
    if old_folder and not _users(edited.agents(), old_folder, host, skip=None):
        _remove_folder(old_folder, host, ssh)


# -- remove -----------------------------------------------------------------------------------


def remove(name: str, config: Optional[Path], force: bool = False) -> int:
    """Remove `[agents.NAME]`, and the binary deck downloaded for it when no other entry uses it. An
    entry without a `registry` key was written by hand (or is deck's demo): only with `force`."""
    edited, _url = _config(config)
    table = edited.agents().get(name)
    if isinstance(table, dict) and "registry" not in table and not force:
        fail(f"{name} was not added from the registry: remove its [agents.{name}] table by hand, or --force")
    edited.remove(name)
    edited.save()
    assert isinstance(table, dict)
    folder, host = _binary_folder(table), str(table.get("host", ""))
    said = f"removed {name} from {edited.path}"
    if folder and not _users(edited.agents(), folder, host, skip=name):
        _remove_folder(folder, host, [str(a) for a in table.get("ssh", [])])
        said += f", and its binary {folder}{f' on {host}' if host else ''}"
    elif folder:
        said += f"; its binary {folder} stays: another entry uses it"
    echo(said)
    return ExitCode.OK


def _binary_folder(table: dict[str, Any]) -> Optional[str]:
    """The folder deck downloaded this entry's binary into (`…/deck/agents/ID/VERSION`), or None."""
    from deck.registry.install import data_dir
    from deck.registry.origin import split_registry

    ident, version = split_registry(str(table.get("registry", "")))
    command = table.get("command")
    program = str(command[0]) if isinstance(command, list) and command else ""
    mark = f"/deck/agents/{ident}/{version}/"
    if not ident or not version or mark not in program:
        return None
    folder = program[: program.index(mark) + len(mark) - 1]
    if not table.get("host") and not Path(folder).resolve().is_relative_to(data_dir().resolve()):
        return None
    return folder


def _users(agents: dict[str, Any], folder: str, host: str, skip: Optional[str]) -> list[str]:
    """The entries (but `skip`) whose command runs a binary in `folder` on the same host."""
    return [
        n for n, t in agents.items()
        if n != skip and isinstance(t, dict) and str(t.get("host", "")) == host and _binary_folder(t) == folder
    ]  # fmt: skip


def _remove_folder(folder: str, host: str, ssh: list[str]) -> None:
    from deck.registry.install import remove_folder

    if host:
        from deck.registry.host import remove_on_host

        ident, version = folder.rstrip("/").split("/")[-2:]
        remove_on_host(host, ssh, ident, version)
    else:
        remove_folder(folder)


# -- the listing ------------------------------------------------------------------------------


def entry_origins(configured_url: str, agents: dict[str, tuple[list[str], str]]) -> dict[str, dict[str, Any]]:
    """Where each agent (name → its command and `registry` key) came from, with the newer version the
    cached registry has: the cache only, never the network."""
    from deck.registry.catalog import RegistryError
    from deck.registry.origin import origin, preset_commands
    from deck.registry.source import cached, registry_url

    catalog = None
    if any(registry for _command, registry in agents.values()):
        try:
            copy = cached(registry_url(configured_url or None))
        except RegistryError:
            copy = None
        catalog = copy.catalog if copy is not None else None
    presets = preset_commands()
    return {name: origin(command, registry, catalog, presets) for name, (command, registry) in agents.items()}
