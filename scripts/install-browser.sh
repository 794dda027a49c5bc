#!/usr/bin/env bash
# Install the headless browser the web page's tests drive (tests/frontends/web/test_web_page.py):
# the distribution's Chromium (Debian's `chromium` package), never a browser downloaded by a test
# tool. Playwright itself comes from PyPI with the test extra and drives this browser.
# Idempotent: a Chromium already on the PATH (or at $DECK_CHROMIUM) is kept. Any failure fails the script.
set -euo pipefail

say() { printf 'install-browser: %s\n' "$*" >&2; }

found=${DECK_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$found" ]; then
    . "$(dirname "$0")/as-root.sh"
    as_root_or_fail "chromium"
    say "installing Debian's chromium"
    export DEBIAN_FRONTEND=noninteractive
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
    found=$(command -v chromium)
fi
# The wrapper script of Debian's package prints a harmless shell warning on some machines: only the version counts.
say "using $found: $("$found" --version 2>/dev/null | head -1)"
