# shellcheck shell=bash disable=SC2034
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
REGISTRAR_SRC_HASH="$(cat "$CLUSTER_DIR"/node-driver-registrar/{main.go,go.mod,go.sum,fakecsi/main.go} | sha256sum | cut -c1-12)"
REGISTRAR_BIN="$CACHE/bin/csi-node-driver-registrar-$CSI_NODE_DRIVER_REGISTRAR_VERSION-$REGISTRAR_SRC_HASH"
IMAGES_DIR="$CACHE/images"

export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false"
export CGO_ENABLED=0
GO_BUILD_P="${PAV_CLUSTER_GO_P:-2}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Image archive paths in the cache, keyed by what they are built from.
pause_image_tar() { echo "$IMAGES_DIR/pause-$KUBERNETES_VERSION-$(sha256sum "$CLUSTER_DIR/mkimage.py" | cut -c1-8).tar"; }
busybox_image_tar() {
  local v; v="$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null || echo unknown)"; v="${v//:/_}"
  echo "$IMAGES_DIR/busybox-$v-$(sha256sum "$CLUSTER_DIR/mkimage.py" "$CLUSTER_DIR/build-images" | sha256sum | cut -c1-8).tar"
}
provisioner_image_tar() { echo "$IMAGES_DIR/csi-provisioner-$CSI_PROVISIONER_VERSION.tar"; }
fakecsi_image_tar() { echo "$IMAGES_DIR/fakecsi-$REGISTRAR_SRC_HASH.tar"; }
# Test-only image: a do-nothing CSI node plugin for the smoke test.
FAKECSI_IMAGE=pav.local/cluster-fake-csi:dev
registrar_image_tar() { echo "$IMAGES_DIR/csi-node-driver-registrar-$CSI_NODE_DRIVER_REGISTRAR_VERSION-$REGISTRAR_SRC_HASH.tar"; }

# Normalize an image reference the way kubelet/CRI does (busybox:stable ->
# docker.io/library/busybox:stable), so imported names match pod specs.
normalize_image() {
  local n="$1" first="${1%%/*}"
  if [[ "$n" != */* ]]; then n="docker.io/library/$n"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then n="docker.io/$n"
  fi
  [[ "${n##*/}" == *:* || "$n" == *@* ]] || n="$n:latest"
  echo "$n"
}

CTR_ADDRESS="$STATE/containerd/containerd.sock"
ctr_k8s() { ctr --address "$CTR_ADDRESS" -n k8s.io "$@"; }

NODE_NAME="${PAV_CLUSTER_NODE_NAME:-pav-node}"
BRIDGE=pav0
API_PORT=6443
PKI="$STATE/pki"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
# Start order; cluster-down stops in reverse.
COMPONENTS=(etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet)

kubectl_admin() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

pid_alive() { local f="$PIDS/$1.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }
