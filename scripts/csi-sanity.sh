#!/usr/bin/env bash
# Runs the kubernetes-csi conformance suite (csi-sanity) against each
# example driver (controller and node on one Unix socket), and checks that
# no driver created, changed or deleted anything outside its own
# directories while the suite ran.
#
# Usage: scripts/csi-sanity.sh [EXAMPLE...]   (default: every example below)
#
# Needs root (mounts; loop devices for sparse-file), Go (to install
# csi-sanity if absent), cargo, and for sparse-file losetup/mount/mountpoint
# (util-linux), blkid, mkfs.ext4 and resize2fs (e2fsprogs).
# csi-sanity runs the tests of every capability a driver advertises: for
# sparse-file also expansion (to --csi.testvolumeexpandsize), capacity,
# ListVolumes, snapshots, restores, clones and volume attributes classes
# (created and modified with the mutable parameters below); hostdir
# advertises only the basic ones.
# Non-interactive; exits non-zero when any spec fails or anything outside a
# driver's directories changed.
#
# Environment:
#   CSI_SANITY_VERSION  csi-test release to install (default v5.6.0)
#   CSI_SANITY_ARGS     extra arguments for csi-sanity (e.g. -ginkgo.focus=Node)
#   CARGO_TARGET_DIR    where cargo builds (default: target-csi in the repo)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${CSI_SANITY_VERSION:-v5.6.0}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target-csi}"

# Each example, and the volume modes (csi-sanity access types) it serves.
declare -A access_types=(
    [hostdir]="mount"
    [tmpfs]="mount"
    [sparse-file]="mount block"
)
# The mutable parameters (a VolumeAttributesClass's) csi-sanity creates and
# modifies volumes with, for the examples that advertise MODIFY_VOLUME:
# sparse-file's volumes made thick (every block reserved).
declare -A mutable_parameters=(
    [sparse-file]="provisioning: thick"
)
# The examples that attach (PUBLISH_UNPUBLISH_VOLUME) with a maximum of
# volumes per node: the driver is given it, and csi-sanity attaches one
# more than it (--csi.testnodevolumeattachlimit).
declare -A max_volumes_per_node=(
    [sparse-file]=4
)
if (($#)); then examples=("$@"); else examples=(hostdir tmpfs sparse-file); fi
expected_counts="$(cd "$(dirname "$0")" && pwd)/csi-sanity.expected"
for example in "${examples[@]}"; do
    [[ -n ${access_types[$example]:-} ]] || { echo "csi-sanity.sh: unknown example $example" >&2; exit 1; }
done

if [[ $(id -u) -ne 0 ]]; then
    echo "csi-sanity.sh: must run as root (loop devices and mounts)" >&2
    exit 1
fi
for tool in cargo losetup mount umount mountpoint blkid mkfs.ext4 resize2fs; do
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

# The drivers as `cargo test --workspace` builds them (for their tests/):
# `cargo build -p EXAMPLE...` would resolve features for those packages
# alone and build their dependencies once more.
cargo test --workspace --locked --no-run --quiet

# Everything lives in $base: one directory per example (its volumes, its
# kubelet directory, its socket), a log per example, and a decoy that a
# driver escaping its directory ("../victim") would reach first.
base="$(mktemp -d /tmp/pav-csi-sanity.XXXXXX)"
logs="$(mktemp -d /tmp/pav-csi-sanity-logs.XXXXXX)"
driver_pid=""
stop_driver() {
    if [[ -n $driver_pid ]] && kill -0 "$driver_pid" 2>/dev/null; then
        kill -TERM "$driver_pid" 2>/dev/null || true
        wait "$driver_pid" 2>/dev/null || true
    fi
    driver_pid=""
}
cleanup() {
    local status=$?
    set +e +o pipefail
    stop_driver
    # Leave nothing mounted or attached, even after a failed spec.
    grep -F " $base/" /proc/self/mountinfo | awk '{print $5}' | sort -r |
        while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
    for image in "$base"/*/volumes/*.img; do
        [[ -e $image ]] || continue
        losetup --associated "$image" | cut -d: -f1 |
            while read -r dev; do losetup --detach "$dev" 2>/dev/null || true; done
    done
    rm -rf "$base" "$logs"
    exit "$status"
}
trap cleanup EXIT INT TERM

mkdir -p "$base/victim/data"
echo "must survive" >"$base/victim/data/file"
echo 1 >"$base/victim/size"
# Everything in $base outside the example's own directory, with type, size
# and modification time: what a confined driver never touches.
outside() {
    find "$base" -path "$base/$1" -prune -o -printf '%y %s %T@ %P\n' | sort
}

status=0
summary=()
for example in "${examples[@]}"; do
    dir="$base/$example"
    socket="$dir/csi.sock"
    kubelet="$dir/kubelet"
    log="$logs/$example.log"
    mkdir -p "$kubelet"
    before="$(outside "$example")"
    # csi-sanity's staging and mount directories stand in for kubelet's:
    # the driver stages and publishes only inside its --kubelet-dir.
    limit=()
    attach_limit=()
    if [[ -n ${max_volumes_per_node[$example]:-} ]]; then
        limit=(--max-volumes-per-node "${max_volumes_per_node[$example]}")
        attach_limit=(--csi.testnodevolumeattachlimit)
    fi
    RUST_LOG="${RUST_LOG:-warn}" "$CARGO_TARGET_DIR/debug/$example" --endpoint "$socket" \
        --dir "$dir/volumes" --kubelet-dir "$kubelet" --node-id "$(hostname)" "${limit[@]}" >"$log" 2>&1 &
    driver_pid=$!
    for _ in $(seq 100); do
        [[ -S $socket ]] && break
        kill -0 "$driver_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.1
    done
    [[ -S $socket ]] || { echo "csi-sanity.sh: $example: driver socket never appeared" >&2; exit 1; }

    modify=()
    if [[ -n ${mutable_parameters[$example]:-} ]]; then
        echo "${mutable_parameters[$example]}" >"$dir/mutable-parameters.yaml"
        modify=(--csi.testvolumemutableparameters "$dir/mutable-parameters.yaml")
    fi
    example_status=0
    for access_type in ${access_types[$example]}; do
        echo "=== csi-sanity: $example, access type $access_type ==="
        result=0
        # shellcheck disable=SC2086 # CSI_SANITY_ARGS is a list of arguments
        csi-sanity \
            --csi.endpoint "$socket" \
            --csi.stagingdir "$kubelet/staging-$access_type" \
            --csi.mountdir "$kubelet/mount-$access_type" \
            --csi.testvolumesize 67108864 \
            --csi.testvolumeexpandsize 134217728 \
            --csi.testvolumeaccesstype "$access_type" \
            "${modify[@]}" \
            "${attach_limit[@]}" \
            -ginkgo.no-color \
            ${CSI_SANITY_ARGS:-} 2>&1 | tee "$logs/sanity.log" || result=$?
        summary+=("$example $access_type: $(grep -Eo '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$logs/sanity.log" | tail -1)")
        ((result == 0)) || example_status=$result
    done
    stop_driver
    after="$(outside "$example")"
    if [[ $before != "$after" ]]; then
        echo "csi-sanity.sh: $example changed files outside $dir:" >&2
        diff <(echo "$before") <(echo "$after") >&2 || true
        example_status=1
    fi
    if ((example_status != 0)); then
        echo "--- $example driver log ---" >&2
        tail -n 200 "$log" >&2
        status=$example_status
    fi
done
printf '%s\n' "=== csi-sanity summary ===" "${summary[@]}"
# Every pass's counts are pinned (scripts/csi-sanity.expected, the table in
# docs/csi.md): a driver that stops advertising a capability passes with
# more skips, which must fail here too. A focused run (CSI_SANITY_ARGS)
# counts differently and is not checked.
if [[ -z ${CSI_SANITY_ARGS:-} ]]; then
    for line in "${summary[@]}"; do
        key="${line%%:*}"
        expected="$(grep -F "$key:" "$expected_counts" || true)"
        if [[ $line != "$expected" ]]; then
            echo "csi-sanity.sh: $key: counted '${line#*: }', expected '${expected#*: }' (scripts/csi-sanity.expected; if the change is meant, update it and docs/csi.md's table)" >&2
            status=1
        fi
    done
fi
exit "$status"
