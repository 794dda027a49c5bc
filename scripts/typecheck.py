"""Type-check deck as the package it is installed as: `python scripts/typecheck.py [mypy options]`.

The package `deck` is mapped from core/, `deck.plugins` from plugins/ and `deck.frontends` from
frontends/ (pyproject.toml), a layout mypy cannot follow: it would see every `deck.…` import as
missing, and check plugins and frontends against `Any`. So this builds the package's tree out of
symbolic links in .mypy-tree/ (the real files, nothing copied) and runs mypy on it: every module
is checked against the real API it imports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where each folder of the repository sits in the package.
MAPPED = {"deck": ROOT / "core", "deck/plugins": ROOT / "plugins", "deck/frontends": ROOT / "frontends"}


def build_tree(dest: Path) -> Path:
    """The package's tree under `dest` (made anew): each file a link to the real one. Returns the
    tree's `deck` folder."""
    if dest.exists():
        shutil.rmtree(dest)
    for where, folder in MAPPED.items():
        target = dest / where
        target.mkdir(parents=True, exist_ok=True)
        for entry in folder.iterdir():
            if entry.name == "__pycache__" or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)
    return dest / "deck"


def main(argv: list[str]) -> int:
    tree = build_tree(ROOT / ".mypy-tree")
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *argv, str(tree)]
    return subprocess.run(command, cwd=ROOT, env={**os.environ, "MYPYPATH": str(tree.parent)}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
