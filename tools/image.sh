#!/bin/sh
# Build kuryr-supervisor's container image with podman, from a base made
# locally out of Debian's archive (no registry needed):
#
#   tools/image.sh base            debootstrap --variant=minbase bookworm,
#                                  podman import -> $BASE_IMAGE
#   tools/image.sh build [TAG]     podman build -f Containerfile -> $IMAGE:TAG
#   tools/image.sh all [TAG]       both (the base only when missing)
#
# Needs root, debootstrap, podman and runc (apt-get install -y debootstrap
# podman runc). podman runs with --runtime runc --cgroup-manager cgroupfs so
# it works without systemd as PID 1 and without crun. The package and its
# dependencies are built into wheelhouse/ first with $PYTHON's pip (tox's
# venv under `tox -e image`), so the image build is offline. TAG defaults to the
# package version (setup.cfg): images are never tagged "latest".
set -eu
cd "$(dirname "$0")/.."
BASE_IMAGE=${BASE_IMAGE:-localhost/kuryr-supervisor-base:bookworm}
IMAGE=${IMAGE:-localhost/kuryr-supervisor}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
podman() { command podman --runtime runc --cgroup-manager cgroupfs "$@"; }
version() { sed -n 's/^version *= *//p' setup.cfg; }

base() {
    root=$(mktemp -d /var/tmp/kuryr-base.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase bookworm "$root" "$MIRROR"
    cat > "$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
    # Images need no apt caches, logs or docs.
    rm -rf "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
           "$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/*
    tar -C "$root" --numeric-owner -c . | podman import \
        --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' \
        --change 'ENV DEBIAN_FRONTEND=noninteractive' - "$BASE_IMAGE"
}

build() {
    tag=${1:-$(version)}
    allow=0
    if [ ! -f cmd/kuryr-cni/go.mod ]; then
        echo "tools/image.sh: no cmd/kuryr-cni in this tree: Python shim" >&2
        allow=1
    fi
    rm -rf wheelhouse
    "${PYTHON:-python3}" -m pip wheel --quiet --wheel-dir wheelhouse ".[kubernetes,openstack]"
    podman build --network host --pull=never -f Containerfile \
        --build-arg BASE_IMAGE="$BASE_IMAGE" \
        --build-arg ALLOW_PYTHON_SHIM="$allow" \
        -t "$IMAGE:$tag" .
    echo "$IMAGE:$tag"
}

case ${1:-all} in
    base) base ;;
    build) shift; build "$@" ;;
    all) shift || true
         podman image exists "$BASE_IMAGE" || (base)
         build "$@" ;;
    *) echo "usage: $0 base | build [TAG] | all [TAG]" >&2; exit 2 ;;
esac
