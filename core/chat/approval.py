"""`--approve PATTERN`: the permission requests a command line approves without asking.

A script has nobody to answer the agent's permission requests; `deck run --approve PATTERN`
and `deck send --approve PATTERN` name the tool calls it approves in advance. PATTERN is

- `KIND`: a tool call of that kind, one of ACP's tool kinds (`read`, `edit`, `delete`, `move`,
  `search`, `execute`, `think`, `fetch`, `other`; a call that gives no kind is `other`);
- `KIND:GLOB`: of that kind, and with a title GLOB matches (fnmatch, case-sensitive: `*` is any
  text, slashes and spaces included, `?` one character, `[seq]` one of seq);
- `*:GLOB`: of any kind, with a title GLOB matches (a call without a title has the title "").

A word that is not a kind is refused, never read as a title: a typo approves nothing rather
than something else. A request that matches is answered with its `allow_once` option, or its
`allow_always` option when it has no `allow_once`; one with neither is asked as usual. The kind
and the title are what the agent says of its tool call: deck cannot check them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from deck.acp.updates import TOOL_KINDS

ANY_KIND = "*"
ACP_KINDS = ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
#: The kinds a pattern may name: ACP's, those deck's tool parts keep (any other reads as `other`).
KINDS = tuple(k for k in ACP_KINDS if k in TOOL_KINDS)


@dataclass(frozen=True)
class Approval:
    """One `--approve` pattern: a kind (or any) and a title glob (or none)."""

    kind: str
    title: str | None
    pattern: str

    @classmethod
    def parse(cls, pattern: str) -> Approval:
        """`read`, `edit:Edit *.py`, `*:Run ls*` → an Approval; ValueError says what is wrong."""
        if not pattern:
            raise ValueError("empty pattern: give a tool kind, KIND:GLOB or *:GLOB")
        kind, colon, title = pattern.partition(":")
        if kind not in KINDS and not (colon and kind == ANY_KIND):
            raise ValueError(f"{kind} is not a tool kind ({', '.join(KINDS)}); a title needs KIND:GLOB or *:GLOB")
        if colon and not title:
            raise ValueError(f"no title glob after {kind}:")
        return cls(kind, title if colon else None, pattern)

    def matches(self, tool_call: dict[str, Any]) -> bool:
        """Whether `tool_call` (deck's tool part) is of this kind and has a title the glob matches."""
        if self.kind != ANY_KIND and tool_call.get("kind", "other") != self.kind:
            return False
        return self.title is None or fnmatchcase(str(tool_call.get("title") or ""), self.title)


def allow_option(options: list[dict[str, Any]]) -> str | None:
    """The option that approves once, else the one that approves always, else None."""
    for kind in ("allow_once", "allow_always"):
        for option in options:
            if option.get("kind") == kind:
                return str(option["optionId"])
    return None


def approval(approvals: Iterable[Approval], tool_call: dict[str, Any], options: list[dict[str, Any]]) -> str | None:
    """The option id approving `tool_call` when one of `approvals` names it; None: ask as usual."""
    if any(a.matches(tool_call) for a in approvals):
        return allow_option(options)
    return None
