module pav.local/bench-csi-hostpath

go 1.24.0

require (
	github.com/container-storage-interface/spec v1.12.0
	google.golang.org/grpc v1.72.1
	k8s.io/mount-utils v0.34.4
)

require (
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	golang.org/x/net v0.38.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
	golang.org/x/text v0.23.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250218202821-56aae31c358a // indirect
	google.golang.org/protobuf v1.36.5 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/utils v0.0.0-20250604170112-4c0f3b243397 // indirect
)
