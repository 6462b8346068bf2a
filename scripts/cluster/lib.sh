# shellcheck shell=bash
# Common settings for scripts/cluster-up, cluster-down and scripts/cluster/*.
# Sourced, not run.

CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$CLUSTER_DIR/../.." && pwd)"
# shellcheck source=../versions.env
. "$REPO_DIR/scripts/versions.env"

CACHE="${PAV_CLUSTER_CACHE:-/var/cache/pav-cluster}"
STATE="${PAV_CLUSTER_STATE:-/var/run/pav-cluster}"
KUBELET_DIR=/var/lib/kubelet
PAV_DATA_DIR=/var/lib/pav
CONTAINERD_ROOT="$STATE/containerd-root"   # containerd's state (images, snapshots)
KUBECONFIG_PATH="$STATE/kubeconfig"

K8S_BIN="$CACHE/bin/kubernetes-$KUBERNETES_VERSION"
ETCD_BIN="$CACHE/bin/etcd-$ETCD_VERSION"
CSI_PROVISIONER_BIN="$CACHE/bin/csi-provisioner-$CSI_PROVISIONER_VERSION"
REGISTRAR_SRC_HASH="$(cat "$CLUSTER_DIR"/node-driver-registrar/{main.go,go.mod,go.sum} | sha256sum | cut -c1-12)"
REGISTRAR_BIN="$CACHE/bin/csi-node-driver-registrar-$CSI_NODE_DRIVER_REGISTRAR_VERSION-$REGISTRAR_SRC_HASH"
IMAGES_DIR="$CACHE/images"

export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false"
export CGO_ENABLED=0
GO_BUILD_P="${PAV_CLUSTER_GO_P:-2}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
