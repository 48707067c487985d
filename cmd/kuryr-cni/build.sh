#!/bin/sh
# Build the compiled kuryr-cni shim: static (CGO_ENABLED=0), standard
# library only, offline (GOPROXY=off). Needs Go >= 1.19 (Debian: golang-go).
#
#   cmd/kuryr-cni/build.sh [OUTPUT]
#
# OUTPUT defaults to kuryr_supervisor/cni/bin/kuryr-cni, where the installer
# ([cni_install]) and `pip install .` (package data) pick it up.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/kuryr_supervisor/cni/bin/kuryr-cni}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
mkdir -p "$(dirname "$out")"
export CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=mod GO111MODULE=on
export GOCACHE="${GOCACHE:-$repo/build/gocache}"
export GOPATH="${GOPATH:-$repo/build/gopath}"
cd "$here"
go build -trimpath -ldflags "-s -w" -o "$out.tmp.$$" .
mv -f "$out.tmp.$$" "$out"
echo "$out"
