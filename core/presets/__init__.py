"""Config snippets for real ACP agents, one TOML file each (installed as `deck.presets`).

`deck config init` comments them into a new config; copy one into yours to use it.
"""
