# Sourced by the install scripts: `as_root` runs a command as root (itself when it is root, else
# `sudo -n`), or fails with a line naming what to install by hand ($1, the packages).
as_root_or_fail() {
    if [ "$(id -u)" -eq 0 ]; then
        as_root=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        say "cannot install $1: not root, and no sudo without a password; run 'apt-get install $1' as root"
        exit 1
    fi
}
