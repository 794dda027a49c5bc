"""The words every frontend shows for an agent's state, in English and French, and its cost.

The console's translations (`frontends/urwid/i18n.py`) take them in; line mode reads them here.
"""

from __future__ import annotations

WORDS: dict[str, dict[str, str]] = {
    "en": {
        "state_stopped": "stopped",
        "state_starting": "starting…",
        "state_ready": "ready",
        "state_busy": "busy",
        "state_error": "error",
        "outdated": "restart to apply changes",
    },
    "fr": {
        "state_stopped": "arrêté",
        "state_starting": "démarre…",
        "state_ready": "prêt",
        "state_busy": "occupé",
        "state_error": "erreur",
        "outdated": "à redémarrer",
    },
}


def word(key: str, language: str = "en") -> str:
    """`key` in `language` (English when it has none); a state's key is `state_` and its value."""
    return WORDS.get(language, WORDS["en"]).get(key) or WORDS["en"].get(key, key)


def state_word(state: str, language: str = "en") -> str:
    """The state (`"ready"`…) as a user reads it; a state this deck does not know, as it is."""
    return word(f"state_{state}", language) if f"state_{state}" in WORDS["en"] else state


def money(cost: object) -> str | None:
    """`0.75 USD` for a cost (`{amount, currency}`, as the deck checked it), None for anything else:
    the frontends then say the cost is unknown, never 0."""
    if not isinstance(cost, dict):
        return None
    amount, currency = cost.get("amount"), cost.get("currency")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < float("inf"):
        return None
    if not (isinstance(currency, str) and 1 <= len(currency) <= 8 and currency.isalpha()):
        return None
    return f"{amount:.2f} {currency.upper()}"


#: How deck's own notes start in an agent's log (`AgentService.Logs`): the other lines are its stderr.
DECK_LOG = "deck: "


def stderr_of(logs: list[str]) -> list[str]:
    """The lines of an agent's log that the agent wrote on stderr, deck's notes left out: what a
    hint to read the log, or a failure's last lines, is about."""
    return [line for line in logs if not line.startswith(DECK_LOG)]
