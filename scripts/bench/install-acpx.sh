#!/usr/bin/env bash
# acpx 0.19.1 (a Node ACP command-line client), for the `send` benchmark beside `deck send`.
# Installed once into $DECK_BENCH_ACPX (default $TMPDIR/deck-bench-acpx); prints the acpx path.
set -euo pipefail
dir="${DECK_BENCH_ACPX:-${TMPDIR:-/tmp}/deck-bench-acpx}"
if [ ! -x "$dir/node_modules/.bin/acpx" ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm install --silent --no-audit --no-fund acpx@0.19.1 >&2)
fi
echo "$dir/node_modules/.bin/acpx"
