// Command csi-node-driver-registrar is a minimal stand-in for
// github.com/kubernetes-csi/node-driver-registrar, whose module the Go
// module proxy does not serve here (its v2 tags have no /v2 module path).
//
// It does what the upstream sidecar does for the kubelet plugin watcher:
// asks the CSI node plugin for its name (GetPluginInfo), serves the kubelet
// plugin-registration API on <plugin-registration-path>/<driver>-reg.sock,
// answers GetInfo with the kubelet-visible CSI endpoint, and writes a
// "registration" marker next to that endpoint once kubelet confirms, which
// --mode=kubelet-registration-probe checks (for liveness probes). Flags match
// the upstream names for the options it supports; unknown upstream flags that
// only tune logging/metrics are accepted and ignored.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

var version = "dev"

var (
	csiAddress       = flag.String("csi-address", "/run/csi/socket", "path of the CSI driver socket inside this container")
	kubeletRegPath   = flag.String("kubelet-registration-path", "", "path of the CSI driver socket on the host, as kubelet sees it")
	pluginRegPath    = flag.String("plugin-registration-path", "/registration", "kubelet's plugin registration directory inside this container")
	operationTimeout = flag.Duration("timeout", time.Second, "timeout of each GetPluginInfo call")
	httpEndpoint     = flag.String("http-endpoint", "", "address for /healthz (e.g. :9809); empty disables it")
	loggingFormat    = flag.String("logging-format", "text", `"text" or "json" (one object per line), as upstream's component-base flag`)
	mode             = flag.String("mode", "registration", "registration or kubelet-registration-probe")
	showVersion      = flag.Bool("version", false, "print the version and exit")
	_                = flag.Int("v", 0, "log verbosity (ignored)")
	_                = flag.String("health-port", "", "ignored (deprecated upstream)")
	_                = flag.Bool("enable-pprof", false, "ignored")
)

type server struct {
	registerapi.UnimplementedRegistrationServer
	driver   string
	endpoint string
	marker   string
}

func (s *server) GetInfo(ctx context.Context, req *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	log.Printf("kubelet asked for plugin info")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driver,
		Endpoint:          s.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *server) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.PluginRegistered {
		log.Printf("registration failed: %s; exiting so the container restarts", st.Error)
		os.Remove(s.marker)
		os.Exit(1)
	}
	log.Printf("registered with kubelet as %q", s.driver)
	if err := os.WriteFile(s.marker, []byte(s.driver+"\n"), 0o644); err != nil {
		log.Printf("cannot write %s: %v", s.marker, err)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func driverName(ctx context.Context) (string, error) {
	target := *csiAddress
	if !strings.Contains(target, "://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	for {
		cctx, cancel := context.WithTimeout(ctx, *operationTimeout)
		resp, err := csi.NewIdentityClient(conn).GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			if resp.GetName() == "" {
				return "", errors.New("CSI driver returned an empty name")
			}
			return resp.GetName(), nil
		}
		log.Printf("waiting for CSI driver at %s: %v", *csiAddress, err)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func main() {
	flag.Parse()
	switch *loggingFormat {
	case "text":
		log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	case "json":
		// The log package's output then goes through this handler.
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	default:
		log.Fatalf("unknown --logging-format %q: text or json", *loggingFormat)
	}
	if *showVersion {
		fmt.Println(os.Args[0], version)
		return
	}
	if *kubeletRegPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	marker := filepath.Join(filepath.Dir(*kubeletRegPath), "registration")
	if *mode == "kubelet-registration-probe" {
		if _, err := os.Stat(marker); err != nil {
			log.Fatalf("not registered with kubelet: %v", err)
		}
		fmt.Println("registered:", marker)
		return
	}
	if *mode != "registration" {
		log.Fatalf("unknown --mode %q", *mode)
	}
	log.Printf("csi-node-driver-registrar (pav stand-in) %s", version)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	name, err := driverName(ctx)
	if err != nil {
		log.Fatalf("cannot get CSI driver name: %v", err)
	}
	log.Printf("CSI driver name: %q", name)

	sock := filepath.Join(*pluginRegPath, name+"-reg.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Fatalf("cannot remove stale %s: %v", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("cannot listen on %s: %v", sock, err)
	}
	g := grpc.NewServer()
	registerapi.RegisterRegistrationServer(g, &server{driver: name, endpoint: *kubeletRegPath, marker: marker})

	if *httpEndpoint != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			if _, err := os.Stat(sock); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		go func() { log.Print(http.ListenAndServe(*httpEndpoint, mux)) }()
	}
	go func() {
		<-ctx.Done()
		log.Printf("stopping")
		g.Stop()
	}()
	log.Printf("serving kubelet registration on %s", sock)
	ours, err := os.Stat(sock)
	if err != nil {
		log.Fatalf("cannot stat %s: %v", sock, err)
	}
	if err := g.Serve(lis); err != nil {
		log.Printf("serve: %v", err)
	}
	removeIfOurs(sock, marker, ours)
}

// removeIfOurs removes the registration socket and the marker unless
// another instance has bound the socket since: a DaemonSet pod deleted
// with no grace period is replaced while its containers still stop, and
// removing the new instance's socket makes kubelet unregister the driver
// (upstream's sidecar has this race). Inode numbers are reused at once, so
// the same file is also checked for a listener.
func removeIfOurs(sock, marker string, ours os.FileInfo) {
	now, err := os.Stat(sock)
	if err != nil {
		return
	}
	if os.SameFile(ours, now) {
		if conn, err := net.Dial("unix", sock); err != nil {
			os.Remove(sock)
			os.Remove(marker)
			return
		} else {
			conn.Close()
		}
	}
	log.Printf("leaving %s: another instance has bound it since", sock)
}
