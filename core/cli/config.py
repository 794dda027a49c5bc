"""`deck config path|init|validate|schema|show`: the config file, checked and shown."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer
from deck.cli.common import Command, ConfigOption, echo, echo_json, fail, report_plugin_failure
from deck.errors import ExitCode

config_app = typer.Typer(help="Check, locate and print the config file.", rich_markup_mode=None)


@config_app.command("path", cls=Command)
def config_path(config: Optional[Path] = ConfigOption) -> None:
    """Say which config file is in use and how it was found."""
    from deck.config.files import find_config

    path, source = find_config(str(config) if config else None)
    xdg = "$XDG_CONFIG_HOME/deck/deck.toml" if os.environ.get("XDG_CONFIG_HOME") else "~/.config/deck/deck.toml"
    how = {"flag": "--config", "env": "$DECK_CONFIG", "cwd": "./deck.toml", "xdg": xdg}
    if path is None:
        echo("built-in default (no config file found)")
    elif not path.is_file():
        echo(f"{path} (from {how[source]}; file not found)")
        raise typer.Exit(ExitCode.USAGE)
    else:
        echo(f"{path} (from {how[source]})")


@config_app.command("init", cls=Command)
def config_init(
    path: Path = typer.Argument(Path("deck.toml"), metavar="PATH", help="Where to write it.", show_default="./deck.toml"),
) -> None:
    """Write a commented first config.

    The demo agent, and presets for real agents to uncomment. Never overwrites a file.
    """
    from deck.config.template import starter_config, write_new

    try:
        write_new(path, starter_config())
    except FileExistsError:
        fail(f"{path} already exists: not overwritten (move it away, or give another PATH)", ExitCode.ERROR)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}", ExitCode.ERROR)
    echo(f"wrote {path}: the demo agent, and commented presets for real agents.")
    run = "deck run" if path.resolve() == Path("deck.toml").resolve() else f"deck run --config {path}"
    echo(f"Next: edit it, check it with `deck config validate {path}`, then `{run}`.")


@config_app.command("validate", cls=Command)
def config_validate(
    path: Optional[Path] = typer.Argument(None, metavar="PATH", help="The file to check (else the config in use)."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Check a config file.

    One `path:line:col: message` line per problem; exit 1 on an error. The file is PATH, or
    --config as the other commands take it.
    """
    if path is not None and config is not None and path != config:
        fail("give the file to check once: PATH or --config")
    where, loaded, _sections = _load_config(path or config, frontends=True)
    for problem in loaded.problems:
        echo(problem.format(where))
    if loaded.errors:
        raise typer.Exit(ExitCode.ERROR)
    warnings = len(loaded.warnings)
    echo(f"{where}: valid" + (f" ({warnings} warning{'s' if warnings > 1 else ''})" if warnings else ""))


@config_app.command("schema", cls=Command)
def config_schema(config: Optional[Path] = ConfigOption) -> None:
    """Print the config's JSON Schema.

    With the plugins' sections, for editor completion.
    """
    from deck.config.output import json_schema

    _where, _loaded, sections = _load_config(config)
    echo_json(json_schema(sections))


@config_app.command("show", cls=Command)
def config_show(
    config: Optional[Path] = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="JSON instead of TOML."),
) -> None:
    """Print the effective config.

    The file with every default filled in.
    """
    from deck.config.output import effective, to_toml

    where, loaded, _sections = _load_config(config)
    if loaded.config is None:
        for problem in loaded.problems:
            echo(problem.format(where), err=True)
        raise typer.Exit(ExitCode.ERROR)
    data = _as_shown(effective(loaded.config, loaded.sections))
    if as_json:
        echo_json(data, ensure_ascii=False)
    else:
        echo(to_toml(data), nl=False)


def _as_shown(data: dict[str, Any]) -> dict[str, Any]:
    """The effective config with each agent's title and icon as deck shows them (`Agent.title`,
    `Agent.icon`): one left unset is the agent's name, and its first letter, not ""."""
    for name, agent in (data.get("agents") or {}).items():
        agent["title"] = agent.get("title") or name
        agent["icon"] = agent.get("icon") or name[:1].upper()
    return data


def _load_config(path: Optional[Path], frontends: bool = False) -> tuple[str, Any, dict[str, Any]]:
    """(where, Loaded, plugin sections) for `path`, else the config in use, else the built-in one;
    with `frontends`, a `frontend` that none of the enabled plugins registers is warned of."""
    from deck.config.check import Plugins, disabled_plugins, parse
    from deck.config.files import embedded_default, find_config, read_text

    found, _source = find_config(str(path) if path else None)
    if found is None:
        where, text = "<built-in>", embedded_default()
    else:
        where = str(found)
        try:
            text = read_text(found, pipe=True)  # a regular file or `<(…)`, of 1 MiB at most
        except FileNotFoundError:
            fail(f"config file not found: {found}")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {found}: {exc}")
    from deck.runtime.hooks import PluginHooks
    from deck.runtime.plugins import make_manager, plugin_names, sections_off

    disabled = disabled_plugins(text)
    hooks = PluginHooks(make_manager(disabled), report_plugin_failure)
    sections, plugins = hooks.config_sections(), Plugins(sections_off(disabled), plugin_names(hooks.pm))
    return where, parse(text, sections, set(hooks.register_frontends()) if frontends else None, plugins), sections
