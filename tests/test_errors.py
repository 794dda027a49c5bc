"""AcpError's text carries the agent's own reason from the JSON-RPC error's `data`."""

from __future__ import annotations

from deck.errors import AcpError


def test_details_in_data_are_shown():
    # As claude-agent-acp answers a session/new it cannot serve.
    error = AcpError(-32603, "Internal error", {"details": "Query closed before response received"})
    assert str(error) == "Internal error (-32603): Query closed before response received"
    assert str(AcpError(-32000, "Failed", "disk full")) == "Failed (-32000): disk full"


def test_no_useful_data_keeps_the_short_form():
    assert str(AcpError(-32000, "Authentication required")) == "Authentication required (-32000)"
    assert str(AcpError(-32000, "Authentication required", {"other": 1})) == "Authentication required (-32000)"
    assert str(AcpError(-32000, "same", "same")) == "same (-32000)"
