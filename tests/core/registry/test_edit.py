"""The config file edited in place: comments, order and other entries kept; an edit that would make
the config invalid, or a file changed meanwhile, is never written; a file that is not TOML is one error."""

from __future__ import annotations

from pathlib import Path

import pytest
from deck.registry.catalog import RegistryError
from deck.registry.edit import ConfigFile

TEXT = """\
# top
[agents.a]   # first
command = ["a"]
env = { KEEP = "1" }   # mine

[notify]
on = ["input"]   # after the agents
"""


def test_add_change_remove_keep_everything_else(tmp_path: Path) -> None:
    path = tmp_path / "deck.toml"
    path.write_text(TEXT)
    edited = ConfigFile.open(path)
    edited.add("b", {"command": ["b", "--acp"], "env": {"X": "1"}, "registry": "b@1"})
    edited.save()
    text = path.read_text()
    assert text.startswith(TEXT.split("[notify]")[0]) and text.endswith(
        '[notify]\non = ["input"]   # after the agents\n'
    )
    assert '[agents.b]\ncommand = ["b", "--acp"]\nenv = {X = "1"}\nregistry = "b@1"\n' in text
    edited = ConfigFile.open(path)
    edited.change("a", {"command": ["a2"]})
    edited.save()
    assert '[agents.a]   # first\ncommand = ["a2"]\nenv = { KEEP = "1" }   # mine\n' in path.read_text()
    edited = ConfigFile.open(path)
    edited.remove("b")
    edited.save()
    assert path.read_text() == TEXT.replace('command = ["a"]', 'command = ["a2"]')


def test_an_agent_added_to_a_config_without_agents_and_one_with_dotted_keys(tmp_path: Path) -> None:
    for text in ('language = "en"\n', 'agents.x.command = ["x"]\n', ""):
        path = tmp_path / "deck.toml"
        path.write_text(text)
        edited = ConfigFile.open(path)
        edited.add("n", {"command": ["n"]})
        edited.save()
        assert path.read_text().startswith(text) and '[agents.n]\ncommand = ["n"]\n' in path.read_text()


def test_an_edit_that_makes_the_config_invalid_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "deck.toml"
    path.write_text(TEXT)
    edited = ConfigFile.open(path)
    edited.add("remote", {"command": ["r"], "host": "box"})  # a host needs a cwd
    with pytest.raises(
        RegistryError, match=r"^not written: the edited config would be invalid: .*deck\.toml:\d+:\d+: .*needs cwd"
    ):
        edited.save()
    assert path.read_text() == TEXT


def test_a_file_changed_meanwhile_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "deck.toml"
    path.write_text(TEXT)
    edited = ConfigFile.open(path)
    edited.add("b", {"command": ["b"]})
    path.write_text(TEXT + "\n# someone else's edit\n")
    with pytest.raises(RegistryError, match="changed meanwhile"):
        edited.save()
    assert path.read_text().endswith("# someone else's edit\n")


def test_a_file_that_is_not_toml_and_a_name_taken_or_unknown_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deck.toml"
    path.write_text("[agents.a\ncommand = 1\n")
    with pytest.raises(RegistryError, match="is not valid TOML"):
        ConfigFile.open(path)
    path.write_text(TEXT)
    edited = ConfigFile.open(path)
    with pytest.raises(RegistryError, match="already has an agent 'a'"):
        edited.add("a", {"command": ["x"]})
    with pytest.raises(RegistryError, match=r"unknown agent 'zz' in .* \(agents: a\)"):
        edited.remove("zz")


def test_an_agent_written_as_an_inline_table_is_said_to_be_one_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "deck.toml"
    text = '[agents]\nb = { command = "python3 -m deck.demo", registry = "demo@1.0.0" }\n'
    path.write_text(text)
    edited = ConfigFile.open(path)
    for edit in (lambda: edited.remove("b"), lambda: edited.change("b", {"registry": "demo@2.0.0"})):
        with pytest.raises(RegistryError, match=r"b is written as an inline table in .* \(b = \{…\}\): edit it by hand"):
            edit()
    assert path.read_text() == text


def test_a_registry_key_that_could_name_a_folder_out_is_a_config_error() -> None:
    from deck.config.check import parse

    for bad in ("../..@x", "tiny@..", "Tiny", "tiny@1/2", "tiny@"):
        errors = parse(f'[agents.a]\ncommand = ["a"]\nregistry = "{bad}"\n').errors
        assert len(errors) == 1 and "is not ID or ID@VERSION" in errors[0].message and errors[0].line == 3, (
            bad,
            errors,
        )
    assert parse('[agents.a]\ncommand = ["a"]\nregistry = "claude-acp@0.85.1"\n').problems == []


SPACED = """\
# The file's own note, kept.
[agents.a]
command = ["a"]
# sandbox = { write = ["~/.a"] }   (a's own, commented out)

# A block apart from a's keys: kept.
# [agents.old]
# command = ["old"]

## About b, right above it: b's own.
[agents.b]
# b's own note, under its header.
command = ["b"]   # b's
# b's own, right under its keys.

# Apart from b's keys by a blank line: kept.

# About c, running straight into it: c's own.
[agents.c]
command = ["c"]
# Right above d's header: d's own, kept when c goes.
[agents.d]
command = ["d"]
"""


@pytest.mark.parametrize(
    ("name", "gone"),
    [
        ("a", '[agents.a]\ncommand = ["a"]\n# sandbox = { write = ["~/.a"] }   (a\'s own, commented out)\n\n'),
        (
            "b",
            "## About b, right above it: b's own.\n[agents.b]\n# b's own note, under its header.\n"
            'command = ["b"]   # b\'s\n# b\'s own, right under its keys.\n\n',
        ),
        ("d", "# Right above d's header: d's own, kept when c goes.\n[agents.d]\ncommand = [\"d\"]\n"),
    ],
    ids=["own-commented-option-then-a-block-apart", "heading-and-notes-then-a-block-apart", "heading-of-the-last"],
)
def test_remove_keeps_the_comment_blocks_apart_from_the_entry_or_running_into_the_next_table(
    tmp_path: Path, name: str, gone: str
) -> None:
    path = tmp_path / "deck.toml"
    path.write_text(SPACED)
    edited = ConfigFile.open(path)
    edited.remove(name)
    edited.save()
    assert gone in SPACED and path.read_text() == SPACED.replace(gone, "")


def test_remove_keeps_a_comment_running_into_the_next_header_and_takes_its_own_heading(tmp_path: Path) -> None:
    path = tmp_path / "deck.toml"
    path.write_text(SPACED)
    edited = ConfigFile.open(path)
    edited.remove("c")
    edited.save()
    c = '# About c, running straight into it: c\'s own.\n[agents.c]\ncommand = ["c"]\n'
    assert path.read_text() == SPACED.replace(c, "")
    edited = ConfigFile.open(path)
    edited.remove("b")
    edited.save()
    assert path.read_text().endswith(
        '# [agents.old]\n# command = ["old"]\n\n# Apart from b\'s keys by a blank line: kept.\n\n'
        "# Right above d's header: d's own, kept when c goes.\n[agents.d]\ncommand = [\"d\"]\n"
    )
