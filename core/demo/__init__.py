"""deck's demo ACP agent (stdlib only): `python -m deck.demo`."""
