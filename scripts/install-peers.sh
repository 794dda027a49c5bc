#!/usr/bin/env bash
# Install the third-party ACP agents used by tests/peers into .peers/ (pinned, see PEERS.md).
# Idempotent: a peer already installed at its pinned version is kept. Any failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS="${DECK_PEERS_DIR:-$PWD/.peers}"
mkdir -p "$PEERS"

FAST_AGENT_VERSION=0.10.48
CHUK_ACP_VERSION=0.3.2
CLAUDE_ACP_VERSION=0.23.1

say() { printf 'install-peers: %s\n' "$*" >&2; }

# fast-agent needs Python >= 3.12 (on 3.11 pip silently picks an ancient, broken release).
# pyenv shims only answer for the selected version, so its installed versions are tried too.
modern_python() {
    local root
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    for py in "${DECK_PEERS_PYTHON:-}" python3.13 python3.12 \
        "$root"/versions/3.13*/bin/python3 "$root"/versions/3.12*/bin/python3; do
        [ -n "$py" ] || continue
        if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
            echo "$py"; return 0
        fi
    done
    say "no Python >= 3.12 found (tried \$DECK_PEERS_PYTHON, python3.13, python3.12, pyenv versions)"
    return 1
}

pip_pinned() {  # venv-dir python package==version
    local venv=$1 python=$2 spec=$3
    local shown=""  # not piped into grep -q: with pipefail, pip's SIGPIPE would read as "not installed"
    [ -x "$venv/bin/python" ] && shown=$("$venv/bin/python" -m pip show "${spec%%==*}" 2>/dev/null || true)
    if grep -qx "Version: ${spec##*==}" <<<"$shown"; then
        say "$spec already installed"; return 0
    fi
    say "installing $spec with $python"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "$spec"
}

MODERN_PYTHON=$(modern_python)
pip_pinned "$PEERS/fast-agent" "$MODERN_PYTHON" "fast-agent-mcp==$FAST_AGENT_VERSION"
"$PEERS/fast-agent/bin/fast-agent" --help >/dev/null

pip_pinned "$PEERS/chuk-acp" python3 "chuk-acp==$CHUK_ACP_VERSION"
test -f "$PEERS/chuk-acp/share/chuk-acp/examples/echo_agent.py"

CLAUDE="$PEERS/claude-agent-acp"
if [ -f "$CLAUDE/node_modules/@zed-industries/claude-agent-acp/package.json" ] \
    && grep -q "\"version\": \"$CLAUDE_ACP_VERSION\"" \
        "$CLAUDE/node_modules/@zed-industries/claude-agent-acp/package.json"; then
    say "@zed-industries/claude-agent-acp@$CLAUDE_ACP_VERSION already installed"
else
    say "installing @zed-industries/claude-agent-acp@$CLAUDE_ACP_VERSION"
    mkdir -p "$CLAUDE"
    npm install --silent --no-save --prefix "$CLAUDE" "@zed-industries/claude-agent-acp@$CLAUDE_ACP_VERSION"
fi
test -x "$CLAUDE/node_modules/.bin/claude-agent-acp"
say "peers ready in $PEERS"
