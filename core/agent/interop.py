"""What deck answers differently to one agent: one table, keyed by the `agentInfo.name` of its `initialize` answer.

deck answers every agent as ACP says, except where a listed agent cannot work with that answer.
Each entry names the agent, the versions it was checked against and why it needs what it gets;
docs/interop.md says the same for users. An agent that sends no `agentInfo`, or a name not listed
here (names are compared exactly), gets the protocol's answers. An adaptation only changes the
shape of an answer deck has already decided on: what fs.py refuses (outside the working
directory, deck's own files) stays refused for every agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deck.errors import RESOURCE_NOT_FOUND, AcpError


@dataclass(frozen=True)
class Quirks:
    """How deck adapts to one agent; every default is ACP's own answer."""

    #: fs/read_text_file of a path that does not exist (the file, or a folder on its way) answers
    #: `{"content": ""}` instead of ACP's resource-not-found error (-32002).
    missing_file_reads_empty: bool = False


#: ACP's answers, for every agent not listed.
STANDARD = Quirks()

QUIRKS: dict[str, Quirks] = {
    # Gemini CLI (npm @google/gemini-cli): checked on 0.32.0, the first version that sends
    # agentInfo, through 0.61.0. Its write_file tool reads the file through fs/read_text_file
    # before writing it, and takes only a Node.js ENOENT error for "no file yet". Its ACP SDK
    # rejects with the JSON-RPC error object itself, which is no `Error`, so the check it makes
    # on the message ("Resource not found", "ENOENT", "does not exist", "No such file") sees
    # "[object Object]" and never matches: any error answer, -32002 included, fails the write
    # with "Error checking existing file". Empty content lets it create the file (it then
    # reports that it overwrote an empty one). Its replace tool still cannot create a file
    # with an empty old_string: it reads the empty content as a file that already exists.
    "gemini-cli": Quirks(missing_file_reads_empty=True),
    # Qwen Code (npm @qwen-code/qwen-code), checked on 0.24.4: a fork of Gemini CLI whose ACP
    # file service maps -32002 to ENOENT ("File not found"), so its tools take a missing file
    # for a new one. ACP's answer is what it needs: listed so that it keeps it.
    "qwen-code": STANDARD,
}


def quirks_for(init_result: Mapping[str, Any]) -> Quirks:
    """The adaptations for the agent that gave `init_result` in answer to `initialize`."""
    info = init_result.get("agentInfo")
    name = info.get("name") if isinstance(info, dict) else None
    return QUIRKS.get(name, STANDARD) if isinstance(name, str) else STANDARD


def fs_answer(quirks: Quirks, method: str, error: AcpError) -> dict[str, Any] | None:
    """What the agent gets instead of `error` for fs request `method`; None: the error itself."""
    if method == "fs/read_text_file" and error.code == RESOURCE_NOT_FOUND and quirks.missing_file_reads_empty:
        return {"content": ""}
    return None
