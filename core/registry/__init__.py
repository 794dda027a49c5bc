"""Agents from the ACP registry: the catalogue read and cached (`catalog.py`, `source.py`), an
agent's pinned command or its binary downloaded and unpacked safely (`install.py`, `download.py`,
`unpack.py`, `host.py` for a host over ssh), and the config file edited in place (`edit.py`);
`origin.py` says where a config's entry came from. `deck agents search|add|update|remove`
(`deck.cli.registry`) is its command line."""
