"""The registry's format read as untrusted input: a bad top is one error, a bad entry is left out
and said, hostile fields (ids that are paths, packages that are options, commands out of the archive)
never reach a command line or a folder name."""

from __future__ import annotations

import json

import pytest
from deck.registry.catalog import RegistryError, find, parse, pinned, platform_key, search
from deck.registry.install import choose, package_command


def catalog(*agents: dict) -> bytes:
    return json.dumps({"version": "1.0.0", "agents": list(agents)}).encode()


def npx(ident: str, package: str, version: str = "1.0.0", **extra: object) -> dict:
    return {"id": ident, "name": ident, "version": version, "distribution": {"npx": {"package": package, **extra}}}


def test_not_json_and_not_the_format_are_one_line_errors() -> None:
    with pytest.raises(RegistryError, match=r"^the registry at R is not valid JSON: "):
        parse(b"{nope", "R")
    with pytest.raises(RegistryError, match=r'^the registry at R is not in the ACP registry format: no "agents" list$'):
        parse(b'{"version": "1", "entries": []}', "R")
    with pytest.raises(RegistryError, match="not valid JSON"):
        parse(b"[" * 100_000, "R")  # nested past the parser's depth


def test_caps_on_size_and_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deck.registry.catalog.MAX_REGISTRY", 100)
    with pytest.raises(RegistryError, match="larger than"):
        parse(b" " * 101, "R")
    monkeypatch.setattr("deck.registry.catalog.MAX_AGENTS", 2)
    with pytest.raises(RegistryError, match="more than 2 agents"):
        parse(json.dumps({"agents": [{}, {}, {}]}).encode()[:100], "R")


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (npx("../../etc", "x"), "is not an id"),
        (npx("a/b", "x"), "is not an id"),
        (npx("ok", "x", version="../1"), "is not a version"),
        (npx("ok", "--registry=https://evil.example"), "is not a package"),
        (npx("ok", "pkg with space"), "is not a package"),
        (npx("ok", "pkg", cmd="-rf"), "is not a command"),
        (npx("ok", "pkg", args="--acp"), "args is not a list"),
        (npx("ok", "pkg", args=[1]), "holds something else"),
        (npx("ok", "pkg", env={"BAD NAME": "1"}), "not a variable name"),
        (npx("ok", "pkg", env={"LD_PRELOAD": "/tmp/x.so"}), "'LD_PRELOAD' would change which program runs"),
        (npx("ok", "pkg", env={"PATH": "/tmp/evil"}), "'PATH' would change which program runs"),
        (npx("ok", "pkg", env={"NODE_OPTIONS": "--require /tmp/x.js"}), "'NODE_OPTIONS' would change"),
        (
            {
                "id": "ok",
                "version": "1",
                "distribution": {"binary": {"linux-x86_64": {"archive": "ftp://x", "cmd": "a"}}},
            },
            "not an http, https or file URL",
        ),
        (
            {
                "id": "ok",
                "version": "1",
                "distribution": {"binary": {"linux-x86_64": {"archive": "https://x/a.zip", "cmd": "../../bin/sh"}}},
            },
            "not a path inside the archive",
        ),
        (
            {
                "id": "ok",
                "version": "1",
                "distribution": {"binary": {"linux-x86_64": {"archive": "https://x/a.zip", "cmd": "/bin/sh"}}},
            },
            "not a path inside the archive",
        ),
        (
            {
                "id": "ok",
                "version": "1",
                "distribution": {"binary": {"linux-x86_64": {"archive": "https://x/a", "cmd": "a", "sha256": "zz"}}},
            },
            "not a SHA-256 digest",
        ),
        ({"id": "ok", "version": "1", "distribution": {"pip": {}}}, "no distribution deck knows"),
        ({"id": "ok", "version": "1"}, 'no "distribution" object'),
        (
            {"id": "ok", "version": "1", "distribution": {"npx": {"package": "p" * 5000}}},
            "longer than",
        ),
        ("a string", "not an object"),
    ],
    ids=[
        "id-path",
        "id-slash",
        "version-path",
        "package-option",
        "package-space",
        "cmd-option",
        "args-string",
        "args-number",
        "env-name",
        "env-preload",
        "env-path",
        "env-node-options",
        "archive-scheme",
        "cmd-dotdot",
        "cmd-absolute",
        "digest",
        "unknown-kind",
        "no-distribution",
        "too-long",
        "not-object",
    ],  # fmt: skip
)
def test_a_hostile_entry_is_left_out_and_said_and_the_others_kept(entry: object, words: str) -> None:
    read = parse(catalog(entry, npx("good", "@scope/good")), "R")  # type: ignore[arg-type]
    assert list(read.agents) == ["good"]
    assert len(read.problems) == 1 and words in read.problems[0], read.problems
    ident = entry.get("id") if isinstance(entry, dict) else None
    if ident == "ok":
        with pytest.raises(RegistryError, match="left out"):
            find("ok", read)


def test_packages_are_pinned_to_the_entrys_version_and_commands_built_as_format_md_says() -> None:
    assert pinned("npx", "@scope/pkg", "1.2.3") == "@scope/pkg@1.2.3"
    assert pinned("npx", "@scope/pkg@1.2.0", "1.2.3") == "@scope/pkg@1.2.0"  # the registry's own pin kept
    assert pinned("npx", "plain", "2") == "plain@2"
    assert pinned("uvx", "fast-agent-acp", "0.10.1") == "fast-agent-acp==0.10.1"
    read = parse(catalog(
        npx("a", "@s/a", args=["--acp"]), npx("b", "@s/b", cmd="b-acp"),
        {"id": "c", "version": "3", "distribution": {"uvx": {"package": "c", "args": ["-x"]}}},
        {"id": "d", "version": "4", "distribution": {"uvx": {"package": "d-tools", "cmd": "d"}}},
    ), "R")  # fmt: skip
    commands = [package_command(choose(read.agents[i], "linux-x86_64")) for i in "abcd"]  # type: ignore[arg-type]
    assert commands == [
        ["npx", "-y", "@s/a@1.0.0", "--acp"], ["npx", "-y", "--package", "@s/b@1.0.0", "b-acp"],
        ["uvx", "c==3", "-x"], ["uvx", "--from", "d-tools==4", "d"],
    ]  # fmt: skip


def test_unknown_id_names_the_closest_and_exits_2() -> None:
    read = parse(catalog(npx("claude-acp", "c"), npx("codex-acp", "x"), npx("gemini", "g")), "R")
    with pytest.raises(RegistryError, match=r"^unknown registry agent 'claude' *; did you mean claude-acp") as caught:
        find("claude", read)
    assert caught.value.exit_code == 2
    with pytest.raises(RegistryError, match="`deck agents search` lists them"):
        find("zzzzzz", read)


def test_no_build_for_this_platform_names_its_key() -> None:
    entry = {"id": "goose", "version": "1.5", "distribution": {"binary": {
        "darwin-aarch64": {"archive": "https://x/g.tar.bz2", "cmd": "./goose"},
        "linux-x86_64": {"archive": "https://x/g.tar.bz2", "cmd": "./goose"}}}}  # fmt: skip
    read = parse(catalog(entry), "R")
    with pytest.raises(
        RegistryError,
        match=r"^goose 1.5 has no build for this platform, linux-aarch64 \(builds: darwin-aarch64, linux-x86_64\)$",
    ):
        choose(read.agents["goose"], "linux-aarch64")
    assert choose(read.agents["goose"], "linux-x86_64").cmd == "goose"  # type: ignore[union-attr]


def test_platform_keys_and_search() -> None:
    assert platform_key("Linux", "x86_64") == "linux-x86_64"
    assert platform_key("Darwin", "arm64") == "darwin-aarch64"
    assert platform_key("Linux", "aarch64") == "linux-aarch64"
    read = parse(catalog(npx("claude-acp", "c"), {**npx("gemini", "g"), "description": "Google's CLI"}), "R")
    assert [e.id for e in search(["google"], read)] == ["gemini"]
    assert [e.id for e in search([], read)] == ["claude-acp", "gemini"]


def test_a_long_description_is_cut_not_refused() -> None:
    read = parse(catalog({**npx("long", "p"), "description": "d" * 10_000, "name": 42}), "R")
    assert read.problems == () and len(read.agents["long"].description) == 4096 and read.agents["long"].name == "long"


def test_an_id_or_version_ending_in_a_newline_is_refused() -> None:
    read = parse(catalog(npx("tiny\n", "p"), npx("ok", "p", version="1\n"), npx("good", "p")), "R")
    assert list(read.agents) == ["good"] and len(read.problems) == 2
