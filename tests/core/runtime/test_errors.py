"""deck's errors: AcpError's text carries the agent's own reason from the JSON-RPC error's `data`;
every error carries its JSON-RPC code; a UsageError keeps its problems; the CLI exits with ExitCode."""

from __future__ import annotations

from pathlib import Path

from deck.errors import AcpError, ExitCode, UsageError


def test_details_in_data_are_shown():
    # As claude-agent-acp answers a session/new it cannot serve.
    error = AcpError(-32603, "Internal error", {"details": "Query closed before response received"})
    assert str(error) == "Internal error (-32603): Query closed before response received"
    assert str(AcpError(-32000, "Failed", "disk full")) == "Failed (-32000): disk full"


def test_no_useful_data_keeps_the_short_form():
    assert str(AcpError(-32000, "Authentication required")) == "Authentication required (-32000)"
    assert str(AcpError(-32000, "Authentication required", {"other": 1})) == "Authentication required (-32000)"
    assert str(AcpError(-32000, "same", "same")) == "same (-32000)"


# -- codes and usage errors --------------------------------------------------------------------


def test_every_error_carries_its_json_rpc_code():
    from deck import errors

    assert (errors.PARSE_ERROR, errors.INVALID_REQUEST, errors.METHOD_NOT_FOUND) == (-32700, -32600, -32601)
    assert (errors.INVALID_PARAMS, errors.INTERNAL_ERROR, errors.SERVER_ERROR) == (-32602, -32603, -32000)
    assert (errors.RESOURCE_NOT_FOUND, errors.REQUEST_CANCELLED, errors.AUTH_REQUIRED) == (-32002, -32800, -32000)
    made = [
        errors.DeckError("x"), errors.UsageError("x"), errors.UnknownMethod("x"), errors.ServiceError("x"),
        errors.InvalidParams("x"), errors.AcpError(errors.RESOURCE_NOT_FOUND, "x"), errors.ConnectionClosed(),
        errors.StartFailed("x"), errors.UnknownAgent("x", ["a"]), errors.PromptRefused("x"),
    ]  # fmt: skip
    classes = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.DeckError)}
    assert classes == {type(e) for e in made}, "an error class this test does not make"
    assert [e.code for e in made] == [-32603, -32602, -32601, -32000, -32602, -32002, -32603, -32000, -32000, -32000]


def test_the_modules_speaking_json_rpc_use_the_codes_of_errors():
    from deck import errors
    from deck.acp import connection as acp
    from deck.agent import fs

    assert acp.METHOD_NOT_FOUND is errors.METHOD_NOT_FOUND and acp.REQUEST_CANCELLED is errors.REQUEST_CANCELLED
    assert fs.RESOURCE_NOT_FOUND is errors.RESOURCE_NOT_FOUND and fs.INVALID_PARAMS is errors.INVALID_PARAMS


def test_a_usage_error_keeps_its_problems_apart():
    problems = ["deck.toml:1:5: x: bad", "deck.toml:2:1: y: bad"]
    error = UsageError("invalid config", problems)
    assert str(error) == "invalid config" and error.problems == tuple(problems)
    assert error.lines() == ["invalid config: deck.toml:1:5: x: bad", "invalid config: deck.toml:2:1: y: bad"]
    assert UsageError("bad flag").lines() == ["bad flag"]


def test_a_config_with_two_errors_is_one_line_each_and_exit_2(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "deck.toml"
    path.write_text('[agents.a]\ncommand = 3\n[agents.b]\ncommand = ["x"]\ntitle = 4\n')
    result = subprocess.run(
        [sys.executable, "-m", "deck", "agents", "--config", str(path)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == ExitCode.USAGE and result.stdout == ""
    first, second = result.stderr.splitlines()  # one line a problem, each whole
    assert first.startswith(f"deck: invalid config: {path}:2:11: agents.a.command: ") and "(3)" in first
    assert second.startswith(f"deck: invalid config: {path}:5:9: agents.b.title: ") and "(4)" in second


def test_the_command_line_exits_with_exit_codes_not_numbers():
    """Every `typer.Exit(…)` and `fail(…, code)` of the command line (core/cli/) names an ExitCode: no bare 1 or 2."""
    import ast

    from deck.cli import commands as cli

    modules = sorted(Path(cli.__file__).parent.glob("*.py"))
    assert len(modules) >= 8  # one module per command
    calls = [(m.name, call) for m in modules for call in ast.walk(ast.parse(m.read_text()))]
    bare = []
    for module, call in calls:
        if not isinstance(call, ast.Call):
            continue
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        codes = call.args if name == "Exit" else call.args[1:] if name == "fail" else []
        codes = [*codes, *(k.value for k in call.keywords if k.arg == "code")] if name in ("Exit", "fail") else []
        for code in codes:
            bare += [
                f"{module} line {call.lineno}: {n.value}"
                for n in ast.walk(code)
                if isinstance(n, ast.Constant) and type(n.value) is int
            ]
    assert bare == []
