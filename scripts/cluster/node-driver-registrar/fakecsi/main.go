// Command fakecsi is a do-nothing CSI node plugin (Identity + NodeGetInfo)
// used by scripts/cluster/smoke-test to check that the node-driver-registrar
// image registers a driver with the kubelet (CSINode shows it).
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

var (
	endpoint = flag.String("endpoint", "unix:///csi/csi.sock", "CSI endpoint to serve")
	name     = flag.String("name", "smoke.pav.local", "driver name")
	nodeID   = flag.String("node-id", os.Getenv("NODE_NAME"), "node id")
)

type identity struct{ csi.UnimplementedIdentityServer }

func (*identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: *name, VendorVersion: "0.0.1"}, nil
}
func (*identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}
func (*identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

type node struct{ csi.UnimplementedNodeServer }

func (*node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: *nodeID}, nil
}
func (*node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func main() {
	flag.Parse()
	path := strings.TrimPrefix(*endpoint, "unix://")
	os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	csi.RegisterIdentityServer(g, &identity{})
	csi.RegisterNodeServer(g, &node{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); g.Stop() }()
	log.Printf("fake CSI node plugin %q serving on %s", *name, path)
	if err := g.Serve(lis); err != nil {
		log.Print(err)
	}
	os.Remove(path)
}
