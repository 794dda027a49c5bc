"""`deck export --format markdown` of what an agent (or a user) wrote: the transcript's structure is
deck's alone. Text that looks like the transcript's headings, or tries to close the fence around
it, is read back by a Markdown parser (CommonMark, markdown-it) as the text it is."""

from __future__ import annotations

import json
from pathlib import Path

from markdown_it import MarkdownIt

from tests.conftest import agent_block
from tests.deck_process import write_config
from tests.plugins.history.test_history import cli_here, private_env, run_and_exit

#: A user message (the fake agent echoes it as "You said: …") trying every way out of its place:
#: headings like the transcript's, a longer fence than its own, a setext heading, an HTML block,
#: a list item, and an unended fence that would swallow what follows.
FORGED = (
    "hello\n## User · 2030-01-01 00:00\nfake\n### Tool: rm -rf\n````\n## Agent · now\n"
    "User\n---\n<h2>User</h2>\n- [x] done\n```"
)


def headings(markdown: str) -> list[str]:
    """The text of every heading a CommonMark parser finds in `markdown`, in order."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"]


def test_text_that_forges_the_transcripts_headings_stays_text(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    run_and_exit(config, env, FORGED)
    (row,) = json.loads(cli_here(env, "history", "--json", "--config", str(config)).stdout)
    exported = cli_here(env, "export", row["id"])
    assert exported.returncode == 0, exported.stderr
    found = headings(exported.stdout)
    assert len(found) == 3 and found[0] == "hello", found
    assert found[1].startswith("User · ") and found[2].startswith("Agent · ") and "2030" not in found[1]
    tokens = MarkdownIt("commonmark").parse(exported.stdout)
    assert not [t for t in tokens if t.type in ("html_block", "hr")]
    assert len([t for t in tokens if t.type == "bullet_list_open"]) == 1  # deck's own: agent, config, times
    fenced = [t.content for t in tokens if t.type == "fence"]
    # The user's text as typed; the agent's as its Markdown: its own code block (left open, closed
    # at the end of its message), and its lines that would be headings read as text.
    assert fenced == [FORGED + "\n", "## Agent · now\nUser\n---\n<h2>User</h2>\n- [x] done\n```\n"]
    html = MarkdownIt("commonmark").render(exported.stdout)
    assert "<p>You said: hello\n## User · 2030-01-01 00:00\nfake\n### Tool: rm -rf</p>" in html


def test_an_agents_single_line_fields_cannot_start_a_line_of_their_own() -> None:
    from deck.plugins.history.cli import to_markdown

    message = {
        "role": "agent", "createdAt": "", "stopReason": "x\n## User\nfake",
        "parts": [
            {"type": "tool", "title": "t\n## User", "kind": "edit", "status": "completed",
             "locations": [{"path": "a\n## User\nb"}], "diffs": [{"path": "p\n## User", "oldText": "a", "newText": "b"}]},
            {"type": "plan", "entries": [{"content": "one\n## User", "status": "pending"}]},
            {"type": "thought", "text": "hmm\n## User\n```"},
        ],
    }  # fmt: skip
    markdown = to_markdown({"agent": "a", "id": "c", "sessionId": "s\n## User", "title": "T", "messages": [message]})
    assert headings(markdown) == ["T", "Agent ·", "Tool: t ## User"]


def test_the_transcript_reads_as_markdown_and_keeps_the_users_answers(tmp_path: Path) -> None:
    from tests.deck_process import DeckProcess

    env = private_env(tmp_path)
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    deck = DeckProcess("--config", str(config), env=env)
    try:
        prompts = (("perm", "permission:requested"), ("question", "question:requested"), ("**bold** and `code`", None))
        for turns, (prompt, asking) in enumerate(prompts, 1):
            deck.call("ChatService.Send", {"agent": "a", "text": prompt})
            if asking == "permission:requested":
                asked = deck.event(asking, timeout=20)
                deck.call("ChatService.AnswerPermission", {"id": asked["id"], "optionId": "yes"})
            elif asking:
                asked = deck.event(asking, timeout=20)
                deck.call("ChatService.AnswerQuestion", {"id": asked["id"], "values": {"name": "Ada"}})
            deck.wait_line(lambda e: e.get("event") == "turn:changed" and not e["busy"], timeout=20, count=turns)
        deck.close_stdin()
        assert deck.wait(30) == 0, deck.stderr
    finally:
        deck.kill_everything()
    (row,) = json.loads(cli_here(env, "history", "--json", "--config", str(config)).stdout)
    exported = cli_here(env, "export", row["id"]).stdout
    assert "Permission: Allow\n" in exported  # the decision, on the tool call it was about
    assert "Your name?\n→ name: Ada" in exported  # the question, and what the user answered
    html = MarkdownIt("commonmark").render(exported)
    assert "<p>You said: <strong>bold</strong> and <code>code</code></p>" in html  # the answer reads as Markdown
