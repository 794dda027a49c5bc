"""The console's words in English and French; `Strings(language)["key"]` picks one."""

from __future__ import annotations

from typing import Any

EN: dict[str, str] = {
    "agents": "Agents",
    "you": "you",
    "system": "deck",
    "queued": "queued",
    "queued_count": "{n} queued",
    "thought": "thought",
    "thought_hidden": "thought ({n} lines, Ctrl-T to show)",
    "plan": "Plan",
    "diff_hidden": "diff {path} (+{added} −{removed}) · Ctrl-E to show",
    "diff_new": "new file",
    "stop_reason": "stopped: {reason}",
    "message_error": "error: {error}",
    "message_cancelled": "cancelled",
    "agent-restarted": "The agent restarted in a new session: it does not remember what came before.",
    "agent-unavailable": "The agent is unavailable: {error}",
    "input_title": "Message to {agent}",
    "input_title_queued": "Message to {agent} · {n} queued",
    "needs_input": "needs input",
    "talking": "an agent is talking to it ({who})",
    "announcements": "Announcements",
    "usage": "ctx",
    "tokens": "{n} tokens",
    "start": "▶ start",
    "stop": "■ stop",
    "restart": "↻ restart",
    "hints": "Enter send · Alt-Enter newline · Tab agent · F5 ▶ F6 ■ F7 ↻ · Esc cancel · PgUp PgDn · F2 logs F3 config · Ctrl-Q quit",
    "hints_perm": "{n} permission request(s) waiting · F4 answer",
    "ctrl_c": "Ctrl-C does not quit deck: press Ctrl-Q to quit",
    "quit_title": "Quit deck?",
    "quit_busy": "{n} agent(s) still working: {names}. Quit and stop them?",
    "yes": "y  yes, quit",
    "no": "n  no",
    "permission_title": "Permission requested by {agent}",
    "permission_count": "request {i} of {n}",
    "permission_keys": "1-9 choose · Tab next request · Esc later",
    "rejections": "{n} refusal(s) already this turn",
    "logs_title": "Logs of {agent} · F2 or Esc to go back",
    "no_logs": "(no log lines yet)",
    "config_title": "Config · F3 or Esc to go back",
    "config_path": "File: {path}",
    "config_builtin": "the built-in default config",
    "config_source": "Found by: {source}",
    "config_valid": "Valid",
    "config_invalid": "Invalid: the last valid config keeps running",
    "config_problems": "Problems",
    "config_warnings": "Warnings",
    "config_none": "(none)",
    "choose": "c  Choose another config file…",
    "recent": "Recent config files (Enter to open)",
    "no_recent": "(none yet)",
    "opened": "opened {path}",
    "picker_title": "Choose a config file · Enter open · Backspace up · Esc cancel",
    "picker_path": "Path: ",
    "unavailable": "not available: {what}",
    "cancelled_turn": "cancelled the turn of {agent}",
    "nothing_to_cancel": "{agent} is not answering",
}

FR: dict[str, str] = {
    "agents": "Agents",
    "you": "vous",
    "system": "deck",
    "queued": "en attente",
    "queued_count": "{n} en attente",
    "thought": "réflexion",
    "thought_hidden": "réflexion ({n} lignes, Ctrl-T pour afficher)",
    "plan": "Plan",
    "diff_hidden": "diff {path} (+{added} −{removed}) · Ctrl-E pour afficher",
    "diff_new": "nouveau fichier",
    "stop_reason": "arrêté : {reason}",
    "message_error": "erreur : {error}",
    "message_cancelled": "annulé",
    "agent-restarted": "L'agent a redémarré dans une nouvelle session : il a oublié ce qui précède.",
    "agent-unavailable": "L'agent est indisponible : {error}",
    "input_title": "Message à {agent}",
    "input_title_queued": "Message à {agent} · {n} en attente",
    "needs_input": "attend une réponse",
    "talking": "un agent lui parle ({who})",
    "announcements": "Annonces",
    "usage": "ctx",
    "tokens": "{n} jetons",
    "start": "▶ démarrer",
    "stop": "■ arrêter",
    "restart": "↻ redémarrer",
    "hints": "Entrée envoyer · Alt-Entrée ligne · Tab agent · F5 ▶ F6 ■ F7 ↻ · Échap annuler · F2 journaux F3 config · Ctrl-Q quitter",
    "hints_perm": "{n} demande(s) d'autorisation en attente · F4 répondre",
    "ctrl_c": "Ctrl-C ne quitte pas deck : Ctrl-Q pour quitter",
    "quit_title": "Quitter deck ?",
    "quit_busy": "{n} agent(s) encore au travail : {names}. Quitter et les arrêter ?",
    "yes": "o  oui, quitter",
    "no": "n  non",
    "permission_title": "Autorisation demandée par {agent}",
    "permission_count": "demande {i} sur {n}",
    "permission_keys": "1-9 choisir · Tab demande suivante · Échap plus tard",
    "rejections": "{n} refus déjà dans ce tour",
    "logs_title": "Journaux de {agent} · F2 ou Échap pour revenir",
    "no_logs": "(aucune ligne pour l'instant)",
    "config_title": "Configuration · F3 ou Échap pour revenir",
    "config_path": "Fichier : {path}",
    "config_builtin": "la configuration intégrée",
    "config_source": "Trouvée par : {source}",
    "config_valid": "Valide",
    "config_invalid": "Invalide : la dernière configuration valide reste active",
    "config_problems": "Problèmes",
    "config_warnings": "Avertissements",
    "config_none": "(aucun)",
    "choose": "c  Choisir un autre fichier de configuration…",
    "recent": "Fichiers récents (Entrée pour ouvrir)",
    "no_recent": "(aucun pour l'instant)",
    "opened": "{path} ouvert",
    "picker_title": "Choisir un fichier · Entrée ouvrir · Retour arrière remonter · Échap annuler",
    "picker_path": "Chemin : ",
    "unavailable": "indisponible : {what}",
    "cancelled_turn": "tour de {agent} annulé",
    "nothing_to_cancel": "{agent} ne répond pas",
}

STOP_REASONS = {
    "en": {"cancelled": "cancelled", "max_tokens": "token limit reached", "max_turn_requests": "too many requests",
           "refusal": "the agent refused"},
    "fr": {"cancelled": "annulé", "max_tokens": "limite de jetons atteinte", "max_turn_requests": "trop de requêtes",
           "refusal": "l'agent a refusé"},
}  # fmt: skip

TABLES = {"en": EN, "fr": FR}


class Strings:
    """The UI strings of one language; English for a key or language not translated."""

    def __init__(self, language: str = "en") -> None:
        self.language = language if language in TABLES else "en"
        self.table = TABLES[self.language]

    def __call__(self, key: str, **values: Any) -> str:
        text = self.table.get(key) or EN.get(key, key)
        return text.format(**values) if values else text

    def stop_reason(self, reason: str) -> str:
        return STOP_REASONS[self.language].get(reason, reason)
