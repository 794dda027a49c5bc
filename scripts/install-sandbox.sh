#!/usr/bin/env bash
# Install bubblewrap (bwrap), which sandboxed agents run under (`sandbox = true`; tests/core/agent/test_sandbox.py),
# as the distribution packages it, and check that it can make its namespaces here. Idempotent: what is
# installed already is kept. Any failure fails the script.
set -euo pipefail

say() { printf 'install-sandbox: %s\n' "$*" >&2; }

if ! command -v bwrap >/dev/null; then
    . "$(dirname "$0")/as-root.sh"
    as_root_or_fail "bubblewrap"
    say "installing Debian's bubblewrap"
    export DEBIAN_FRONTEND=noninteractive
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
fi
if ! bwrap --die-with-parent --unshare-pid --cap-drop ALL --ro-bind / / --proc /proc true; then
    say "bwrap cannot make its namespaces on this machine: allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)"
    exit 1
fi
say "using $(bwrap --version)"
