"""`deck.diffs`: a tool call's diff in time bounded by its size, whatever text an agent sends.

The hostile diff: 100 distinct lines, each repeated just under difflib's "popular" cut (a line
found more than 1% of n + 1 times, n ≥ 200, is set aside), shuffled, 125 KB a side: difflib takes
seconds on it. Here it is found too large to compare at once, a normal diff is shown as difflib
shows it, and an edit of a big file compares only the lines between the common ones. The line
frontend, the console and `deck export` (tests in their own files) show it through this module,
each within half a second; `diff_agent` is the real agent those tests run to send it.
"""

from __future__ import annotations

import difflib
import functools
import random
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from deck import diffs
from deck.testing import agent_table

#: Lines of each side of the hostile diff: 100 distinct lines of 3 bytes, 416 of each.
HOSTILE_LINES = 41_600
#: What the frontends and the export show of it.
TOO_LARGE = f"changed: {HOSTILE_LINES} → {HOSTILE_LINES} lines, too large to compare"
#: The file the diff agent's tool call rewrites.
DIFF_PATH = "/w/big.txt"

#: An ACP agent (stdlib only): each prompt is answered by a tool call "Rewrite big.txt" whose diff
#: turns the text of the file argv[1] into that of argv[2], then argv[3] updates of it, each with
#: the diff again, then one that completes it, then the chunk "after".
DIFF_AGENT = """
import json, sys
old, new, updates = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3])
diff = [{"type": "diff", "path": "%s", "oldText": old, "newText": new}]

def send(message):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\\n")
    sys.stdout.flush()

def update(sid, body):
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})

for raw in sys.stdin:
    message = json.loads(raw)
    method, rid = message.get("method"), message.get("id")
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        sid = message["params"]["sessionId"]
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Rewrite big.txt", "kind": "edit",
                     "status": "pending", "content": diff})
        for _ in range(updates):
            update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress", "content": diff})
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed", "content": diff})
        update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "after"}})
        send({"id": rid, "result": {"stopReason": "end_turn"}})
    elif rid is not None:
        send({"id": rid, "result": {}})
""" % DIFF_PATH


@functools.cache
def hostile() -> tuple[str, str]:
    """The hostile diff's old and new text: the same lines, shuffled twice."""
    lines = [f"{i:02d}" for i in range(100) for _ in range(HOSTILE_LINES // 100)]
    old, new = lines[:], lines[:]
    random.Random(1).shuffle(old)
    random.Random(2).shuffle(new)
    return "\n".join(old) + "\n", "\n".join(new) + "\n"


def diff_agent(folder: Path, name: str = "a", updates: int = 3, texts: tuple[str, str] | None = None) -> str:
    """The `[agents.NAME]` table of the diff agent, its texts (the hostile diff by default) in `folder`."""
    old, new = texts or hostile()
    (folder / "old.txt").write_text(old)
    (folder / "new.txt").write_text(new)
    (folder / "diff_agent.py").write_text(DIFF_AGENT)
    command = [sys.executable, str(folder / "diff_agent.py"), str(folder / "old.txt"), str(folder / "new.txt"), str(updates)]
    return agent_table(name, command)


def timed(call, *args, **kwargs):
    """`call(*args)` and the seconds it took."""
    start = time.perf_counter()
    result = call(*args, **kwargs)
    return result, time.perf_counter() - start


def forget_comparisons() -> None:
    """Nothing kept from earlier comparisons in this process: the next ones are made afresh."""
    diffs._kept.clear()


@pytest.fixture(autouse=True)
def nothing_kept():
    """Each test compares afresh: nothing kept from another."""
    forget_comparisons()
    yield
    forget_comparisons()


def rebuilt(comparison: diffs.Comparison, old: list[str], new: list[str]) -> list[str]:
    """`new` made from `old` by the comparison's opcodes (which must cover `old`, in order)."""
    assert comparison.opcodes is not None
    out: list[str] = []
    at = 0
    for tag, i1, i2, j1, j2 in comparison.opcodes:
        assert i1 == at and i1 <= i2 and j1 <= j2
        at = i2
        if tag == "equal":
            assert old[i1:i2] == new[j1:j2]
        out += new[j1:j2]
    assert at == len(old)
    return out


# -- the hostile diff --------------------------------------------------------------------------------


def test_the_hostile_diff_is_what_stalls_difflib():
    old, new = hostile()
    assert 124_000 <= len(old) == len(new) <= 125_000
    lines = old.splitlines()
    assert len(lines) == HOSTILE_LINES >= 200
    counts = Counter(lines)
    assert len(counts) == 100 and max(counts.values()) <= len(lines) // 100 + 1  # none is "popular"
    assert Counter(new.splitlines()) == counts and old != new


def test_the_hostile_diff_is_found_too_large_to_compare_at_once():
    old, new = hostile()
    comparison, took = timed(diffs.compare, old, new)
    assert took < 0.5
    assert not comparison.compared and (comparison.old_lines, comparison.new_lines) == (HOSTILE_LINES, HOSTILE_LINES)
    assert diffs.summary(old, new) == TOO_LARGE
    lines, took = timed(diffs.unified_lines, old, new, "a/big.txt", "b/big.txt")
    assert took < 0.5 and lines == ["--- a/big.txt", "+++ b/big.txt", TOO_LARGE]


def test_a_diff_compared_once_is_not_compared_again():
    old, new = hostile()
    first = diffs.compare(old, new)
    again, took = timed(diffs.compare, old, new)
    assert again is first and took < 0.01
    assert diffs.compare(old[:-1] + "\n", new[:-1] + "\n") is first  # the same texts, in other strings


def test_the_comparisons_kept_are_bounded():
    for i in range(diffs.CACHE_ENTRIES + 10):
        diffs.compare(f"a\n{i}\n", f"b\n{i}\n")
    assert len(diffs._kept) == diffs.CACHE_ENTRIES
    assert ("a\n0\n", "b\n0\n") not in diffs._kept and ("a\n73\n", "b\n73\n") in diffs._kept


def test_text_over_the_size_cap_is_counted_not_compared():
    old = "x\n" * (diffs.MAX_CHARS // 2)
    comparison, took = timed(diffs.compare, old, old + "y")
    assert took < 0.5 and not comparison.compared
    assert comparison.summary() == f"changed: {diffs.MAX_CHARS // 2} → {diffs.MAX_CHARS // 2 + 1} lines, too large to compare"


@pytest.mark.parametrize("distinct", [1, 50, 100])
def test_difflibs_slowest_shapes_stop_within_the_work_allowed(distinct):
    """Each old line found again two lines further on the new side: difflib takes a second on
    1,000 lines (its work grows with the cube of the lines); below 100 lines nothing is popular."""
    lines = 99 if distinct == 1 else 1000
    old = [f"v{i % distinct}" for i in range(lines)]
    new = [line for i, v in enumerate(old) for line in (v, f"y{i}")]
    comparison, took = timed(diffs.compare, "\n".join(old), "\n".join(new))
    assert took < 0.5 and not comparison.compared
    smaller = old[:40]
    comparison = diffs.compare("\n".join(smaller), "\n".join(new[:80]))
    assert comparison.compared and rebuilt(comparison, smaller, new[:80]) == new[:80]


# -- normal diffs --------------------------------------------------------------------------------------


def test_a_small_diff_is_shown_exactly():
    old = "def greet(name):\n    print('hi', name)\n\n\ndef main():\n    greet('you')\n"
    new = "def greet(name: str) -> None:\n    print('hi', name)\n\n\ndef main():\n    greet('you')\n    greet('me')\n"
    expected = [
        "--- a/greet.py",
        "+++ b/greet.py",
        "@@ -1,6 +1,7 @@",
        "-def greet(name):",
        "+def greet(name: str) -> None:",
        "     print('hi', name)",
        " ",
        " ",
        " def main():",
        "     greet('you')",
        "+    greet('me')",
    ]
    assert diffs.unified_lines(old, new, "a/greet.py", "b/greet.py") == expected
    assert expected == list(difflib.unified_diff(old.splitlines(), new.splitlines(), "a/greet.py", "b/greet.py", lineterm=""))
    assert diffs.summary(old, new) == "+2 -1"
    assert diffs.unified_lines(old, new, context=0)[2:] == ["@@ -1 +1 @@", "-def greet(name):", "+def greet(name: str) -> None:",
                                                            "@@ -6,0 +7 @@", "+    greet('me')"]  # fmt: skip
    assert diffs.unified_lines(old, old) == [] and diffs.summary(old, old) == "+0 -0"
    assert diffs.unified_lines("", "one\ntwo\n", "/dev/null", "new.py") == ["--- /dev/null", "+++ new.py", "@@ -0,0 +1,2 @@", "+one", "+two"]


def test_an_edit_of_a_big_file_compares_only_the_lines_between_the_common_ones():
    old, _new = hostile()  # difflib would take seconds to compare it with anything
    lines = old.splitlines()
    edited = lines[:20_000] + ["changed"] + lines[20_001:]
    comparison, took = timed(diffs.compare, old, "\n".join(edited) + "\n")
    assert took < 0.5 and (comparison.added, comparison.removed) == (1, 1)
    shown = diffs.unified_lines(old, "\n".join(edited) + "\n", "a", "b", context=2)
    assert shown == ["--- a", "+++ b", "@@ -19999,5 +19999,5 @@", *(" " + line for line in lines[19_998:20_000]),
                     "-" + lines[20_000], "+changed", *(" " + line for line in lines[20_001:20_003])]  # fmt: skip


def test_random_edits_are_diffs_that_turn_the_old_text_into_the_new():
    rnd = random.Random(3)
    for _ in range(500):
        old = [str(rnd.randrange(rnd.choice([2, 5, 1000]))) for _ in range(rnd.randrange(40))]
        new = list(old)
        for _ in range(rnd.randrange(6)):
            where = rnd.randrange(len(new) + 1)
            new[where:where + rnd.randrange(3)] = [str(rnd.randrange(9)) for _ in range(rnd.randrange(3))]
        comparison = diffs.compare("\n".join(old), "\n".join(new))
        assert rebuilt(comparison, old, new) == new
        shown = diffs.unified_lines("\n".join(old), "\n".join(new), context=rnd.randrange(4))
        assert sum(line.startswith("+") for line in shown[2:]) == comparison.added
        assert sum(line.startswith("-") for line in shown[2:]) == comparison.removed


def test_the_slowest_comparison_allowed_ends_as_the_refused_ones_do():
    """The largest shapes of difflib's worst kinds that are still compared (others are refused) end
    within the same bound as a refusal: MAX_WORK, not the machine, bounds them (about 20 ms here; a
    busy machine's figure is no failure, a hang is)."""
    shapes = []
    for lines in (200, 260, 320):  # the slowest kind: each old line two places further on the new side
        old = [f"v{i % 100}" for i in range(lines)]
        shapes.append((old, [line for i, v in enumerate(old) for line in (v, f"y{i}")]))
    rnd = random.Random(4)
    shuffled = [f"{i:02d}" for i in range(100) for _ in range(15)]
    shapes.append((rnd.sample(shuffled, len(shuffled)), rnd.sample(shuffled, len(shuffled))))
    unique = [f"line {i} of a long file" for i in range(diffs.MAX_LINES // 2 - 1)]
    shapes.append((unique, ["first", *unique[1:-1], "last"]))
    slowest = 0.0
    for old, new in shapes:
        comparison, took = min((fresh(diffs.compare, "\n".join(old), "\n".join(new)) for _ in range(5)), key=lambda r: r[1])
        if comparison.compared:
            slowest = max(slowest, took)
    assert 0 < slowest < 0.5


def fresh(call, *args):
    """`timed(call, *args)` with nothing kept from before."""
    forget_comparisons()
    return timed(call, *args)
