"""Validate every ACP message deck sends against the ACP v1 JSON Schema (tests/acp/schema.json).

The schema's `Client` envelope alone would accept a `session/prompt` whose params
happen to match another request, so each message is also checked against the
definition its method names: a request or notification by its own method, a
response by the method of the agent request it answers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(os.environ.get("DECK_ACP_SCHEMA", Path(__file__).resolve().parents[1] / "acp" / "schema.json"))

#: What deck may send to an agent: method → the schema definition of its params.
CLIENT_METHODS = {
    "initialize": "InitializeRequest",
    "authenticate": "AuthenticateRequest",
    "logout": "LogoutRequest",
    "session/new": "NewSessionRequest",
    "session/load": "LoadSessionRequest",
    "session/resume": "ResumeSessionRequest",
    "session/close": "CloseSessionRequest",
    "session/list": "ListSessionsRequest",
    "session/delete": "DeleteSessionRequest",
    "session/prompt": "PromptRequest",
    "session/set_mode": "SetSessionModeRequest",
    "session/set_config_option": "SetSessionConfigOptionRequest",
    "session/cancel": "CancelNotification",
    "$/cancel_request": "CancelRequestNotification",
}
#: What deck answers to an agent's request: method → the schema definition of its result.
CLIENT_RESULTS = {
    "session/request_permission": "RequestPermissionResponse",
    "fs/read_text_file": "ReadTextFileResponse",
    "fs/write_text_file": "WriteTextFileResponse",
    "elicitation/create": "CreateElicitationResponse",
    "terminal/create": "CreateTerminalResponse",
    "terminal/output": "TerminalOutputResponse",
    "terminal/release": "ReleaseTerminalResponse",
    "terminal/wait_for_exit": "WaitForTerminalExitResponse",
    "terminal/kill": "KillTerminalResponse",
}


class AcpSchema:
    """The loaded schema with one validator per definition."""

    def __init__(self, path: Path = SCHEMA_PATH) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"ACP schema not found at {path} (set DECK_ACP_SCHEMA)")
        self.root = json.loads(path.read_text())
        self._validators: dict[str, jsonschema.Validator] = {}
        client = next(s for s in self.root["anyOf"] if s.get("title") == "Client")
        self.client_envelope = self._validator({**client, "$defs": self.root["$defs"]})

    def _validator(self, schema: dict[str, Any]) -> jsonschema.Validator:
        cls = jsonschema.validators.validator_for(self.root)
        return cls(schema)

    def definition(self, name: str) -> jsonschema.Validator:
        if name not in self._validators:
            if name not in self.root["$defs"]:
                raise KeyError(f"no definition {name!r} in the ACP schema")
            self._validators[name] = self._validator({"$ref": f"#/$defs/{name}", "$defs": self.root["$defs"]})
        return self._validators[name]

    def errors(self, validator: jsonschema.Validator, instance: Any) -> list[str]:
        return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(instance)]


class OutgoingChecker:
    """Follows one agent's exchange: remembers the agent's requests, checks what deck sends."""

    def __init__(self, schema: AcpSchema) -> None:
        self.schema = schema
        self.asked: dict[str, str] = {}  # the agent's request id (as JSON) → method
        self.checked: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def seen(self, direction: str, message: dict[str, Any]) -> None:
        if direction == "in":
            if "method" in message and "id" in message:
                self.asked[json.dumps(message["id"])] = message["method"]
            return
        self.checked.append(message)
        for problem in self.check(message):
            self.problems.append(f"{problem}\n    in {json.dumps(message)[:400]}")

    def check(self, message: dict[str, Any]) -> list[str]:
        problems = [f"envelope: {e}" for e in self.schema.errors(self.schema.client_envelope, message)]
        if message.get("jsonrpc") != "2.0":
            problems.append('jsonrpc must be "2.0"')
        if "method" in message:
            definition = CLIENT_METHODS.get(message["method"])
            if definition is None:
                return [*problems, f"deck sent {message['method']!r}, which is not a client→agent method of ACP v1"]
            return problems + [f"{definition}: {e}" for e in self.schema.errors(self.schema.definition(definition), message.get("params"))]
        method = self.asked.get(json.dumps(message.get("id")))
        if method is None:
            return [*problems, f"a response to id {message.get('id')!r}, which the agent never sent"]
        if "error" in message:
            return problems + [f"Error: {e}" for e in self.schema.errors(self.schema.definition("Error"), message["error"])]
        definition = CLIENT_RESULTS.get(method)
        if definition is None:
            return [*problems, f"deck answered {method!r} with a result, but that is not an agent→client request"]
        return problems + [f"{definition}: {e}" for e in self.schema.errors(self.schema.definition(definition), message.get("result"))]
