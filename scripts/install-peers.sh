#!/usr/bin/env bash
# Install the third-party ACP agents used by tests/peers into .peers/ (pinned, see docs/peers.md).
# Idempotent: a peer already installed at its pinned version is kept. Any failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS="${DECK_PEERS_DIR:-$PWD/.peers}"
mkdir -p "$PEERS"

FAST_AGENT_VERSION=0.10.48
CHUK_ACP_VERSION=0.3.2
CLAUDE_ACP_VERSION=0.23.1
CODEX_ACP_VERSION=0.16.0

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

# chuk-acp runs on the project's own Python: the active venv's (as in .ci/run), not whatever python3 is.
PROJECT_PYTHON="${PYTHON:-$(command -v python || command -v python3 || true)}"
[ -n "$PROJECT_PYTHON" ] || { say "no python found (set \$PYTHON)"; exit 1; }
pip_pinned "$PEERS/chuk-acp" "$PROJECT_PYTHON" "chuk-acp==$CHUK_ACP_VERSION"
test -f "$PEERS/chuk-acp/share/chuk-acp/examples/echo_agent.py"

npm_pinned() {  # prefix-dir package version
    local prefix=$1 package=$2 version=$3
    local manifest="$prefix/node_modules/$package/package.json"
    if [ -f "$manifest" ] && grep -q "\"version\": \"$version\"" "$manifest" && [ -d "$prefix/node_modules/.bin" ]; then
        say "$package@$version already installed"; return 0
    fi
    say "installing $package@$version"
    mkdir -p "$prefix"
    # One retry: a registry hiccup must not fail the whole run.
    npm install --silent --no-save --prefix "$prefix" "$package@$version" \
        || { say "npm install of $package failed; retrying once"; sleep 5; npm install --no-save --prefix "$prefix" "$package@$version"; }
}

npm_pinned "$PEERS/claude-agent-acp" @zed-industries/claude-agent-acp "$CLAUDE_ACP_VERSION"
test -x "$PEERS/claude-agent-acp/node_modules/.bin/claude-agent-acp"

# codex-acp is a wrapper around a native binary shipped as a per-platform optional package.
npm_pinned "$PEERS/codex-acp" @zed-industries/codex-acp "$CODEX_ACP_VERSION"
test -x "$PEERS/codex-acp/node_modules/.bin/codex-acp"
codex_home=$(mktemp -d)  # it writes into ~/.codex even for --help: keep the user's HOME clean
HOME="$codex_home" CODEX_HOME="$codex_home" "$PEERS/codex-acp/node_modules/.bin/codex-acp" --help >/dev/null
rm -rf "$codex_home"
say "peers ready in $PEERS"
