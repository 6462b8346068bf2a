//! Serve any [`pav_sdk`] provisioner as a conformant CSI v1.12.0 driver
//! (with CSI v1.13's `NodeGetVolumeHealth`).
//!
//! # A complete driver
//!
//! This `main` serves the HostDir provisioner of
//! [pav-sdk's front page](pav_sdk#a-complete-provisioner) (its
//! `mod provisioner`): controller and node on one Unix socket, until
//! SIGTERM. It is `examples/hostdir/src/main.rs` of the repository, which
//! CI builds and runs csi-sanity against, so it is not compiled here.
//!
//! <!-- examples/hostdir/src/main.rs -->
//! ```ignore
//! //! A complete CSI driver: the HostDir provisioner (a directory per volume
//! //! within a capacity budget) served by pav-csi. Run it as root, with no
//! //! cluster, and talk CSI to its socket (scripts/csi-sanity.sh does):
//! //!
//! //! ```text
//! //! cargo run -p hostdir -- --endpoint /tmp/hostdir.sock --dir /tmp/hostdir --node-id $(hostname)
//! //! ```
//! //!
//! //! `--log-format json` logs one JSON object per line, for log collectors.
//!
//! mod provisioner;
//!
//! use std::path::PathBuf;
//!
//! use clap::Parser;
//!
//! use crate::provisioner::HostDir;
//!
//! /// Serve HostDir volumes as a CSI driver on a Unix socket.
//! #[derive(Debug, Parser)]
//! struct Cli {
//!     /// Unix socket to serve on (`unix://` prefix accepted, as CSI sidecars pass it).
//!     #[arg(long)]
//!     endpoint: String,
//!     /// Directory holding the volumes.
//!     #[arg(long, default_value = "/var/lib/hostdir")]
//!     dir: PathBuf,
//!     /// Bytes all volumes together may reserve.
//!     #[arg(long, default_value_t = 16 << 30)]
//!     budget: u64,
//!     /// This node's id, for the node service (CSI `NodeGetInfo`).
//!     #[arg(long)]
//!     node_id: String,
//!     /// Kubelet's root directory: volumes are staged and published only inside it.
//!     #[arg(long, default_value = pav_csi::DEFAULT_KUBELET_DIR)]
//!     kubelet_dir: PathBuf,
//!     /// Log format: text (coloured only on a terminal) or json.
//!     #[arg(long, default_value_t)]
//!     log_format: pav_csi::logging::LogFormat,
//! }
//!
//! // #[tokio::main] needs tokio's "macros" and "rt-multi-thread" features;
//! // pav-csi enables what it needs itself.
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let cli = Cli::parse();
//!     // pav-csi logs each call through `tracing`: without a subscriber, a
//!     // driver logs nothing. RUST_LOG=debug shows more.
//!     pav_csi::logging::init(cli.log_format);
//!     let socket = PathBuf::from(cli.endpoint.trim_start_matches("unix://"));
//!
//!     // Every touch point HostDir implements: Create, Delete, Stage, Stats.
//!     let provisioner = pav_sdk::provisioner!(HostDir::new(cli.dir, cli.budget)?);
//!     // Controller and node on one socket; a cluster runs one controller
//!     // (with the external-provisioner sidecar) and a node plugin per node.
//!     pav_csi::Driver::builder("hostdir.example.com")
//!         .provisioner(provisioner)
//!         .serve_controller(&socket)
//!         .serve_node(&socket, cli.node_id)
//!         .kubelet_dir(cli.kubelet_dir)
//!         .run() // until SIGTERM or SIGINT
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! Its `Cargo.toml` dependencies: `pav-sdk`, `pav-csi` (feature `logging`),
//! `clap` (feature `derive`) and `tokio` with
//! the features `macros` and `rt-multi-thread`, which `#[tokio::main]`
//! needs; pav-csi enables the runtime features it uses itself (`net`,
//! `signal`, `sync`, `time`, `fs`).
//!
//! # Cargo features
//!
//! | Feature | What it adds |
//! |---|---|
//! | `logging` | `pav_csi::logging`: the log set-up of a driver's `main` (text coloured only on a terminal, or JSON lines; `RUST_LOG` filter) |
//! | `kube` | `DriverBuilder::claim_lookup`: the claim's labels, annotations and selected node, read from the API server for Create; `config_map_store::ConfigMapStore`: records in ConfigMaps, shared by a controller and node plugins deployed apart (Rust 1.89; the binary picks k8s-openapi's Kubernetes version feature and kube's TLS) |
//! | `populator` | `pav_csi::populator::Populator`: Kubernetes' volume populator protocol for a [`pav_sdk::Populate`] driver (claims whose `dataSourceRef` names one of its kinds: a prime claim in the driver's namespace, filled, then handed over), with kube's runtime; implies `kube` |
//! | `testing` | `pav_csi::testing`, for a provisioner's own `cargo test` (enable it under `[dev-dependencies]`): `Harness` serves the provisioner in-process on a socket in a temporary directory, with Identity, Controller and Node clients; `Conformance` runs named checks (`Check::ALL`: repeated Create, Delete of what is gone, repeated Stage and Unstage with a Delete while staged, repeated Publish and Unpublish, repeated Attach and Detach, Expand, a snapshot round trip, a group snapshot round trip, hostile ids and paths, Modify, Health) as csi-sanity would, without Go |
//!
//! # Logging
//!
//! pav-csi logs through [`tracing`](https://docs.rs/tracing): each
//! mutating call (Create/Delete/Expand/Modify/Publish/Unpublish volume, Create/Delete snapshot,
//! Create/Delete volume group snapshot,
//! Node Stage/Unstage/Publish/Unpublish/Expand) at `info` when it starts
//! its work (with the volume id or name), and every failure of one, from
//! the request check to the last step, as one `<RPC> failed` line with its
//! code and message: at `warn` when the caller takes it as final
//! (`INTERNAL`, `INVALID_ARGUMENT`, `NOT_FOUND`, ...), at `info` when it
//! calls again (`ABORTED`, `UNAVAILABLE`, `RESOURCE_EXHAUSTED`,
//! `DEADLINE_EXCEEDED`, `CANCELLED`); the deletion of a volume whose
//! Create answer CSI cannot carry at `error`. A driver without
//! a subscriber logs nothing at all: install one in `main`, as above
//! (`logging::init`, with the cargo feature `logging`: text coloured only
//! on a terminal, or JSON lines, filtered by `RUST_LOG`), or your own.
//! Request strings are logged escaped (`Debug`), so a newline in an id or a
//! path cannot forge a log line, and secrets are never logged.
//!
//! # Where a provisioner keeps its data
//!
//! Outside kubelet's directory (`/var/lib/<driver>` on the node, say), or
//! in pav-csi's state directory ([`DriverBuilder::state_dir`], by default
//! `<kubelet dir>/plugins/<driver name>`; pav-csi uses its `staged/`).
//! pav-csi refuses staging and target paths only inside the state
//! directory: anywhere else in kubelet's directory one may lie over the
//! provisioner's data, and what is mounted there hides it (a tmpfs once
//! covered a provisioner's records that way, and the provisioner found
//! its volumes gone).
//!
//! # What pav-csi does so the provisioner does not have to
//!
//! | Concern | Where | Behaviour |
//! |---|---|---|
//! | Identity | `GetPluginInfo`, `GetPluginCapabilities`, `Probe` | name and version from the builder; `CONTROLLER_SERVICE` on controller sockets (and `GROUP_CONTROLLER_SERVICE` with [`pav_sdk::GroupSnapshot`]); `VOLUME_ACCESSIBILITY_CONSTRAINTS` when topology is configured |
//! | Capabilities | `ControllerGetCapabilities`, `NodeGetCapabilities` | derived from the touch points in the [`pav_sdk::Provisioner`] |
//! | Required fields, size limits | every RPC | `INVALID_ARGUMENT` naming the field; strings ≤ 128 bytes, maps ≤ 4 KiB, paths ≤ 4096 bytes, repeated fields ≤ 64 entries |
//! | Paths | node RPCs | staging and target paths must resolve inside the kubelet directory ([`DriverBuilder::kubelet_dir`]); publishing binds only a staging path recorded at stage time for the same volume; none may lie in or contain the state directory ([`DriverBuilder::state_dir`]), the one part of kubelet's directory kept free of mounts |
//! | Other volumes | node RPCs | a new stage or publish refuses a path that holds mounts (it would hide them) or lies inside a staged or published volume, and a target holding another volume; one operation per target path; unpublish removes only the empty file or directory it made; a stage that failed for good is undone at once (staging path unmounted, the provisioner's Unstage called, record removed; kept for the next NodeUnstageVolume if that Unstage fails); one answered with a code kubelet takes as still in progress (`CANCELLED`, `DEADLINE_EXCEEDED`, `UNAVAILABLE`, `RESOURCE_EXHAUSTED`, `ABORTED`) is left to kubelet's retry or NodeUnstageVolume |
//! | One operation per volume | every mutating RPC | a concurrent call for the same volume (or name) is `ABORTED`; a call runs to completion even when its client gives up (deadline passed, cancelled), keeping the volume until the provisioner returns |
//! | Claim | `CreateVolume` | [`pav_sdk::Claim`] from external-provisioner's `--extra-create-metadata` parameters; with the `kube` cargo feature and `DriverBuilder::claim_lookup`, also the claim's labels, annotations and selected node, read from the API server |
//! | Idempotency | `CreateVolume`, `CreateSnapshot` | the 1024 most recent answers of each cached by name; an incompatible repeat is `ALREADY_EXISTS` |
//! | Idempotency | `DeleteVolume`, `NodeUnstageVolume`, `NodeUnpublishVolume` | what is gone is success; checked against `/proc/self/mountinfo` |
//! | Ephemeral inline volumes | `NodePublishVolume`, `NodeUnpublishVolume` | with [`pav_sdk::Provisioner::ephemeral`]: a publish with `csi.storage.k8s.io/ephemeral: "true"` (checked as every publish; a `size` attribute that is no quantity `INVALID_ARGUMENT`) is recorded in the state directory, created (name: the volume id; Validate first), staged at the target and bound; a final failure undoes it; the unpublish of a recorded volume unmounts, unstages, deletes and forgets it, also after a restart; without the option such a publish is `INVALID_ARGUMENT` naming the key |
//! | Service-account tokens | `NodePublishVolume` | kubelet's `csi.storage.k8s.io/serviceAccount.tokens` (the CSIDriver's `tokenRequests`) taken out of `secrets` (`serviceAccountTokenInSecrets: true`), else `volume_context`, and out of both maps (whose 4 KiB limit is measured without it); with [`pav_sdk::Provisioner::stage_on_publish`] or an ephemeral volume, passed to Stage as [`pav_sdk::StageRequest::service_account_tokens`]; a value kubelet would not write is `INVALID_ARGUMENT` naming the key, never the value; a publish at a target published already that brings tokens (a `requiresRepublish: true` republish) runs Stage again with them and binds nothing, its failure the answer |
//! | Publishing | `NodePublishVolume` | bind mount of the staged directory (Filesystem) or device (Block, onto a file), read-only when asked |
//! | Usage | `NodeGetVolumeStats` | the provisioner's [`pav_sdk::Stats`] answer when it has one (then `VOLUME_CONDITION` is advertised and a missing condition is [`pav_sdk::Health`]'s, or healthy); otherwise, and as [`pav_sdk::StatsRequest::measured`], `statvfs` for filesystems, device size for blocks |
//! | Sizes answered | `CreateVolume`, `ControllerExpandVolume`, `NodeExpandVolume`, `GetCapacity`, snapshots, stats | a size or count that does not fit CSI's int64 is `INTERNAL` naming the field and value, never clamped; a created volume outside the requested range (0, "unknown", aside) is deleted and answered `INTERNAL` |
//! | Access modes | every RPC with a capability | those the provisioner declares ([`pav_sdk::Provisioner::access_modes`], default the single-node ones); `SINGLE_NODE_MULTI_WRITER` advertised (controller and node) when both single-node writer modes are served, so Kubernetes provisions `ReadWriteOncePod` claims |
//! | Expansion | `ControllerExpandVolume`, `NodeExpandVolume` | with [`pav_sdk::Expand`] / [`pav_sdk::NodeExpand`]: `capacity_range` required, an unknown volume or a path with no volume mounted is `NOT_FOUND`, an answer outside the range is `INTERNAL`; the `VolumeExpansion` plugin capability (`ONLINE`, or `OFFLINE`) |
//! | Volume attributes classes | `ControllerModifyVolume`, `CreateVolume`, `ValidateVolumeCapabilities` | with [`pav_sdk::Modify`]: `MODIFY_VOLUME` advertised; `volume_id` required, `mutable_parameters` and secrets within the map limit, an unknown volume `NOT_FOUND`, one call per volume, a request with no parameters answered `OK` without asking the provisioner, external-resizer's `--extra-modify-metadata` keys moved to [`pav_sdk::ModifyRequest::claim`]; `CreateVolume`'s `mutable_parameters` passed to Create (and Validate), compared on a repeat; without it, `CreateVolume` with `mutable_parameters` is `INVALID_ARGUMENT` (the spec: not to be sent unless `MODIFY_VOLUME` is advertised), `ValidateVolumeCapabilities` with them "not confirmed", `ControllerModifyVolume` `UNIMPLEMENTED` |
//! | Attach | `ControllerPublishVolume`, `ControllerUnpublishVolume`, `NodeStageVolume`, `NodeGetInfo` | with [`pav_sdk::Attach`]: `PUBLISH_UNPUBLISH_VOLUME` advertised (`PUBLISH_READONLY` when [`pav_sdk::Attach::attaches_read_only`], else a read-only attach is `INVALID_ARGUMENT`); `volume_id`, `node_id` and `volume_capability` required, its modes served, secrets and context within limits, an unknown volume `NOT_FOUND` (an unknown node is the provisioner's `NOT_FOUND`), one call per volume; the publish context answered checked (within the map limit, strings CSI carries, else `INTERNAL`); unpublish without a node id detaches from every node, and the provisioner's `NOT_FOUND` is success; `NodeStageVolume`'s `publish_context` passed to Stage ([`pav_sdk::StageRequest::publish_context`]); `max_volumes_per_node` reported from [`pav_sdk::Stage::max_volumes_now`] at each call, else [`pav_sdk::Provisioner::max_volumes_per_node`], unless [`DriverBuilder::max_volumes_per_node`] is set; with records, repeats, conflicts and full nodes answered by pav-sdk |
//! | Capacity | `GetCapacity` | with [`pav_sdk::Capacity`]: per topology segment; 0 without asking for volume capabilities the provisioner does not serve |
//! | Topology | `NodeGetInfo`, `CreateVolume` | [`DriverBuilder::node_topology`] reported by the node and advertised; `accessibility_requirements` passed to Create (bounded), its `accessible_topology` checked and returned |
//! | Volume health | `NodeGetVolumeHealth` (CSI v1.13) | with [`pav_sdk::Stats`] or [`pav_sdk::Health`]: `GET_VOLUME_HEALTH` advertised (with `VOLUME_CONDITION`: kubelets before Kubernetes' v1.37 read that one), else `UNIMPLEMENTED`; `volume_id` required; with `volume_publish_path`, the condition `NodeGetVolumeStats` carries and its codes (`NOT_FOUND` where nothing is mounted); without it, Health's answer to the controller's question (its `NOT_FOUND` for a volume that does not exist), or healthy without Health; healthy: no entry; abnormal: one, status from [`pav_sdk::HealthProblem`], [`pav_sdk::VolumeCondition::reason`] (`VolumeAbnormal` if empty) and message |
//! | Health | `ControllerGetVolume`, `ListVolumes`, `NodeGetVolumeStats` | with [`pav_sdk::Health`]: `VOLUME_CONDITION` advertised on the node, and with a listing `GET_VOLUME` and `VOLUME_CONDITION` on the controller; `ControllerGetVolume`: `volume_id` required, a volume not listed `NOT_FOUND`, the listed volume with the listing's condition or else Health's (no published node ids: pav-csi publishes nothing from the controller); listing entries and node stats without a condition take Health's |
//! | Listing | `ListVolumes` | with [`pav_sdk::List`]: sorted by handle, paged by tokens that name the last entry (a foreign token is `ABORTED`); conditions reported (and `VOLUME_CONDITION` advertised) when the provisioner says it has them |
//! | Snapshots | `CreateSnapshot`, `DeleteSnapshot`, `ListSnapshots` | with [`pav_sdk::Snapshot`]: name and source required, an unknown source volume `NOT_FOUND`, one call per name and source volume, recent answers cached by name (another source is `ALREADY_EXISTS`), listing filtered, sorted and paged |
//! | Group snapshots | `GroupControllerGetCapabilities`, `CreateVolumeGroupSnapshot`, `DeleteVolumeGroupSnapshot`, `GetVolumeGroupSnapshot` (the GroupController service, on every controller socket) | with [`pav_sdk::GroupSnapshot`]: `GROUP_CONTROLLER_SERVICE` and `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT` advertised; `name` as CSI's names, `source_volume_ids` required, at most 64, each an id within the limits, none twice, each existing (`NOT_FOUND`), the name and every source held while it runs (`ABORTED`); the answer checked (one member per source, each marked with the group's id, else `INTERNAL`), `ready_to_use` only when every member is; `group_snapshot_id` required for Delete and Get, their `snapshot_ids` within the limits; Delete of what is gone (the provisioner's `NOT_FOUND`) is success; Get's members compared with `snapshot_ids` (`INVALID_ARGUMENT`); members listed by `ListSnapshots` with their `group_snapshot_id`; without it every RPC of the service is `UNIMPLEMENTED` |
//! | Content sources | `CreateVolume` | a snapshot (with [`pav_sdk::Snapshot`]) or a volume (with [`pav_sdk::Provisioner::clones_volumes`]), else `INVALID_ARGUMENT`; a missing source `NOT_FOUND`, a limit below its size `OUT_OF_RANGE`, the source volume guarded while copied |
//! | Everything else | `ControllerGetVolume` without [`pav_sdk::Health`], `GetSnapshot`, snapshot metadata | `UNIMPLEMENTED`, not advertised |
//! | Socket | [`DriverBuilder::run`] | stale socket replaced, mode `0600`, removed on SIGTERM/SIGINT; at most 256 connections at once, each kept open as long as its client keeps it (the CSI sidecars exit when a connection is lost) |
//! | Secrets | logs | CSI messages with secrets have no `Debug`; [`pav_sdk::Secrets`] and [`pav_sdk::ServiceAccountTokens`] redact values |
//! | Logs | every RPC | request strings are logged escaped (`Debug`), so a newline in a path or id cannot forge a line; every failed mutating call is logged (`warn` when final for the caller) |
//! | Mounts | node RPCs; [`mount`] for provisioners | system calls and ioctls only, never a `mount`, `umount`, `resize2fs` or `xfs_growfs` program (the image need not hold them): the mount table parsed ([`mount::mounted_at`], [`mount::is_mounted`]), mounting with typed flags and data such as `size=64m` ([`mount::mount`], [`mount::mount_once`] for a Stage called again), [`mount::remount`] (a tmpfs grows), [`mount::unmount`] (nothing mounted is success), [`mount::unmount_below`], [`mount::block_device_size`] (`BLKGETSIZE64`), ext4 and xfs grown online ([`mount::grow_filesystem`]), a filesystem frozen for a consistent copy and thawed when the guard drops ([`mount::freeze`], `FIFREEZE`); each async, its blocking work on tokio's blocking threads ([`mount::blocking`] for code on one already), its error converting into a [`pav_sdk::Error`] of the category its step calls for (`FAILED_PRECONDITION` for a busy mount or another one in the way), so a provisioner writes `mount::mount_once(..).await?` |
//!
//! In the source, each RPC is a file of `controller/`, `group_controller/` or `node/` with a
//! `check` (the rows above that refuse a request: required fields, limits,
//! conversions, modes the provisioner serves, paths; no mount, record or
//! provisioner call), a `run`, and an error enum with one variant per
//! step that can fail, mapped to its gRPC code in one place (its
//! `impl From<...> for Status`); the shared checks (`limits.rs`,
//! `convert.rs`, `paths.rs`, ...) answer typed errors those enums wrap.
//! Conversions between CSI and pav-sdk are `convert.rs`, the node's mount
//! mechanics `node/binds.rs`, and the in-flight locks (`ABORTED`) are
//! keyed by `guard::Key`.

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

mod blocking_work;
#[cfg(feature = "kube")]
mod claims;
pub mod client;
mod completion;
#[cfg(feature = "kube")]
pub mod config_map_store;
mod connections;
mod controller;
mod convert;
mod create_cache;
mod driver;
mod ephemeral;
mod error;
pub mod files;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod group_controller;
mod guard;
mod identity;
mod limits;
#[cfg(feature = "logging")]
pub mod logging;
pub mod mount;
mod node;
mod node_dirs;
mod occupancy;
mod pages;
mod paths;
#[cfg(feature = "populator")]
pub mod populator;
mod shared;
mod staged;
#[cfg(feature = "testing")]
pub mod testing;

/// Generated CSI v1.12.0 messages, clients and servers (package `csi.v1`),
/// with CSI v1.13's `NodeGetVolumeHealth`.
#[allow(missing_docs, clippy::all)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

pub use convert::is_reserved_parameter;
pub use driver::{Driver, DriverBuilder};
pub use error::{Error, cause_repeated, error_chain};
pub use paths::DEFAULT_KUBELET_DIR;
