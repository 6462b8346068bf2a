#!/usr/bin/env bash
# Runs the kubernetes-csi conformance suite (csi-sanity) against the
# sparse-file example serving controller and node on one Unix socket.
#
# Needs root (loop devices, mount), Go (to install csi-sanity if absent),
# cargo, losetup/mount/mountpoint (util-linux), blkid and mkfs.ext4 (e2fsprogs).
# Non-interactive; exits non-zero when any spec fails.
#
# Environment:
#   CSI_SANITY_VERSION  csi-test release to install (default v5.6.0)
#   CSI_SANITY_ARGS     extra arguments for csi-sanity (e.g. -ginkgo.focus=Node)
#   CARGO_TARGET_DIR    where cargo builds (default: target-csi in the repo)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${CSI_SANITY_VERSION:-v5.6.0}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target-csi}"

if [[ $(id -u) -ne 0 ]]; then
    echo "csi-sanity.sh: must run as root (loop devices and mounts)" >&2
    exit 1
fi
for tool in cargo losetup mount umount mountpoint blkid mkfs.ext4; do
    command -v "$tool" >/dev/null || { echo "csi-sanity.sh: $tool not found" >&2; exit 1; }
done

# Install csi-sanity where this script finds it again, unless one is on PATH.
gobin="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
export PATH="$gobin:$PATH"
if ! command -v csi-sanity >/dev/null; then
    command -v go >/dev/null || { echo "csi-sanity.sh: go is needed to install csi-sanity" >&2; exit 1; }
    echo "installing csi-sanity $version"
    GOBIN="$gobin" GOFLAGS=-mod=mod go install "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$version"
fi

cargo build --quiet -p sparse-file
driver="$CARGO_TARGET_DIR/debug/sparse-file"

work="$(mktemp -d /tmp/pav-csi-sanity.XXXXXX)"
socket="$work/csi.sock"
driver_pid=""
cleanup() {
    local status=$?
    set +e +o pipefail
    if [[ -n $driver_pid ]] && kill -0 "$driver_pid" 2>/dev/null; then
        kill -TERM "$driver_pid" 2>/dev/null || true
        wait "$driver_pid" 2>/dev/null || true
    fi
    # Leave nothing mounted or attached, even after a failed spec.
    grep -F " $work/" /proc/self/mountinfo | awk '{print $5}' | sort -r |
        while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
    for image in "$work"/volumes/*.img; do
        [[ -e $image ]] || continue
        losetup --associated "$image" | cut -d: -f1 |
            while read -r dev; do losetup --detach "$dev" 2>/dev/null || true; done
    done
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT INT TERM

# csi-sanity's staging and mount directories stand in for kubelet's: the
# driver stages and publishes only inside its --kubelet-dir.
kubelet="$work/kubelet"
mkdir -p "$kubelet"
RUST_LOG="${RUST_LOG:-warn}" "$driver" --endpoint "$socket" --dir "$work/volumes" \
    --kubelet-dir "$kubelet" --node-id "$(hostname)" >"$work/driver.log" 2>&1 &
driver_pid=$!
for _ in $(seq 100); do
    [[ -S $socket ]] && break
    kill -0 "$driver_pid" 2>/dev/null || { cat "$work/driver.log" >&2; exit 1; }
    sleep 0.1
done
[[ -S $socket ]] || { echo "csi-sanity.sh: driver socket never appeared" >&2; exit 1; }

status=0
# Both volume modes: Filesystem (mount) then Block, against the same driver.
for access_type in mount block; do
    echo "=== csi-sanity, access type $access_type ==="
    # shellcheck disable=SC2086 # CSI_SANITY_ARGS is a list of arguments
    csi-sanity \
        --csi.endpoint "$socket" \
        --csi.stagingdir "$kubelet/staging-$access_type" \
        --csi.mountdir "$kubelet/mount-$access_type" \
        --csi.testvolumesize 67108864 \
        --csi.testvolumeaccesstype "$access_type" \
        -ginkgo.no-color \
        ${CSI_SANITY_ARGS:-} || status=$?
done
if [[ $status -ne 0 ]]; then
    echo "--- driver log ---" >&2
    tail -n 200 "$work/driver.log" >&2
fi
exit "$status"
