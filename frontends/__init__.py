"""deck's built-in frontends: jsonl (a bridge for programs), line (rich), urwid (console)."""
