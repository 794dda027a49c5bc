#!/usr/bin/env bash
# Install the OpenSSH client and server the remote-agent tests use (tests/core/agent/test_ssh.py): the
# tests start their own sshd on 127.0.0.1, with keys made per run; nothing of the machine's own sshd is
# used or changed. Idempotent: what is installed already is kept. Any failure fails the script.
set -euo pipefail

say() { printf 'install-sshd: %s\n' "$*" >&2; }

if command -v ssh >/dev/null && [ -x /usr/sbin/sshd ] && command -v ssh-keygen >/dev/null; then
    say "using $(ssh -V 2>&1)"
    exit 0
fi
. "$(dirname "$0")/as-root.sh"
as_root_or_fail "openssh-server openssh-client"
say "installing Debian's openssh-server and openssh-client (its service is not started)"
export DEBIAN_FRONTEND=noninteractive
# The package would start the machine's own sshd on port 22: policy-rc.d (exit 101) forbids it.
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod +x "$policy"
    made_policy=1
fi
trap '[ -n "$made_policy" ] && "${as_root[@]}" rm -f "$policy"' EXIT
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null
say "using $(ssh -V 2>&1)"
