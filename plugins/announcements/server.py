"""The `deck` MCP server (stdio) an agent starts from its `session/new`: `ask_agent` and `list_agents`.

Run as `python -m deck.plugins.announcements.server` with the socket, agent name and
token of `bridge.py` in its environment. It holds no state: each tool call is one
request to the deck over the socket, and a cancelled tool call closes it.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from deck.plugins.announcements import bridge

server = MCPServer(
    "deck",
    instructions=(
        "Other coding agents run beside you in deck. list_agents names them; ask_agent puts a question "
        "to one and returns its final answer once it has finished working."
    ),
    log_level="WARNING",
)


@server.tool(
    title="Ask another agent",
    description=(
        "Ask the agent named `agent` a question and wait for its final answer. It works on it in a "
        "session of its own (its other work is untouched) and may take a while; only its last message "
        "comes back. list_agents gives the names."
    ),
)
async def ask_agent(agent: str, question: str) -> CallToolResult:
    return _result(await bridge.request("ask_agent", {"agent": agent, "question": question}))


@server.tool(
    title="List the agents",
    description="The agents deck runs, as JSON: name, title, description, state; `you` marks yourself.",
)
async def list_agents() -> CallToolResult:
    answer = await bridge.request("list_agents", {})
    if "result" in answer:
        answer["result"] = json.dumps(answer["result"], ensure_ascii=False)
    return _result(answer)


def _result(answer: dict) -> CallToolResult:
    """deck's answer as the tool's result: the text, or the error's text with isError (no prefix added)."""
    if "error" in answer:
        return CallToolResult(content=[TextContent(type="text", text=str(answer["error"]))], is_error=True)
    return CallToolResult(content=[TextContent(type="text", text=str(answer.get("result", "")))])


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
