"""`deck land` of a train of agents' worktrees beside plain `git merge`s of the same branches.

    python scripts/bench/land.py                   # 5 rounds, 10 agents × 50 changed files each
    python scripts/bench/land.py -r 3 --agents 20 --files 100

Each round makes, in a temporary folder, a repository of 500 files and, for each agent, its
worktree where deck makes it (`deck/AGENT`, from the main checkout's HEAD), with FILES files of its
own changed, half committed and half left uncommitted (pending work, as agents leave it). Then,
side by side in the round:

    git merge   a copy of the repository with the same work, each branch's pending work committed
                first, merged one after another into main (`git merge --no-ff --no-edit`, the main
                checkout's files following): what a user does by hand
    deck land   `WorktreeService.Land` of every agent, in a deck of the config (no check)
    checked     the same with `[land] check = ["true"]`: each merge checked out in the scratch
                worktree before the base branch moves

and prints the medians, and deck land ÷ git merge (and checked ÷ git merge): the median of the
rounds' ratios, each of a round's side-by-side runs (on a busy machine the rounds differ more than
the two do within one), with their range. The setting up is not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(path: Path) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Bench")
    git(path, "config", "user.email", "bench@example.org")
    for i in range(500):
        folder = path / f"pkg{i % 20}"
        folder.mkdir(exist_ok=True)
        (folder / f"base{i}.py").write_text(f"VALUE = {i}\n" * 20)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")


def agent_work(worktree: Path, agent: str, files: int) -> None:
    """`files` files of `agent`'s own: half committed, half left uncommitted."""
    folder = worktree / f"work_{agent}"
    folder.mkdir()
    for i in range(files):
        (folder / f"f{i}.py").write_text(f"# {agent}\nX = {i}\n" * 10)
        if i == files // 2 - 1:
            git(worktree, "add", "-A")
            git(worktree, "commit", "-q", "-m", f"{agent}: first half")


def config_text(repo: Path, agents: list[str], check: bool) -> str:
    land = '[land]\ncheck = ["true"]\n\n' if check else ""
    tables = "".join(
        f'[agents.{a}]\ncommand = {json.dumps([sys.executable, "-c", "pass"])}\ncwd = "{repo}"\nworktree = true\n\n'
        for a in agents
    )
    return land + tables


async def made_worktrees(config: Path, agents: list[str]) -> None:
    """Each agent's worktree made as deck makes it at the agent's first start (none is started)."""
    from deck import Deck
    from deck.plugins.worktrees import tree

    deck = Deck(config, "flag")
    try:
        for name in agents:
            place = await tree.locate(name, deck.agents[name].config.resolved_cwd())
            await tree.ensure(place)
    finally:
        await deck.shutdown()


async def deck_land(config: Path) -> tuple[float, list[dict]]:
    from deck import Deck

    deck = Deck(config, "flag")
    try:
        started = time.perf_counter()
        rows = await deck.call("WorktreeService.Land", {})
        return time.perf_counter() - started, rows
    finally:
        await deck.shutdown()


def git_merges(repo: Path, branches: list[str]) -> float:
    started = time.perf_counter()
    for branch in branches:
        git(repo, "merge", "-q", "--no-ff", "--no-edit", branch)
    return time.perf_counter() - started


def one_round(root: Path, agents: int, files: int) -> dict[str, float]:
    names = [f"agent{i}" for i in range(agents)]
    times = {}
    for kind in ("deck land", "checked"):
        folder = root / kind.replace(" ", "-")
        state = folder / "state"
        os.environ["XDG_STATE_HOME"] = str(state)
        repo = folder / "repo"
        make_repo(repo)
        config = folder / "deck.toml"
        config.write_text(config_text(repo, names, kind == "checked"))
        asyncio.run(made_worktrees(config, names))
        worktrees = sorted(p for p in state.glob("deck/worktrees/*/*") if p.is_dir())
        for worktree in worktrees:
            agent_work(worktree, worktree.name, files)
        if kind == "deck land":  # the same work, in a copy of its own, for git merge
            plain = root / "git-merge"
            shutil.copytree(repo, plain, symlinks=True)
            shutil.rmtree(plain / ".git" / "worktrees")  # the copy's branches are checked out nowhere
            for worktree in worktrees:
                git(worktree, "add", "-A")
                git(worktree, "commit", "-q", "-m", "the rest")
                git(plain, "fetch", "-q", str(repo), f"+refs/heads/deck/{worktree.name}:refs/heads/deck/{worktree.name}")
                git(worktree, "reset", "-q", "--soft", "HEAD~1")  # deck lands it as pending work again
            times["git merge"] = git_merges(plain, [f"deck/{n}" for n in names])
        elapsed, rows = asyncio.run(deck_land(config))
        landed = [r for r in rows if r["result"] == "landed"]
        assert len(landed) == agents, rows
        assert len(git(repo, "ls-files").splitlines()) == 500 + agents * files
        times[kind] = elapsed
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--files", type=int, default=50)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"git merge": [], "deck land": [], "checked": []}
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="deck-bench-land-") as root:
            for kind, seconds in one_round(Path(root), args.agents, args.files).items():
                results[kind].append(seconds)
        print(f"round {n + 1}: " + ", ".join(f"{k} {v[-1] * 1000:.0f} ms" for k, v in results.items()), flush=True)
    medians = {k: statistics.median(v) for k, v in results.items()}
    print(f"\n{args.agents} agents × {args.files} files, median of {args.rounds} rounds:")
    for kind, seconds in medians.items():
        print(f"  {kind:<10} {seconds * 1000:8.0f} ms")
    for kind in ("deck land", "checked"):
        ratios = [mine / base for mine, base in zip(results[kind], results["git merge"])]
        print(f"  {kind:<10} ÷ git merge: {statistics.median(ratios):.2f}× (rounds {min(ratios):.2f}–{max(ratios):.2f}×)")


if __name__ == "__main__":
    main()
