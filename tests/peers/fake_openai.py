"""A small fake of OpenAI's Responses API on 127.0.0.1 (stdlib only), for codex-acp.

Codex (the Rust agent inside codex-acp) speaks only the Responses API (`wire_api = "chat"` is refused
by the codex it ships), one `POST {base_url}/responses` (`stream: true`) per model turn, answered
with server-sent events. `provider_args(url)` are the `-c` options that point codex here: a model
provider of its own, HTTP only (the built-in `openai` provider would try a websocket first).
What each turn answers is up to a `reply` function given the request body; `Reply` describes the
output items: text, function calls (`exec_command`, JSON arguments) and freeform custom tool
calls (`apply_patch`, the patch as plain text).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .fake_api import FakeApi, send_events

MODEL = "gpt-5.5"


def provider_args(url: str) -> list[str]:
    """codex-acp's `-c` options for a provider at `url`, keyed by the `openai-api-key` login (OPENAI_API_KEY)."""
    provider = {
        "name": "fake-openai", "base_url": f"{url}/v1", "wire_api": "responses", "requires_openai_auth": True,
        "supports_websockets": False, "request_max_retries": 0, "stream_max_retries": 0,
    }  # fmt: skip
    args = ["-c", 'model_provider="fake-openai"', "-c", f'model="{MODEL}"']
    for key, value in provider.items():
        args += ["-c", f"model_providers.fake-openai.{key}={json.dumps(value)}"]
    return args


@dataclass
class Reply:
    """One model turn: text and/or tool calls; `calls` are (tool name, arguments dict or freeform input)."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    input_tokens: int = 1200
    output_tokens: int = 40


_ids = itertools.count(1)


def output_items(reply: Reply) -> list[dict[str, Any]]:
    """The response's output items, as `response.output_item.done` carries them."""
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append({"type": "message", "id": f"msg_fake_{next(_ids)}", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})  # fmt: skip
    for name, arguments in reply.calls:
        call_id = f"call_fake_{next(_ids)}"
        if isinstance(arguments, str):  # a freeform (custom) tool: its input is plain text
            items.append({"type": "custom_tool_call", "id": f"ctc_fake_{next(_ids)}", "call_id": call_id,
                          "name": name, "input": arguments, "status": "completed"})  # fmt: skip
        else:
            items.append({"type": "function_call", "id": f"fc_fake_{next(_ids)}", "call_id": call_id,
                          "name": name, "arguments": json.dumps(arguments), "status": "completed"})  # fmt: skip
    return items


def sse(reply: Reply) -> bytes:
    """The event stream of one streamed Responses API response."""
    response_id = f"resp_fake_{next(_ids)}"
    response = {"id": response_id, "object": "response", "model": MODEL, "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
    for index, item in enumerate(output_items(reply)):
        if item["type"] == "message":  # text streams word by word, then the whole item
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
            for n, word in enumerate(reply.text.split(" ")):
                events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                               "content_index": 0, "delta": word if n == 0 else " " + word})  # fmt: skip
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    usage = {"input_tokens": reply.input_tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": reply.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": reply.input_tokens + reply.output_tokens}  # fmt: skip
    events.append({"type": "response.completed", "response": {**response, "status": "completed", "usage": usage}})
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the newest user message of a request's `input`."""
    for item in reversed(body.get("input") or []):
        if item.get("type") == "message" and item.get("role") == "user":
            return "\n".join(c.get("text", "") for c in item.get("content") or [] if c.get("type") == "input_text")
    return ""


def tool_outputs(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results a request sends back (`function_call_output`, `custom_tool_call_output`)."""
    return [i for i in body.get("input") or [] if i.get("type") in ("function_call_output", "custom_tool_call_output")]


class FakeOpenAI(FakeApi):
    """The server. `turns` records every `POST …/responses` body; `other_paths` whatever else came."""

    name = "fake-openai"

    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        super().__init__()
        self.reply = reply

    def is_turn(self, path: str) -> bool:
        return path.rstrip("/").endswith("/responses")

    def turn(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        self.record(body)
        send_events(handler, sse(self.reply(body)))
