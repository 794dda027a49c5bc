#!/usr/bin/env bash
# Install the third-party ACP clients that drive `deck acp` in tests (tests/core/remote/test_acp_clients.py)
# into $DECK_PEERS_DIR (default .peers/), pinned. Idempotent; any failure fails the script.
# (The ACP Python SDK, `agent-client-protocol`, comes with the test extra of pyproject.toml.)
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS="${DECK_PEERS_DIR:-$PWD/.peers}"
ACPX_VERSION=0.19.1

say() { printf 'install-acp-clients: %s\n' "$*" >&2; }

prefix="$PEERS/acpx"
manifest="$prefix/node_modules/acpx/package.json"
if [ -f "$manifest" ] && grep -q "\"version\": \"$ACPX_VERSION\"" "$manifest"; then
    say "acpx@$ACPX_VERSION already installed"
else
    say "installing acpx@$ACPX_VERSION"
    mkdir -p "$prefix"
    npm install --silent --no-save --no-audit --no-fund --prefix "$prefix" "acpx@$ACPX_VERSION" \
        || { say "npm install of acpx failed; retrying once"; sleep 5; npm install --no-save --no-audit --no-fund --prefix "$prefix" "acpx@$ACPX_VERSION"; }
fi
test -x "$prefix/node_modules/.bin/acpx"
"$prefix/node_modules/.bin/acpx" --version >/dev/null
say "acpx ready in $prefix"
