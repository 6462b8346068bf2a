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
CSI_RESIZER_BIN="$CACHE/bin/csi-resizer-$CSI_RESIZER_VERSION"
CSI_ATTACHER_BIN="$CACHE/bin/csi-attacher-$CSI_ATTACHER_VERSION"
# csi-snapshotter and snapshot-controller, built together from one module.
CSI_SNAPSHOTTER_BIN="$CACHE/bin/external-snapshotter-$CSI_SNAPSHOTTER_VERSION"
REGISTRAR_SRC_HASH="$(cat "$CLUSTER_DIR"/node-driver-registrar/{main.go,go.mod,go.sum,fakecsi/main.go} | sha256sum | cut -c1-12)"
REGISTRAR_BIN="$CACHE/bin/csi-node-driver-registrar-$CSI_NODE_DRIVER_REGISTRAR_VERSION-$REGISTRAR_SRC_HASH"
IMAGES_DIR="$CACHE/images"

# No DWARF: the binaries are stripped (-ldflags "-s -w") and nothing here
# debugs them, so the compiler need not write it either.
export GOFLAGS="${GOFLAGS:-} -trimpath -buildvcs=false -gcflags=all=-dwarf=false"
export CGO_ENABLED=0
GO_BUILD_P="${PAV_CLUSTER_GO_P:-2}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# PAV_KUBERNETES_VERSION (versions.env) names a k8s.io/kubernetes module
# version; the staging modules are v0.<minor>.<patch> of it.
[[ "$KUBERNETES_VERSION" =~ ^v1\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] ||
  die "KUBERNETES_VERSION (PAV_KUBERNETES_VERSION) must be a k8s.io/kubernetes version such as v1.37.2, not '$KUBERNETES_VERSION'"
# The feature gates the kubelets and the API server both turn on, one per
# line: CSIVolumeHealth (alpha: the kubelet asks the node plugins for each
# volume's health; from v1.37 it writes it into the pod's
# status.volumeHealth, which the API server drops unless it has the gate
# too) and, in v1.34 only (beta and off there, on from v1.35, GA and
# locked from v1.36, removed in v1.38), MutableCSINodeAllocatableCount: a
# node's volume limit that changes (CSIDriver
# nodeAllocatableUpdatePeriodSeconds).
shared_feature_gates() {
  echo CSIVolumeHealth
  case "$KUBERNETES_VERSION" in
    v1.34.*) echo MutableCSINodeAllocatableCount ;;
  esac
}
# The version a running cluster was started with, recorded by cluster-up
# (empty if none is recorded).
running_kubernetes_version() { cat "$STATE/kubernetes-version" 2>/dev/null || true; }

# Image archive paths in the cache, keyed by what they are built from.
pause_image_tar() { echo "$IMAGES_DIR/pause-$KUBERNETES_VERSION-$(sha256sum "$CLUSTER_DIR/mkimage.py" | cut -c1-8).tar"; }
busybox_image_tar() {
  local v; v="$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null || echo unknown)"; v="${v//:/_}"
  echo "$IMAGES_DIR/busybox-$v-$(sha256sum "$CLUSTER_DIR/mkimage.py" "$CLUSTER_DIR/build-images" "$CLUSTER_DIR/busybox-rootfs.sh" | sha256sum | cut -c1-8).tar"
}
provisioner_image_tar() { echo "$IMAGES_DIR/csi-provisioner-$CSI_PROVISIONER_VERSION.tar"; }
resizer_image_tar() { echo "$IMAGES_DIR/csi-resizer-$CSI_RESIZER_VERSION.tar"; }
attacher_image_tar() { echo "$IMAGES_DIR/csi-attacher-$CSI_ATTACHER_VERSION.tar"; }
snapshotter_image_tar() { echo "$IMAGES_DIR/csi-snapshotter-$CSI_SNAPSHOTTER_VERSION.tar"; }
snapshot_controller_image_tar() { echo "$IMAGES_DIR/snapshot-controller-$CSI_SNAPSHOTTER_VERSION.tar"; }
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

# ---------------------------------------------------------------- nodes
# Node 1 is $NODE_NAME on this host's network; node K >= 2 (scripts/cluster/node)
# has its own network namespace, joined by a /30 link, and pod network.
NODES_DATA=/var/lib/pav-cluster-nodes   # extra nodes' kubelet dirs and /var/lib/pav
CLUSTER_POD_CIDR=10.244.0.0/16           # every node's pod network
NODE_LINKS_CIDR=10.245.0.0/16            # the links to extra nodes
node_name() { if [ "$1" = 1 ]; then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi; }
# A /22 per node (node 1's is POD_CIDR): room for 1,000 pods.
node_pod_cidr() { echo "10.244.$((($1 - 1) * 4)).0/22"; }
node_pod_gateway() { echo "10.244.$((($1 - 1) * 4)).1"; }
node_link_host() { echo "10.245.$1.1"; }
node_ip() { echo "10.245.$1.2"; }

# ---------------------------------------------------------------- certificates
# One CA ($PKI/ca.*) signs everything.
gen_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; chmod 600 "$1"; }
# cert NAME CN ORG EKU SANS: $PKI_OUT/NAME.{key,crt} (PKI_OUT defaults to
# $PKI), signed by $PKI/$CERT_CA (default ca).
cert() {
  local n="$1" cn="$2" org="$3" eku="$4" sans="$5" subj="/CN=$2" out="${PKI_OUT:-$PKI}"
  [ -n "$org" ] && subj="/O=$org/CN=$cn"
  gen_key "$out/$n.key"
  openssl req -new -key "$out/$n.key" -subj "$subj" -out "$out/$n.csr" 2>/dev/null
  { echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$sans" ] && echo "subjectAltName=$sans"; } > "$out/$n.ext"
  openssl x509 -req -in "$out/$n.csr" -CA "$PKI/${CERT_CA:-ca}.crt" -CAkey "$PKI/${CERT_CA:-ca}.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -sha256 -extfile "$out/$n.ext" -out "$out/$n.crt" 2>/dev/null
  rm -f "$out/$n.csr" "$out/$n.ext"
}

# write_kubeconfig FILE USER CERT_PREFIX SERVER (certificates embedded, so
# the file is portable; CERT_PREFIX.crt and CERT_PREFIX.key)
write_kubeconfig() {
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: pav
  cluster:
    server: $4
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 < "$3.crt")
    client-key-data: $(base64 -w0 < "$3.key")
contexts:
- name: pav
  context: {cluster: pav, user: $2}
current-context: pav
KC
  chmod 600 "$1"
}

# cni_config FILE IPAM_DIR SUBNET GATEWAY: the pod network of one node, a
# bridge $BRIDGE in the node's network namespace.
cni_config() {
  cat > "$1" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "pav",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$2",
        "ranges": [[{"subnet": "$3", "gateway": "$4"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
CNI
}

# containerd_config FILE ROOT STATE_DIR SOCKET RUNC_ROOT CNI_CONF_DIR
containerd_config() {
  cat > "$1" <<TOML
version = 2
root = "$2"
state = "$3"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$4"
[ttrpc]
  address = "$4.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$3/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_selinux = false
  # This machine withholds CAP_SYS_RESOURCE, so runc cannot lower
  # oom_score_adj (pause asks for -998): clamp to containerd's own score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$5"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$6"
TOML
}

# kubelet_config FILE ADDRESS PKI_DIR SOCKET POD_LOGS POD_CIDR CGROUP_ROOT
# (CGROUP_ROOT empty: the kubelet's default, /)
kubelet_config() {
  cat > "$1" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $2
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$3/kubelet-serving.crt"
tlsPrivateKeyFile: "$3/kubelet-serving.key"
containerRuntimeEndpoint: unix://$4
cgroupDriver: cgroupfs
${7:+cgroupRoot: $7}
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $5
podCIDR: $6
# Imported images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
# Each node's pod network is a /22 (node_pod_cidr): room for 1,000 pods
# rather than the kubelet's default 110, so scripts/bench-scale can put N =
# 1,000 clients of one node-local driver on one node.
maxPods: 1000
# Volume usage (NodeGetVolumeStats for CSI volumes) every 10 s rather than
# every minute, so tests see a volume's stats soon after it is mounted.
volumeStatsAggPeriod: 10s
rotateCertificates: false
serverTLSBootstrap: false
featureGates:
$(shared_feature_gates | sed 's/.*/  &: true/')
YAML
}

# import_images --address SOCKET: the cluster's images, and those the project
# built (pav:dev, kept under $CACHE/extra-images), into that containerd.
import_images() {
  local tarball
  for tarball in "$(pause_image_tar)" "$(busybox_image_tar)" "$(provisioner_image_tar)" "$(registrar_image_tar)" "$(fakecsi_image_tar)" \
      "$(resizer_image_tar)" "$(attacher_image_tar)" "$(snapshotter_image_tar)" "$(snapshot_controller_image_tar)"; do
    ctr "$@" -n k8s.io images import "$tarball" >/dev/null 2>"$LOGS/ctr-import.log" ||
      { cat "$LOGS/ctr-import.log" >&2; die "ctr import $tarball failed"; }
  done
  if [ -d "$CACHE/extra-images" ]; then
    for tarball in "$CACHE"/extra-images/*.tar; do
      [ -f "$tarball" ] && { ctr "$@" -n k8s.io images import "$tarball" >/dev/null && log "imported $(basename "$tarball")"; }
    done
  fi
  return 0
}

# Every containerd of the cluster: node 1's, then each extra node's.
containerd_addresses() {
  echo "$CTR_ADDRESS"
  local d
  for d in "$STATE"/nodes/*/; do [ -S "$d/containerd/containerd.sock" ] && echo "$d/containerd/containerd.sock"; done
  return 0
}

# ---------------------------------------------------------------- stopping
# Processes by their pid files in $PIDS (node 1's components by name, extra
# nodes' as node-K-COMPONENT).
term_pid() { local f="$PIDS/$1.pid"; [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true; }
stop_pid() {  # stop_pid NAME [GRACE_SECONDS]
  local name="$1" grace="${2:-10}" f="$PIDS/$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq $((grace * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { log "killing $name (pid $pid)"; kill -KILL "$pid" 2>/dev/null; }
  fi
  rm -f "$f"
}

# kill_containers SOCKET STATE_DIR: kills and deletes every task of the
# containerd at SOCKET (namespace k8s.io) while it still runs, then the
# shims it started (their pids are in its STATE_DIR), so they exit too.
kill_containers() {
  local tasks t f
  tasks="$(ctr --address "$1" -n k8s.io tasks ls -q 2>/dev/null || true)"
  if [ -n "$tasks" ]; then
    log "stopping $(echo "$tasks" | wc -l) container(s)"
    for t in $tasks; do ctr --address "$1" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $tasks; do ctr --address "$1" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true; done
  fi
  for f in "$2"/io.containerd.runtime.v2.task/*/*/shim.pid; do
    [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  return 0
}
