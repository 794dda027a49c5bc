"""deck's one way to replace a file (`files.write_atomic`, `files.replace_in`) and its one state folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deck.agent import fs
from deck.config import files as config_files
from deck.proc import storage as files


def test_a_file_is_replaced_whole_keeping_its_mode(tmp_path):
    target = tmp_path / "notes.txt"
    files.write_atomic(target, b"one\n")
    assert target.read_bytes() == b"one\n" and target.stat().st_mode & 0o7777 == files.NEW_FILE_MODE
    target.chmod(0o640)
    inode = target.stat().st_ino
    files.write_atomic(target, b"two\n")
    assert target.read_bytes() == b"two\n" and target.stat().st_mode & 0o7777 == 0o640
    assert target.stat().st_ino != inode  # a new file renamed over the old one, not a rewrite in place
    files.write_atomic(target, b"three\n", 0o600)
    assert target.stat().st_mode & 0o7777 == 0o600
    assert os.listdir(tmp_path) == ["notes.txt"]  # no temp file left


def test_a_failed_check_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "deck.toml"
    target.write_text("old\n")

    def changed() -> None:
        raise config_files.Changed(str(target))

    with pytest.raises(config_files.Changed):
        files.write_atomic(target, b"new\n", check=changed)
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["deck.toml"]


def test_a_symlink_at_the_name_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "link").symlink_to(outside)
    directory = os.open(folder, os.O_DIRECTORY)
    try:
        files.replace_in(directory, "link", b"new\n", 0o644)
    finally:
        os.close(directory)
    assert outside.read_text() == "keep\n"
    assert not (folder / "link").is_symlink() and (folder / "link").read_text() == "new\n"


def test_config_and_agent_writes_share_the_helper(tmp_path, monkeypatch):
    calls: list[str] = []
    real = files.replace_in

    def spy(directory: int, name: str, data: bytes, mode: int, **options: object) -> None:
        calls.append(name)
        real(directory, name, data, mode, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "replace_in", spy)
    monkeypatch.setattr(fs, "replace_in", spy)
    config_files.write_atomic(tmp_path / "deck.toml", "language = 'en'\n")
    fs.write_text_file(str(tmp_path), {"path": str(tmp_path / "out.txt"), "content": "hi"})
    assert calls == ["deck.toml", "out.txt"]


def test_one_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert config_files.state_dir is files.state_dir and files.state_dir() == tmp_path / "deck"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert files.state_dir() == Path.home() / ".local" / "state" / "deck"
