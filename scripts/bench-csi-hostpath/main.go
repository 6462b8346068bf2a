// Command hostpathplugin is a stand-in for the Kubernetes CSI reference
// driver github.com/kubernetes-csi/csi-driver-host-path (cmd/hostpathplugin),
// used by scripts/bench-csi as the baseline for pav-csi's request path.
// The Go module proxy refuses that module here (403 for every version), so
// this reimplements, for filesystem volumes only, the work the upstream
// driver (v1.17) does per RPC, with the same libraries (grpc-go, the CSI
// spec's Go bindings, k8s.io/mount-utils):
//
//   - one mutex around every Controller and Node call;
//   - state kept in memory and written as JSON to <statedir>/state.json
//     whenever a volume changes: added, removed, staged, unstaged, published
//     or unpublished (upstream's state.UpdateVolume and DeleteVolume dump
//     the whole state each time);
//   - CreateVolume: mkdir <datadir>/<uuid>, then the state file;
//   - DeleteVolume: refuse while staged/published, RemoveAll, state file;
//   - NodeStageVolume / NodeUnstageVolume: bookkeeping only (no mount), then
//     the state file unless the volume already was (or was not) staged there;
//   - NodePublishVolume: must be staged; mount.IsNotMountPoint on the target,
//     MkdirAll, then mount-utils' Mount(..., "bind"), which runs mount(8),
//     then the state file;
//   - NodeUnpublishVolume: mount.IsNotMountPoint, Unmount (umount(8)),
//     RemoveAll of the target, then the state file.
//
// Snapshots, block volumes, ephemeral volumes, capacity tracking, health
// monitoring and the gRPC logging interceptor (upstream logs each call at
// -v=3 and above) are left out. Flags use the upstream names.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"
)

var (
	endpoint   = flag.String("endpoint", "unix:///csi/csi.sock", "CSI endpoint")
	driverName = flag.String("drivername", "hostpath.csi.k8s.io", "name of the driver")
	nodeID     = flag.String("nodeid", "", "node id")
	dataDir    = flag.String("datadir", "/csi-data-dir", "directory for volume data")
	stateDir   = flag.String("statedir", "/csi-data-dir", "directory for the state file")
	maxSize    = flag.Int64("maxvolumesize", 1<<40, "maximum size of a volume in bytes")
	_          = flag.Int("v", 0, "log verbosity (ignored)")
)

const topologyKeyNode = "topology.hostpath.csi/node"

// volume mirrors the fields of upstream's state.Volume that these RPCs use.
type volume struct {
	VolName   string
	VolID     string
	VolSize   int64
	VolPath   string
	NodeID    string
	Staged    []string
	Published []string
}

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	mutex     sync.Mutex
	volumes   []volume
	stateFile string
	mounter   mount.Interface
}

// dump writes the whole state as JSON, as upstream's state.dump does.
func (d *driver) dump() error {
	data, err := json.Marshal(struct{ Volumes []volume }{d.volumes})
	if err != nil {
		return status.Errorf(codes.Internal, "error encoding volumes: %v", err)
	}
	if err := os.WriteFile(d.stateFile, data, 0600); err != nil {
		return status.Errorf(codes.Internal, "error writing state file: %v", err)
	}
	return nil
}

func (d *driver) byID(id string) (int, error) {
	for i := range d.volumes {
		if d.volumes[i].VolID == id {
			return i, nil
		}
	}
	return -1, status.Errorf(codes.NotFound, "volume id %s does not exist in the volumes list", id)
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x10 // time-based UUID layout, like upstream's uuid.NewUUID
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Identity.

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: *driverName, VendorVersion: "standin"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// Controller.

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if len(req.GetName()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Name missing in request")
	}
	caps := req.GetVolumeCapabilities()
	if caps == nil {
		return nil, status.Error(codes.InvalidArgument, "Volume Capabilities missing in request")
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return nil, status.Error(codes.InvalidArgument, "block volumes are not supported by this stand-in")
		}
		if c.GetMount() == nil {
			return nil, status.Error(codes.InvalidArgument, "access type missing")
		}
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size > *maxSize {
		return nil, status.Errorf(codes.OutOfRange, "Requested capacity %d exceeds maximum allowed %d", size, *maxSize)
	}
	topology := []*csi.Topology{{Segments: map[string]string{topologyKeyNode: *nodeID}}}

	d.mutex.Lock()
	defer d.mutex.Unlock()
	for _, v := range d.volumes {
		if v.VolName == req.GetName() {
			if v.VolSize < size {
				return nil, status.Error(codes.AlreadyExists, "Volume with the same name but a smaller size already exists")
			}
			return &csi.CreateVolumeResponse{Volume: &csi.Volume{
				VolumeId: v.VolID, CapacityBytes: v.VolSize, AccessibleTopology: topology,
			}}, nil
		}
	}
	id := newID()
	path := filepath.Join(*dataDir, id)
	if err := os.MkdirAll(path, 0777); err != nil {
		return nil, status.Errorf(codes.Internal, "failed to create volume %v: %v", id, err)
	}
	d.volumes = append(d.volumes, volume{VolName: req.GetName(), VolID: id, VolSize: size, VolPath: path})
	if err := d.dump(); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId: id, CapacityBytes: size, AccessibleTopology: topology,
	}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if len(req.GetVolumeId()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	d.mutex.Lock()
	defer d.mutex.Unlock()
	i, err := d.byID(req.GetVolumeId())
	if err != nil {
		return &csi.DeleteVolumeResponse{}, nil // already gone
	}
	v := d.volumes[i]
	if len(v.Staged) > 0 || len(v.Published) > 0 {
		return nil, status.Errorf(codes.Internal, "Volume '%s' is still used (staged: %v, published: %v) by '%s' node",
			v.VolID, v.Staged, v.Published, v.NodeID)
	}
	if err := os.RemoveAll(v.VolPath); err != nil && !os.IsNotExist(err) {
		return nil, status.Errorf(codes.Internal, "failed to delete volume %v: %v", v.VolID, err)
	}
	d.volumes = slices.Delete(d.volumes, i, i+1)
	if err := d.dump(); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		}},
	}}}, nil
}

// Node.

func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if len(req.GetVolumeId()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	staging := req.GetStagingTargetPath()
	if len(staging) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "Volume Capability missing in request")
	}
	d.mutex.Lock()
	defer d.mutex.Unlock()
	i, err := d.byID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v := &d.volumes[i]
	if slices.Contains(v.Staged, staging) {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	v.Staged = append(v.Staged, staging)
	if err := d.dump(); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if len(req.GetVolumeId()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	staging := req.GetStagingTargetPath()
	if len(staging) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	d.mutex.Lock()
	defer d.mutex.Unlock()
	i, err := d.byID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v := &d.volumes[i]
	if !slices.Contains(v.Staged, staging) {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	v.Staged = slices.DeleteFunc(v.Staged, func(s string) bool { return s == staging })
	if err := d.dump(); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "Volume capability missing in request")
	}
	if len(req.GetVolumeId()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	target := req.GetTargetPath()
	if len(target) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	staging := req.GetStagingTargetPath()
	if len(staging) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Staging target not provided")
	}
	if req.GetVolumeCapability().GetMount() == nil {
		return nil, status.Error(codes.InvalidArgument, "only mount access is supported by this stand-in")
	}
	d.mutex.Lock()
	defer d.mutex.Unlock()
	i, err := d.byID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v := &d.volumes[i]
	if !slices.Contains(v.Staged, staging) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q must be staged before publishing", v.VolID)
	}
	if slices.Contains(v.Published, target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	notMnt, err := mount.IsNotMountPoint(d.mounter, target)
	if err != nil {
		if !os.IsNotExist(err) {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.MkdirAll(target, 0750); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		notMnt = true
	}
	if notMnt {
		options := []string{"bind"}
		if req.GetReadonly() {
			options = append(options, "ro")
		}
		if err := d.mounter.Mount(v.VolPath, target, "", options); err != nil {
			return nil, status.Errorf(codes.Internal, "failed to mount device: %s at %s: %v", v.VolPath, target, err)
		}
	}
	v.NodeID = *nodeID
	v.Published = append(v.Published, target)
	if err := d.dump(); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if len(req.GetVolumeId()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	target := req.GetTargetPath()
	if len(target) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	d.mutex.Lock()
	defer d.mutex.Unlock()
	i, err := d.byID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v := &d.volumes[i]
	if !slices.Contains(v.Published, target) {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if notMnt, err := mount.IsNotMountPoint(d.mounter, target); err != nil {
		if !os.IsNotExist(err) {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else if !notMnt {
		if err := d.mounter.Unmount(target); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.RemoveAll(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	v.Published = slices.DeleteFunc(v.Published, func(s string) bool { return s == target })
	if err := d.dump(); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             *nodeID,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{topologyKeyNode: *nodeID}},
	}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
			Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		}},
	}}}, nil
}

func main() {
	flag.Parse()
	if *nodeID == "" {
		log.Fatal("--nodeid is required")
	}
	scheme, address, found := strings.Cut(*endpoint, "://")
	if !found || scheme != "unix" {
		log.Fatalf("--endpoint must be unix://PATH, got %q", *endpoint)
	}
	for _, dir := range []string{*dataDir, *stateDir} {
		if err := os.MkdirAll(dir, 0750); err != nil {
			log.Fatal(err)
		}
	}
	d := &driver{stateFile: filepath.Join(*stateDir, "state.json"), mounter: mount.New("")}
	if err := os.Remove(address); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Fatal(err)
	}
	listener, err := net.Listen("unix", address)
	if err != nil {
		log.Fatal(err)
	}
	server := grpc.NewServer()
	csi.RegisterIdentityServer(server, d)
	csi.RegisterControllerServer(server, d)
	csi.RegisterNodeServer(server, d)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		server.GracefulStop()
	}()
	fmt.Fprintf(os.Stderr, "hostpathplugin stand-in serving on %s\n", address)
	if err := server.Serve(listener); err != nil {
		log.Fatal(err)
	}
}
