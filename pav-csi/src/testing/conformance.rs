//! Named conformance checks, each against a fresh [`Harness`]: the
//! runner, on top of the checks, their context and their report.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use pav_sdk::{Provisioner, Topology, VolumeMode};

use super::checks;
use super::context::{Ctx, Settings};
use super::harness::{Harness, HarnessBuilder, Source};
use super::report::{Check, Failure, Failures, Outcome, Report};

/// Named conformance checks of a provisioner served by pav-csi: what
/// csi-sanity checks for the same cases, without Go, from `cargo test`.
///
/// Each check starts its own [`Harness`] (a fresh temporary directory),
/// discovers what the driver advertises through CSI (as csi-sanity does),
/// runs, removes what it created (also when it fails) and stops the
/// driver. A check whose capability is not advertised is
/// [`Outcome::Skipped`], never passed; one that could run only in part
/// (for instance without the node service) is [`Outcome::Partly`].
///
/// Where pav-csi answers a call without the provisioner (its cache of
/// recent `CreateVolume` and `CreateSnapshot` answers), the checks repeat
/// the call after [`Harness::restart`], so that the provisioner's own
/// answer is checked: that is what a driver restarted between a call and
/// its retry gets. A provisioner given with [`with_storage`](Self::with_storage)
/// is built again on each restart, from its storage directory.
///
/// Volumes are created with the first volume mode the provisioner serves
/// (Filesystem before Block, or [`volume_mode`](Self::volume_mode)) and
/// the access mode `SINGLE_NODE_WRITER` (else the first it serves), with
/// `required_bytes` [`volume_size`](Self::volume_size) (64 MiB unless
/// set) and the StorageClass [`parameters`](Self::parameters). When the
/// node reports topology, Create asks for it (`requisite`), as csi-sanity
/// does. The node checks mount, which needs root (`CAP_SYS_ADMIN`).
pub struct Conformance {
    source: Source,
    controller_only: bool,
    node_topology: Topology,
    driver_name: Option<String>,
    /// What the checks read.
    settings: Settings,
}

impl fmt::Debug for Conformance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conformance")
            .field("controller_only", &self.controller_only)
            .field("node_topology", &self.node_topology)
            .field("volume_mode", &self.settings.volume_mode)
            .field("volume_size", &self.settings.volume_size)
            .field("expanded_size", &self.settings.expanded_size)
            .finish_non_exhaustive()
    }
}

impl Conformance {
    /// Checks `provisioner`; each restart serves the same value again.
    ///
    /// Its storage is its own, outside the harness: the hostile-id check
    /// then sends no id that climbs (`..`, `../x`), which a wrong
    /// provisioner would follow out of that storage. Prefer
    /// [`with_storage`](Self::with_storage), which checks those too.
    pub fn new<P: Send + Sync + 'static>(provisioner: Provisioner<P>) -> Self {
        Self::from_source(Source::value(provisioner))
    }

    /// Checks the provisioner `make` builds on a storage directory of the
    /// harness ([`Harness::storage_dir`]): called once per check and again
    /// on each restart, so that only what the storage holds carries over.
    /// The hostile-id check then also sends ids that climb, and watches the
    /// decoys around that directory: an id like `../pav-testing-victim`
    /// must not reach them. `make` must keep everything below the
    /// directory it is given.
    pub fn with_storage<P, F>(make: F) -> Self
    where
        P: Send + Sync + 'static,
        F: Fn(&Path) -> Provisioner<P> + Send + Sync + 'static,
    {
        Self::from_source(Source::make(make))
    }

    fn from_source(source: Source) -> Self {
        Conformance {
            source,
            controller_only: false,
            node_topology: Topology::new(),
            driver_name: None,
            settings: Settings {
                volume_mode: None,
                volume_size: 64 << 20,
                expanded_size: None,
                parameters: HashMap::new(),
                mutable_parameters: HashMap::new(),
                damage: None,
            },
        }
    }

    /// Serves the controller only ([`HarnessBuilder::controller_only`]):
    /// the node parts of the checks do not run (no root needed).
    pub fn controller_only(mut self) -> Self {
        self.controller_only = true;
        self
    }

    /// The node's topology segments ([`HarnessBuilder::node_topology`]).
    pub fn node_topology(mut self, topology: Topology) -> Self {
        self.node_topology = topology;
        self
    }

    /// The driver name (default `testing.pav.example.com`).
    pub fn driver_name(mut self, name: impl Into<String>) -> Self {
        self.driver_name = Some(name.into());
        self
    }

    /// The volume mode of the volumes the checks create (default:
    /// Filesystem when the provisioner serves it, else Block).
    pub fn volume_mode(mut self, mode: VolumeMode) -> Self {
        self.settings.volume_mode = Some(mode);
        self
    }

    /// The `required_bytes` of the volumes the checks create (default 64
    /// MiB, as `scripts/csi-sanity.sh` passes `--csi.testvolumesize`).
    pub fn volume_size(mut self, bytes: u64) -> Self {
        self.settings.volume_size = bytes;
        self
    }

    /// The size [`expand`](Self::expand) grows volumes to (default: twice
    /// [`volume_size`](Self::volume_size)).
    pub fn expanded_size(mut self, bytes: u64) -> Self {
        self.settings.expanded_size = Some(bytes);
        self
    }

    /// StorageClass parameters for every `CreateVolume` (csi-sanity's
    /// `--csi.testvolumeparameters`).
    pub fn parameters<K: Into<String>, V: Into<String>>(
        mut self,
        parameters: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.settings.parameters = (parameters.into_iter())
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// VolumeAttributesClass parameters [`modify`](Self::modify) sets on
    /// a volume (csi-sanity's `--csi.testvolumemutableparameters`);
    /// without them it only checks that an unknown volume is `NOT_FOUND`.
    pub fn mutable_parameters<K: Into<String>, V: Into<String>>(
        mut self,
        parameters: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.settings.mutable_parameters = (parameters.into_iter())
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// How to damage a volume, for [`health`](Self::health): `damage`
    /// gets the storage directory ([`Harness::storage_dir`]) and the
    /// volume id, and breaks the volume the way the provisioner's
    /// [`Health`](pav_sdk::Health) must notice (a corrupt file, not a
    /// missing volume: the controller answers `NOT_FOUND` for that). It
    /// runs while the volume is published, when the node service is
    /// served.
    pub fn damage<F>(mut self, damage: F) -> Self
    where
        F: Fn(&Path, &str) -> std::io::Result<()> + Send + Sync + 'static,
    {
        self.settings.damage = Some(Arc::new(damage));
        self
    }

    /// A harness for one check.
    async fn harness(&self) -> Result<Harness, String> {
        let mut builder: HarnessBuilder = Harness::builder()
            .map_err(|e| format!("starting the harness: {}", crate::error_chain(&e)))?
            .node_topology(self.node_topology.clone());
        if let Some(name) = &self.driver_name {
            builder = builder.driver_name(name.clone());
        }
        if self.controller_only {
            builder = builder.controller_only();
        }
        (builder.serve(self.source.clone()).await)
            .map_err(|e| format!("starting the driver: {}", crate::error_chain(&e)))
    }

    /// Runs one check.
    pub async fn run(&self, check: Check) -> Result<Outcome, Failure> {
        (self.run_check(check).await).map_err(|message| Failure { check, message })
    }

    /// Runs `check` against a fresh harness, removes what it left and
    /// stops the driver.
    async fn run_check(&self, check: Check) -> Result<Outcome, String> {
        let harness = self.harness().await?;
        let mut ctx = Ctx::new(&self.settings, harness).await?;
        let result = match check {
            Check::RepeatedCreate => checks::repeated_create(&mut ctx).await,
            Check::DeleteUnknownVolume => checks::delete_unknown_volume(&mut ctx).await,
            Check::StageUnstageRepeats => checks::stage_unstage_repeats(&mut ctx).await,
            Check::PublishUnpublishRepeats => checks::publish_unpublish_repeats(&mut ctx).await,
            Check::AttachDetachRepeats => checks::attach_detach_repeats(&mut ctx).await,
            Check::Expand => checks::expand(&mut ctx).await,
            Check::SnapshotRoundTrip => checks::snapshot_round_trip(&mut ctx).await,
            Check::GroupSnapshotRoundTrip => checks::group_snapshot_round_trip(&mut ctx).await,
            Check::HostileIdsAndPaths => checks::hostile_ids_and_paths(&mut ctx).await,
            Check::Modify => checks::modify(&mut ctx).await,
            Check::Health => checks::health(&mut ctx).await,
        };
        ctx.clean_up().await;
        let stopped = ctx.h.shutdown().await;
        let outcome = result.map_err(|message| match is_root() {
            true => message,
            false => format!(
                "{message} (not running as root: the node service mounts, which needs \
                 CAP_SYS_ADMIN; Conformance::controller_only checks without it)"
            ),
        })?;
        stopped.map_err(|e| format!("stopping the driver: {}", crate::error_chain(&e)))?;
        Ok(outcome)
    }

    /// Runs every check ([`Check::ALL`]), each to its end: a report of
    /// all of them, or [`Failures`] (the same report) when any failed.
    pub async fn run_all(&self) -> Result<Report, Failures> {
        let mut results = Vec::new();
        for check in Check::ALL {
            results.push((check, self.run(check).await));
        }
        let report = Report { results };
        match report.failures().is_empty() {
            true => Ok(report),
            false => Err(Failures(report)),
        }
    }

    /// CreateVolume of a name seen before answers the same volume, also
    /// from the provisioner itself.
    ///
    /// Needs `CREATE_DELETE_VOLUME`. Creates a volume (`required_bytes`
    /// and `limit_bytes` the volume size, as csi-sanity); asks again: the
    /// same `volume_id` and size (csi-sanity: "should not fail when
    /// requesting to create a volume with already existing name and same
    /// capacity"); restarts the driver and asks again: the same (pav-csi's
    /// cache answered before; now the provisioner does); asks with twice
    /// the size: `ALREADY_EXISTS` ("... different capacity"), from the
    /// provisioner; `ValidateVolumeCapabilities` with the capability it
    /// was created with: confirmed; a 128-byte name: created ("maximum-length
    /// name"); deletes the volume: `ValidateVolumeCapabilities` is then
    /// `NOT_FOUND` (`Create::exists` reads the storage).
    pub async fn repeated_create(&self) -> Result<Outcome, Failure> {
        self.run(Check::RepeatedCreate).await
    }

    /// Deleting what does not exist succeeds.
    ///
    /// Needs `CREATE_DELETE_VOLUME`. `DeleteVolume` of an id never issued
    /// (csi-sanity's `reallyfakevolumeid`, and one shaped like a real
    /// handle): `OK` ("should succeed when an invalid volume id is used");
    /// `ValidateVolumeCapabilities` of it: `NOT_FOUND` ("should fail when
    /// the requested volume does not exist"); a volume created, deleted,
    /// and deleted again, also after a restart: `OK` each time. pav-csi
    /// counts the provisioner's `NotFound` from Delete as success, but
    /// any other error (an `io::Error` of a missing directory is
    /// `Internal`) reaches the caller, and external-provisioner retries
    /// it forever.
    pub async fn delete_unknown_volume(&self) -> Result<Outcome, Failure> {
        self.run(Check::DeleteUnknownVolume).await
    }

    /// NodeStageVolume and NodeUnstageVolume repeated succeed, mount once
    /// and keep the data.
    ///
    /// Needs the node service with `STAGE_UNSTAGE_VOLUME` and
    /// `CREATE_DELETE_VOLUME`. Creates a volume; stages it three times at
    /// one staging path: `OK` each time (csi-sanity's idempotent node
    /// lifecycle), and one mount at the path, not a stack (a Stage that
    /// mounts at its target path asks
    /// [`is_mounted`](crate::mount::is_mounted) first); writes a marker
    /// (a file, or the device's first bytes); DeleteVolume of the staged
    /// volume: `FAILED_PRECONDITION` (the CO may send it before the last
    /// NodeUnstageVolume, when a claim is deleted with its pod; pav-csi
    /// refuses it while this process's node service holds the volume
    /// staged, and a provisioner whose controller runs elsewhere must
    /// refuse it itself); restarts the driver and stages again: `OK`;
    /// unstages twice: `OK`, nothing mounted at the path; stages again:
    /// the marker is there; unstages, deletes the volume, and nothing is
    /// left mounted in the kubelet directory.
    pub async fn stage_unstage_repeats(&self) -> Result<Outcome, Failure> {
        self.run(Check::StageUnstageRepeats).await
    }

    /// NodePublishVolume and NodeUnpublishVolume repeated succeed, publish
    /// once and keep the data.
    ///
    /// Needs the node service and `CREATE_DELETE_VOLUME`. Creates a volume
    /// and stages it (when `STAGE_UNSTAGE_VOLUME` is advertised); publishes
    /// it three times at one target path: `OK`, one mount there;
    /// `NodeGetVolumeStats` of the target: `OK` with usage (csi-sanity's
    /// node lifecycle); writes a marker through the target; unpublishes
    /// twice: `OK`, and the target path is gone ("should remove target
    /// path"); publishes again: the marker is there. With
    /// [`Provisioner::stage_on_publish`] these calls run Stage and Unstage
    /// themselves, so the repeats reach the provisioner.
    pub async fn publish_unpublish_repeats(&self) -> Result<Outcome, Failure> {
        self.run(Check::PublishUnpublishRepeats).await
    }

    /// ControllerPublishVolume and ControllerUnpublishVolume repeated
    /// answer the same: an attach its publish context, a detach `OK`.
    ///
    /// Needs `PUBLISH_UNPUBLISH_VOLUME` ([`pav_sdk::Attach`]) and
    /// `CREATE_DELETE_VOLUME`. Creates a volume; attaches it to the node
    /// (the node service's `NodeGetInfo` id, or the harness's
    /// [`node_id`](super::HarnessBuilder::node_id) when controller only):
    /// `OK`; again: `OK` with the same publish context (csi-sanity's
    /// idempotent "volume lifecycle"); an unknown volume: `NOT_FOUND`;
    /// detaches twice: `OK`; attaches again: `OK`. The volume is
    /// detached at the end, also when a step fails.
    pub async fn attach_detach_repeats(&self) -> Result<Outcome, Failure> {
        self.run(Check::AttachDetachRepeats).await
    }

    /// ControllerExpandVolume and NodeExpandVolume grow a volume, answer
    /// repeats, and never shrink it.
    ///
    /// Needs `EXPAND_VOLUME` of the controller or of the node. Creates a
    /// volume; `ControllerExpandVolume` to the expanded size: `OK`, at
    /// least that size (csi-sanity: "should work"; it wants exactly that
    /// size); again: `OK`, the same; with the original, smaller size (a
    /// stale retry): `OK`, still at least the expanded size; of an unknown
    /// volume: `NOT_FOUND`. With the node service and its `EXPAND_VOLUME`:
    /// stages and publishes the volume, `NodeExpandVolume` at the target
    /// path: `OK` (csi-sanity: "should work if node-expand is called after
    /// node-publish"), twice; of an unknown volume: `NOT_FOUND`.
    pub async fn expand(&self) -> Result<Outcome, Failure> {
        self.run(Check::Expand).await
    }

    /// A snapshot is taken, answered again, listed, restored and deleted.
    ///
    /// Needs `CREATE_DELETE_SNAPSHOT` and `CREATE_DELETE_VOLUME`. Creates a
    /// volume (and, with the node service, stages it and writes a marker);
    /// `CreateSnapshot`: `OK`, with an id, the source volume id and a
    /// creation time, asked again until `ready_to_use`; again, and again
    /// after a restart (answered by the provisioner): the same snapshot id;
    /// with `LIST_SNAPSHOTS`, `ListSnapshots` by its id: that snapshot
    /// alone, by its source: it among them; the same name for another
    /// volume: `ALREADY_EXISTS`; `CreateVolume` from the snapshot: `OK`,
    /// echoing the source (and, staged, holding the marker); from an
    /// unknown snapshot: `NOT_FOUND`; `DeleteSnapshot`: `OK`, twice, also
    /// of `reallyfakesnapshotid`; then no longer listed.
    pub async fn snapshot_round_trip(&self) -> Result<Outcome, Failure> {
        self.run(Check::SnapshotRoundTrip).await
    }

    /// A group snapshot taken, answered again (also after a restart), got,
    /// listed, restored and deleted.
    ///
    /// Needs the `GROUP_CONTROLLER_SERVICE` plugin capability with
    /// `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT` ([`pav_sdk::GroupSnapshot`])
    /// and `CREATE_DELETE_VOLUME`. Creates two volumes (and, with the node
    /// service, writes a marker into each); `CreateVolumeGroupSnapshot` of
    /// both: `OK`, with a group id, a creation time and one member per
    /// volume, each carrying the group's id, asked again until
    /// `ready_to_use`; again, and again after a restart (answered by the
    /// provisioner): the same group and members; the same name with one
    /// volume: `ALREADY_EXISTS`; `GetVolumeGroupSnapshot` with the
    /// members' ids: the same group, of a group never taken: `NOT_FOUND`;
    /// with `LIST_SNAPSHOTS`, `ListSnapshots` by each member's id: it alone,
    /// with the group's id; `CreateVolume` from each member: `OK` (and,
    /// staged, holding the marker); `DeleteVolumeGroupSnapshot`: `OK`,
    /// twice; then `GetVolumeGroupSnapshot` is `NOT_FOUND` and no member is
    /// listed.
    pub async fn group_snapshot_round_trip(&self) -> Result<Outcome, Failure> {
        self.run(Check::GroupSnapshotRoundTrip).await
    }

    /// ControllerModifyVolume applies a volume attributes class, answers
    /// repeats, refuses unknown volumes, and what it set survives a restart.
    ///
    /// Needs `MODIFY_VOLUME` (the provisioner has
    /// [`Modify`](pav_sdk::Modify)) and `CREATE_DELETE_VOLUME`.
    /// `ControllerModifyVolume` of a volume never created: `NOT_FOUND`
    /// (csi-sanity: "should fail when the volume does not exist"). With
    /// [`mutable_parameters`](Self::mutable_parameters): creates a volume
    /// without them; modifies it: `OK`, twice (a retry); restarts the
    /// driver and repeats `CreateVolume` with the mutable parameters it
    /// was modified to: `OK`, the same volume (a provisioner that kept the
    /// new parameters in memory only answers `ALREADY_EXISTS`: the repeat
    /// is compared with what it was created with); modifies it again
    /// after the restart: `OK`; deletes it.
    pub async fn modify(&self) -> Result<Outcome, Failure> {
        self.run(Check::Modify).await
    }

    /// What the controller and the node say of a volume's condition.
    ///
    /// Needs [`Health`](pav_sdk::Health) and `CREATE_DELETE_VOLUME`.
    /// Creates a volume. With `GET_VOLUME`: `ControllerGetVolume` without
    /// an id: `INVALID_ARGUMENT`; of an unknown volume: `NOT_FOUND`; of the
    /// volume: `OK`, that volume, a condition, not abnormal. With the node
    /// service: stages and publishes it; `NodeGetVolumeStats`: a
    /// condition, not abnormal; with `GET_VOLUME_HEALTH`,
    /// `NodeGetVolumeHealth` with the publish path and without one (as
    /// csi-sanity asks): `OK`, that volume, no health status. With
    /// [`damage`](Self::damage): damages the volume; both then answer
    /// abnormal, with a message, and `NodeGetVolumeHealth` one health
    /// status: a status kubelet knows, a CamelCase reason
    /// ([`VolumeCondition::because`](pav_sdk::VolumeCondition::because))
    /// and a message. Unpublishes, unstages and deletes it.
    pub async fn health(&self) -> Result<Outcome, Failure> {
        self.run(Check::Health).await
    }

    /// Ids and paths a client crafts reach nothing outside the driver's
    /// places.
    ///
    /// Ids: `-rf`, one with a newline, one with a NUL byte, 128 bytes, 129
    /// bytes (refused by pav-csi: `INVALID_ARGUMENT`) and, when the
    /// provisioner is built on the harness's storage directory
    /// ([`with_storage`](Self::with_storage)), ids that climb: `.`, `..`,
    /// `../pav-testing-victim` with one to four `..`,
    /// `a/../../pav-testing-victim` and `pav-testing-victim/../..`. For
    /// each: `DeleteVolume`: `OK` (nothing by that id exists);
    /// `ValidateVolumeCapabilities`, `ControllerExpandVolume`,
    /// `CreateSnapshot` from it, `CreateVolume` from it as a snapshot,
    /// `NodeStageVolume` (or, staging on publish, `NodePublishVolume`):
    /// `NOT_FOUND`, as [`VolumeId::path_component`](pav_sdk::VolumeId::path_component)'s
    /// error is, and nothing mounted; `DeleteSnapshot`: `OK`;
    /// `CreateVolume` named so: refused with `INVALID_ARGUMENT`, or
    /// created and then deleted. Paths, for a real volume: a staging or
    /// target path that is relative, has `..`, a NUL byte, lies outside
    /// the kubelet directory, leads out through a symlink, is longer than
    /// 4096 bytes, or lies in the driver's state directory:
    /// `INVALID_ARGUMENT`. Afterwards nothing in the temporary directory
    /// outside the kubelet and storage directories was created, changed
    /// or removed (the decoys next to each ancestor of the storage
    /// directory among them) or mounted on.
    ///
    /// # Safe for the storage under test
    ///
    /// The check is written for provisioners that get ids wrong, so what a
    /// wrong one does with its ids must stay in the harness:
    ///
    /// * No id is an absolute path: `Path::join` of one replaces the base,
    ///   so a provisioner removing `root.join(id)` would remove the id
    ///   itself (`/`: everything).
    /// * Every id, joined to the storage directory or to a directory below
    ///   it, stays inside the harness's temporary directory (the check
    ///   verifies this before it sends one): a provisioner that joins ids
    ///   without `path_component` removes a decoy there, and the check
    ///   fails naming it.
    /// * A provisioner given with [`Conformance::new`] keeps its storage
    ///   in a directory of its own, outside the harness: an id that climbs
    ///   from there (`..`, `../x`) would reach that directory's real
    ///   parent. Those ids are then not sent, and the check is
    ///   [`Outcome::Partly`], saying so. To have them sent, build the
    ///   provisioner on the directory the harness gives:
    ///   `Conformance::with_storage(|dir| ...)`.
    pub async fn hostile_ids_and_paths(&self) -> Result<Outcome, Failure> {
        self.run(Check::HostileIdsAndPaths).await
    }
}

/// Whether this process runs as root (`/proc/self` belongs to its user).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
