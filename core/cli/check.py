"""`deck agents --check`: whether each configured agent's command exists and, with
`--handshake`, whether it starts and completes an ACP handshake (then it is stopped)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from typing import TYPE_CHECKING, Any

from deck.agent import sandbox
from deck.cli.common import echo, echo_json, run_async
from deck.config.models import AgentConfig
from deck.errors import ExitCode, ServiceError
from deck.proc.processes import start_process
from deck.proc.supervisor import StopTimings

if TYPE_CHECKING:
    from deck.runtime.deck import Deck

#: A check stops each agent right after its handshake; most npm agents ignore stdin EOF,
#: so the default 5 s wait before SIGTERM would only slow the check down.
CHECK_TIMINGS = StopTimings(after_stdin_close=1.0, after_sigterm=2.0, after_sigkill=2.0)


def find_command(cfg: AgentConfig) -> tuple[str | None, str | None]:
    """(where the agent's program is, None) as the supervisor would find it, or (None, why it
    cannot start): its working directory or its command missing, or the command not executable."""
    cwd, program = cfg.resolved_cwd(), cfg.command[0]
    if not os.path.isdir(cwd):
        return None, f"working directory does not exist: {cwd}"
    if os.sep in program:  # a path: relative ones are relative to the agent's cwd, like Popen(cwd=…)
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
    else:
        search = cfg.env.get("PATH", os.environ.get("PATH", os.defpath))
        found = shutil.which(program, path=search)
        if found is not None:
            return found, None
        # which() passes over a file that is there but not executable: say so, as the start would.
        path = next((p for d in search.split(os.pathsep) if d and os.path.isfile(p := os.path.join(d, program))), "")
    if not os.path.isfile(path):
        return None, f"command not found: {program}"
    if not os.access(path, os.X_OK):
        return None, f"command not executable: {program}"
    return path, None


async def find_remote_command(cfg: AgentConfig) -> tuple[str | None, str | None]:
    """The same for an agent on another host, asked there through ssh (BatchMode: no prompt): where
    the program is on the host, or why not (the host unreachable, its cwd or the command missing)."""
    import shlex

    from deck.agent.remote import SSH_FAILED, control_dir, ssh_base

    program = cfg.command[0]
    probe = f"cd -- {shlex.quote(cfg.cwd)} || exit 3; command -v {shlex.quote(program)} || exit 4"
    args = [*ssh_base(list(cfg.ssh), control_dir()), "--", cfg.host, "sh -c " + shlex.quote(probe)]
    try:
        process = await start_process(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        return None, f"cannot run ssh for {cfg.host}: {exc.strerror or exc}"
    try:
        out, err = await asyncio.wait_for(process.communicate(), REMOTE_CHECK_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None, f"{cfg.host} not reachable: no answer within {REMOTE_CHECK_SECONDS} s"
    except OSError as exc:
        return None, f"cannot run ssh for {cfg.host}: {exc.strerror or exc}"
    said = err.decode(errors="replace").strip().splitlines()
    if process.returncode == SSH_FAILED:
        return None, f"{cfg.host} not reachable through ssh: {said[-1] if said else 'ssh exited 255'}"
    if process.returncode == 3:
        return None, f"working directory does not exist on {cfg.host}: {cfg.cwd}"
    if process.returncode != 0:
        return None, f"command not found on {cfg.host}: {program}"
    return f"{cfg.host}:{out.decode(errors='replace').strip()}", None


async def check_remote_sandbox(cfg: AgentConfig) -> str | None:
    """Why the agent's host cannot sandbox it (bwrap missing there, or unable to make its namespaces), or None."""
    import shlex

    from deck.agent.remote import control_dir, ssh_base

    probe = f"command -v {sandbox.BWRAP} >/dev/null 2>&1 || exit 3; {sandbox.BWRAP} {' '.join(sandbox.PROBE)} true"
    args = [*ssh_base(list(cfg.ssh), control_dir()), "--", cfg.host, "sh -c " + shlex.quote(probe)]
    try:
        process = await start_process(*args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                                      stderr=asyncio.subprocess.DEVNULL)  # fmt: skip
        code = await asyncio.wait_for(process.wait(), REMOTE_CHECK_SECONDS)
    except (OSError, TimeoutError) as exc:
        return f"sandbox: not checked on {cfg.host}: {exc}"
    if code == 3:
        return sandbox.HOST_MISSING.removeprefix("deck: ")
    return None if code == 0 else sandbox.HOST_BROKEN.removeprefix("deck: ")


#: How long `deck agents --check` waits for a host to answer.
REMOTE_CHECK_SECONDS = 30


async def handshake(deck: Deck, name: str) -> dict[str, Any]:
    """Start agent `name` (initialize + session/new), then stop it."""
    started = time.monotonic()
    agent = deck.agent(name)
    try:
        await deck.agent_service.start(name)
    except ServiceError:
        return {"ok": False, "error": agent.error or "could not start", "seconds": round(time.monotonic() - started, 2)}
    seconds = round(time.monotonic() - started, 2)
    info = agent.init_result.get("agentInfo") or {}
    await deck.agent_service.stop(name)
    return {"ok": True, "agent": " ".join(str(info.get(k, "")) for k in ("name", "version")).strip(), "seconds": seconds}


async def check_all(deck: Deck, with_handshake: bool, only: str | None = None) -> list[dict[str, Any]]:
    rows = []
    try:
        for agent in deck.agents.values():
            if only is not None and agent.name != only:
                continue
            found, problem = await find_remote_command(agent.config) if agent.config.host else find_command(agent.config)
            if found is not None and (theirs := [*_plugins_off(deck, agent.name), *await deck.hooks.check_agent(agent)]):
                found, problem = None, "; ".join(theirs)
            row: dict[str, Any] = {"name": agent.name, "command": agent.config.command, "found": found}
            if problem is not None:
                row["problem"] = problem
            if sandbox.resolve(agent.config, deck.config.sandbox) is not None:
                trouble = await check_remote_sandbox(agent.config) if agent.config.host else sandbox.check()
                row["sandbox"] = {"ok": trouble is None, **({"problem": trouble} if trouble else {})}
            if with_handshake:
                row["handshake"] = await handshake(deck, agent.name) if found else None
            rows.append(row)
    finally:
        await deck.shutdown()
    return rows


def _plugins_off(deck: Deck, name: str) -> list[str]:
    """Why agent `name` does not start for want of a plugin that is off (it sets a key of its)."""
    return [f"{key} is set, but the {plugin} plugin, which reads it, is off ({how})"
            for plugin, key in deck.relied_on(name).items() if (how := deck.plugin_off(plugin)) is not None]  # fmt: skip


def run_check(deck: Deck, with_handshake: bool, as_json: bool, only: str | None = None) -> ExitCode:
    """Print the check of every agent (`only`: of that one); the exit code is ERROR when any check failed."""
    deck.timings = CHECK_TIMINGS
    rows = run_async(check_all(deck, with_handshake, only))
    failed = any(
        not r["found"] or (with_handshake and not r["handshake"]["ok"]) or not r.get("sandbox", {}).get("ok", True)
        for r in rows
    )
    if as_json:
        echo_json(rows)
        return ExitCode.ERROR if failed else ExitCode.OK
    for row in rows:
        if not row["found"]:
            echo(f"✗ {row['name']:<16} {row['problem']}")
            continue
        line = f"{row['name']:<16} command: {row['found']}"
        boxed = row.get("sandbox")
        if boxed is not None and not boxed["ok"]:
            echo(f"✗ {line}; {boxed['problem']}")
            continue
        if boxed is not None:
            line += f"; sandbox: works (bubblewrap{' on ' + row['found'].partition(':')[0] if ':' in row['found'] else ''})"
        shake = row.get("handshake")
        if shake is None:
            echo(f"✓ {line}")
        elif shake["ok"]:
            echo(f"✓ {line}; handshake ok in {shake['seconds']:g}s ({shake['agent'] or 'unnamed agent'})")
        else:
            reason = shake["error"].replace("\n", "\n    ")
            echo(f"✗ {line}; handshake failed: {reason}")
    return ExitCode.ERROR if failed else ExitCode.OK
