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
# unit with symlinks under /etc/systemd (and update-rc.d's under
# /etc/rc?.d), whatever policy-rc.d says: the symlinks that appear during
# the install are removed afterwards (what `systemctl disable` does); every
# symlink that was there before stays, so nothing the operator had enabled
# or masked is touched. A policy-rc.d that
# was there before is put back unchanged. Run it after `apt-get update`.
set -eu

here=$(dirname "$0")
list=${1:-$here/test-packages.txt}
policy=/usr/sbin/policy-rc.d
# Where maintainer scripts enable things: systemd units (system and user
# wide) and System V runlevel links (update-rc.d).
links_in="/etc/systemd/system /etc/systemd/user /etc/rc0.d /etc/rc1.d /etc/rc2.d /etc/rc3.d /etc/rc4.d /etc/rc5.d /etc/rc6.d /etc/rcS.d"
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

links() {   # $1: -type l (the links) or -type d (their directories)
    for dir in $links_in; do
        if [ -d "$dir" ]; then
            find "$dir" "$@" -print
        fi
    done | sort
}

disable_new() {
    links -type l | comm -13 "$work/before" - > "$work/enabled"
    if [ ! -s "$work/enabled" ]; then
        return
    fi
    echo "install-test-deps: not enabling what the install enabled:"
    while IFS= read -r link; do
        echo "  $link"
        rm -f "$link"
    done < "$work/enabled"
    # The .wants directories made for those links, once empty.
    links -type d | comm -13 "$work/dirs-before" - | sort -r |
        while IFS= read -r dir; do rmdir "$dir" 2>/dev/null || true; done
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
}

restore() {     # also when the install fails half-way
    if [ -e "$work/before" ]; then
        disable_new
    fi
    if [ -e "$work/policy-rc.d" ] || [ -L "$work/policy-rc.d" ]; then
        mv -f "$work/policy-rc.d" "$policy"
    elif grep -qs "$MARK" "$policy"; then
        rm -f "$policy"
    fi
    rm -rf "$work"
}
trap restore EXIT
trap 'exit 130' INT TERM

links -type d > "$work/dirs-before"
links -type l > "$work/before"
if [ -e "$policy" ] || [ -L "$policy" ]; then
    cp -a "$policy" "$work/policy-rc.d"
fi
printf '#!/bin/sh\n# %s: start no service while test packages install.\nexit 101\n' \
    "$MARK" > "$work/new-policy"
chmod 0755 "$work/new-policy"
mv -f "$work/new-policy" "$policy"

# shellcheck disable=SC2086 # one word per package
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages
