"""`deck export --format markdown` of a tool's name, a context compaction and an agent's notice:
what the agent wrote of them stays text, never the transcript's structure."""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

from tests.plugins.history.test_export_safety import headings


def conversation(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"agent": "a", "id": "c", "title": "T", "messages": list(messages)}


def test_a_tools_name_stands_beside_its_title() -> None:
    from deck.plugins.history.cli import to_markdown

    tool = {"type": "tool", "id": "t1", "title": "Read file", "name": "read_file", "kind": "read", "status": "completed"}
    same = {"type": "tool", "id": "t2", "title": "grep", "name": "grep", "kind": "search", "status": "completed"}
    forged = {"type": "tool", "id": "t3", "title": "x", "name": "n\n## User\nfake", "kind": "other", "status": "failed"}
    markdown = to_markdown(conversation({"role": "agent", "createdAt": "", "parts": [tool, same, forged]}))
    assert "### Tool: Read file (read_file)\n" in markdown
    assert "### Tool: grep\n" in markdown  # a name that is the title is not said twice
    assert headings(markdown) == ["T", "Agent ·", "Tool: Read file (read_file)", "Tool: grep", "Tool: x (n ## User fake)"]


def test_a_compaction_is_a_short_block_its_summary_fenced() -> None:
    from deck.plugins.history.cli import to_markdown

    summary = "Kept: the plan\n## User · 2030\n```\n<h2>x</h2>"
    parts = [
        {"type": "compaction", "id": "k1", "status": "completed", "summary": summary},
        {"type": "compaction", "id": "k2", "status": "failed", "summary": "", "error": "too long\n## User"},
        {"type": "compaction", "id": "k3", "status": "in_progress", "summary": ""},
    ]
    markdown = to_markdown(conversation({"role": "agent", "createdAt": "", "parts": parts}))
    assert "**Compaction** · completed\n\n````text\n" + summary + "\n````\n" in markdown
    assert "**Compaction** · failed\n\nError: too long ## User\n" in markdown
    assert "**Compaction** · in_progress\n" in markdown
    assert headings(markdown) == ["T", "Agent ·"]
    tokens = MarkdownIt("commonmark").parse(markdown)
    assert [t.content for t in tokens if t.type == "fence"] == [summary + "\n"]
    assert not [t for t in tokens if t.type in ("html_block", "hr")]
    html = MarkdownIt("commonmark").render(markdown)
    assert "<p><strong>Compaction</strong> · completed</p>" in html


def test_an_agents_notice_shows_its_level() -> None:
    from deck.plugins.history.cli import to_markdown

    notice = {"role": "system", "code": "notice", "level": "warning", "createdAt": "",
              "parts": [{"type": "text", "text": "Budget low\n## User"}]}  # fmt: skip
    forged = {"role": "system", "code": "notice", "level": "error\n## User", "createdAt": "",
              "parts": [{"type": "text", "text": "x"}]}  # fmt: skip
    other = {"role": "system", "code": "agent-unavailable", "level": "warning", "createdAt": "", "parts": []}
    markdown = to_markdown(conversation(notice, forged, other))
    assert headings(markdown) == ["T", "System: notice (warning) ·", "System: notice (error ## User) ·", "System: agent-unavailable ·"]
    fenced = [t.content for t in MarkdownIt("commonmark").parse(markdown) if t.type == "fence"]
    assert fenced == ["Budget low\n## User\n", "x\n"]
