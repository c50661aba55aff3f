#!/usr/bin/env sh
# Installs Chromium from Debian's packages when it is missing: the report's browser test
# renders `fa4-gen report`'s page in it, headless. Nothing to do where /usr/bin/chromium
# is already there; elsewhere it needs apt-get and root (or sudo).
set -eu
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
fail() {
    echo "error: chromium is not installed and could not be installed: $1" >&2
    echo "  install it with \`apt-get install chromium\` (Debian), or the report's browser test fails under FA4GEN_REQUIRE_BROWSER=1 and skips otherwise" >&2
    exit 1
}
command -v apt-get >/dev/null 2>&1 || fail "no apt-get on this machine"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=
elif command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
else
    fail "not root and no sudo"
fi
echo "installing chromium from Debian's packages (apt-get)" >&2
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
apt() {
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$LOG" 2>&1 || {
        cat "$LOG" >&2
        fail "apt-get $1 failed (its output above)"
    }
}
apt update -qq
apt install -y -qq --no-install-recommends chromium
[ -x /usr/bin/chromium ] || fail "the package left no /usr/bin/chromium"
