"""Plugin loading: the built-in list, the "deck" entry-point group, and what is disabled."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from typing import Any

import pluggy
from deck import hookspecs
from deck.events import Event, register_events
from deck.runtime.hooks import PER_DECK, WRAPPER_REFUSED

log = logging.getLogger(__name__)

#: Built-in plugins and frontends, registered exactly as a third party's would be.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "deck.frontends.jsonl",
    "deck.frontends.line",
    "deck.frontends.urwid",
    "deck.plugins.idle_stop",
    "deck.plugins.logs",
    "deck.plugins.announcements",
    "deck.plugins.history",
    "deck.plugins.worktrees",
    "deck.plugins.notify",
    "deck.plugins.budget",
)

ENTRY_POINT_GROUP = "deck"
AUTOLOAD_ENV = "DECK_DISABLE_PLUGIN_AUTOLOAD"

#: Where each third-party plugin comes from: "distribution version".
SOURCES: dict[str, str] = {}


def short_name(module_name: str) -> str:
    """`deck.plugins.idle_stop` → `idle_stop`; the name used in `[plugins] disabled`."""
    return module_name.rsplit(".", 1)[-1]


class DeckPluginManager(pluggy.PluginManager):
    """A PluginManager that counts its changes, so the core can cache hook implementations,
    and refuses hook wrappers (`hooks.WRAPPER_REFUSED` says why) before registering anything."""

    def __init__(self, project_name: str = "deck") -> None:
        super().__init__(project_name)
        self.generation = 0

    def register(self, plugin: object, name: str | None = None) -> str | None:
        for attr in dir(plugin):  # a wrapper is refused before pluggy records anything of the plugin
            self.parse_hookimpl_opts(plugin, attr)
        self.generation += 1
        return super().register(plugin, name)

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        self.generation += 1
        return super().unregister(plugin, name)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is not None and (opts.get("hookwrapper") or opts.get("wrapper")):
            raise pluggy.PluginValidationError(plugin, f"{name}: {WRAPPER_REFUSED}")
        return opts


def make_manager(disabled: Iterable[str] = (), *, autoload: bool | None = None) -> DeckPluginManager:
    """A PluginManager with the hookspecs, the built-ins and the entry points, less `disabled`."""
    disabled = set(disabled)
    pm = DeckPluginManager("deck")
    pm.add_hookspecs(hookspecs)
    pm.hook.deck_register_events.call_historic(result_callback=_register_events)
    for module_name in DEFAULT_PLUGINS:
        name = short_name(module_name)
        if name in disabled:
            pm.set_blocked(name)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # a built-in not shipped yet
        pm.register(module, name=name)
    if autoload is None:
        autoload = not os.environ.get(AUTOLOAD_ENV)
    if autoload:
        for name in disabled:
            pm.set_blocked(name)
        _load_entry_points(pm)
    return pm


def sections_off(disabled: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The config sections (`deck_config_sections`) the built-in plugins `disabled` would add, by
    plugin: what the file sets of them is theirs, and does nothing while they are off."""
    disabled = set(disabled)
    found: dict[str, dict[str, Any]] = {}
    for module_name in DEFAULT_PLUGINS:
        name = short_name(module_name)
        if name not in disabled:
            continue
        try:
            sections = getattr(importlib.import_module(module_name), "deck_config_sections", None)
            found[name] = dict(sections() or {}) if sections is not None else {}
        except Exception as exc:  # not shipped, or broken: it adds no key
            log.debug("plugin %s: its config sections unknown: %s", name, exc)
    return found


def commands_off(disabled: Iterable[str]) -> dict[str, str]:
    """The commands the built-in plugins `disabled` would add (`deck_register_commands`), by name:
    their plugin, for the error of one typed all the same."""
    import typer

    disabled = set(disabled)
    found: dict[str, str] = {}
    for module_name in DEFAULT_PLUGINS:
        name = short_name(module_name)
        if name not in disabled:
            continue
        scratch = typer.Typer()
        try:
            register = getattr(importlib.import_module(module_name), "deck_register_commands", None)
            if register is not None:
                register(app=scratch)
        except Exception as exc:  # not shipped, or broken: it adds no command
            log.debug("plugin %s: its commands unknown: %s", name, exc)
            continue
        for command in scratch.registered_commands:
            found[command.name or getattr(command.callback, "__name__", "").replace("_", "-")] = name
        for group in scratch.registered_groups:
            if group.name:
                found[group.name] = name
    return found


def plugin_names(pm: pluggy.PluginManager) -> frozenset[str]:
    """Every plugin there is, on or off: the built-ins, those of the "deck" entry-point group, and
    those registered by hand (not the parts serving one deck, `NAME.deck`)."""
    from importlib.metadata import entry_points

    names = {short_name(m) for m in DEFAULT_PLUGINS} | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    names.update(name for name, plugin in pm.list_name_plugin() if plugin is not None and not name.endswith(PER_DECK))
    return frozenset(names)


def _register_events(classes: list[type[Event]] | None) -> None:
    register_events(*(classes or ()))


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
            continue
        try:
            pm.register(ep.load(), name=ep.name)
        except Exception as exc:  # a broken third-party plugin must not stop deck
            log.error("cannot load plugin %s: %s", ep.name, exc)
            continue
        SOURCES[ep.name] = f"{ep.dist.name} {ep.dist.version}" if ep.dist else ep.value


def describe(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Loaded plugins: name, where each comes from, the hooks it implements (those of the part
    serving this deck, `NAME.deck`, included in NAME's)."""
    rows: dict[str, dict[str, Any]] = {}
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        hooks = {h.name for h in pm.get_hookcallers(plugin) or []}
        owner = rows.get(name.removesuffix(PER_DECK)) if name.endswith(PER_DECK) else None
        if owner is not None:
            owner["hooks"] = sorted(hooks.union(owner["hooks"]))
            continue
        rows[name] = {
            "name": name,
            "source": SOURCES.get(name, "built-in"),
            "module": getattr(plugin, "__name__", type(plugin).__name__),
            "hooks": sorted(hooks),
        }
    return list(rows.values())
