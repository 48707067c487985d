#!/bin/sh
# Install the test suite's Debian packages and leave the host as it was
# found: no Recommends, and no service of a package installed here enabled
# or started.
#
#   tools/install-test-deps.sh [LIST]     (default: tools/test-packages.txt)
#
# LIST holds one package (or path to a .deb) per line; '#' starts a comment.
# Debian's maintainer scripts start a service through invoke-rc.d or
# deb-systemd-invoke, which ask /usr/sbin/policy-rc.d first: a temporary
# one answering 101 ("action forbidden") starts nothing. They enable a
# unit with symlinks under /etc/systemd/system, whatever policy-rc.d says:
# the symlinks that appear during the install are removed afterwards (what
# `systemctl disable` does); every symlink that was there before stays, so
# nothing the operator had enabled or masked is touched. A policy-rc.d that
# was there before is put back unchanged. Run it after `apt-get update`.
set -eu

here=$(dirname "$0")
list=${1:-$here/test-packages.txt}
policy=/usr/sbin/policy-rc.d
units=/etc/systemd/system
MARK="kuryr-supervisor install-test-deps"

if [ "$(id -u)" != 0 ]; then
    echo "install-test-deps: run as root (apt-get install)" >&2
    exit 1
fi
packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list" | grep -v '^$' || true)
if [ -z "$packages" ]; then
    echo "install-test-deps: no package in $list" >&2
    exit 1
fi

work=$(mktemp -d)
restore() {
    if [ -e "$work/policy-rc.d" ]; then
        mv -f "$work/policy-rc.d" "$policy"
    elif grep -qs "$MARK" "$policy"; then
        rm -f "$policy"
    fi
    rm -rf "$work"
}
trap restore EXIT
trap 'exit 130' INT TERM

links() {
    if [ -d "$units" ]; then
        find "$units" -type l -print | sort
    fi
}

links > "$work/before"
if [ -e "$policy" ] || [ -L "$policy" ]; then
    cp -a "$policy" "$work/policy-rc.d"
fi
printf '#!/bin/sh\n# %s: start no service while test packages install.\nexit 101\n' \
    "$MARK" > "$work/new-policy"
chmod 0755 "$work/new-policy"
mv -f "$work/new-policy" "$policy"

# shellcheck disable=SC2086 # one word per package
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages

links > "$work/after"
comm -13 "$work/before" "$work/after" > "$work/enabled"
if [ -s "$work/enabled" ]; then
    echo "install-test-deps: not enabling what the install enabled:"
    while IFS= read -r link; do
        echo "  $link"
        rm -f "$link"
    done < "$work/enabled"
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
fi
