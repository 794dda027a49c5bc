"""The `deck` command (also `python -m deck`).

`deck attach [NAME] --frontend=jsonl` is a relay of bytes (`deck.relay`): it runs before the
command line's parser is even imported, and starts in about the time Python does. Every other
command line, that one with any other option included, is `deck.cli`'s.
"""

from __future__ import annotations

import sys

#: The spellings of the one option a relayed `deck attach` takes.
_JSONL = (["--frontend=jsonl"], ["--frontend", "jsonl"], ["-f", "jsonl"], ["-fjsonl"])


def relayed(args: list[str]) -> list[str] | None:
    """The NAME given (none, or one) when `args` is `attach [NAME]` with the jsonl frontend and
    nothing else; None for any other command line, an empty NAME included (the parser says why)."""
    if args[:1] != ["attach"]:
        return None
    rest = args[1:]
    for option in _JSONL:
        for at in range(len(rest)):
            if rest[at : at + len(option)] == option:
                names = rest[:at] + rest[at + len(option) :]
                if len(names) <= 1 and not any(n.startswith("-") or not n for n in names):
                    return names
                return None
    return None


def main() -> None:
    names = relayed(sys.argv[1:])
    if names is not None:
        from deck.remote.relay import relay
        from deck.remote.serverdir import DEFAULT_NAME

        sys.exit(relay(names[0] if names else DEFAULT_NAME))
    from deck.cli.commands import main as cli

    cli()


if __name__ == "__main__":
    main()
