//! pav_csi::testing against a provisioner that keeps every rule, and
//! against the same provisioner with one author's mistake at a time: each
//! mistake fails the check meant to find it (and a conforming provisioner
//! passes them all). Every mistake here is one pav-csi cannot mask: it
//! answers repeats from its cache only until a restart, counts only
//! `NotFound` from Delete as success, and passes ids on untouched.
//! The node checks mount: those tests are `#[ignore]`d, and `.ci/run`
//! runs them as root.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use pav_csi::testing::{Check, Conformance, Harness, Outcome};
use pav_sdk::{Attach, AttachRequest, Attached, DetachRequest};
use pav_sdk::{
    ContentSource, Create, CreateRequest, Delete, DeleteGroupSnapshotRequest, DeleteRequest,
    DeleteSnapshotRequest, Error, Expand, ExpandRequest, Expanded, GetGroupSnapshotRequest,
    GroupSnapshot, GroupSnapshotInfo, GroupSnapshotRequest, Health, HealthProblem, HealthRequest,
    List, ListedVolume, Modify, ModifyRequest, NodeExpand, NodeExpandRequest, Parameters,
    Provisioner, Result, Snapshot, SnapshotInfo, SnapshotRequest, Stage, StageRequest, Staged,
    Volume, VolumeCondition, VolumeId, async_trait,
};

/// The mistakes [`Dirs`] can make, each one an author's.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// Create makes a new volume for a name it has seen.
    fresh_volume_per_create: bool,
    /// Create answers the volume it has for a name, whatever the request.
    create_ignores_request: bool,
    /// Delete fails (`io::Error`, so `Internal`) for a volume that is gone.
    delete_fails_when_gone: bool,
    /// Expand sets the size asked for, also a smaller one.
    expand_shrinks: bool,
    /// create_snapshot takes a name used for another volume's snapshot again.
    snapshot_name_taken_again: bool,
    /// Delete joins the id to its directory without `path_component`.
    delete_joins_raw_ids: bool,
    /// Stage mounts the volume at the staging path every time it is called.
    stage_mounts_again: bool,
    /// create_group_snapshot takes a new group for a name it has seen.
    fresh_group_per_create: bool,
    /// Attach attaches anew each time, to a new device.
    attach_anew_each_time: bool,
    /// Modify keeps the new parameters in memory only: a restart forgets them.
    modify_in_memory: bool,
    /// Health says every volume is healthy, without looking.
    health_never_looks: bool,
    /// Health's reason is words, not one CamelCase word.
    health_reason_in_words: bool,
}

/// The temporary directory of the harness whose storage directory is
/// `root` (`<temporary directory>/a/b/c/storage`), canonical; `None` for a
/// root laid out otherwise or not in the system's temporary directory.
fn sandbox_of(root: &Path) -> Option<PathBuf> {
    if !root.ends_with("a/b/c/storage") {
        return None;
    }
    let sandbox = root.ancestors().nth(4)?.canonicalize().ok()?;
    let temp = std::env::temp_dir().canonicalize().ok()?;
    (sandbox.parent() == Some(temp.as_path())).then_some(sandbox)
}

/// `path`, canonical, when it exists strictly inside the temporary
/// directory of the harness whose storage directory is `root`: the only
/// place where the planted mistakes below may remove or mount anything.
fn fenced(root: &Path, path: &Path) -> Option<PathBuf> {
    let sandbox = sandbox_of(root)?;
    let path = path.canonicalize().ok()?;
    (path.starts_with(&sandbox) && path != sandbox).then_some(path)
}

/// Volumes as directories under a root, with their size in a file;
/// snapshots as copies. Everything is read from the root, so a new value
/// on the same root (a restart) knows what the old one made.
struct Dirs {
    root: PathBuf,
    faults: Faults,
    /// With `modify_in_memory`: each volume's parameters as modified.
    modified: std::sync::Mutex<std::collections::HashMap<String, Parameters>>,
}

impl Dirs {
    fn volume(&self, id: &VolumeId) -> Result<PathBuf> {
        Ok(self.root.join("volumes").join(id.path_component()?))
    }

    fn snapshot(&self, id: &VolumeId) -> Result<PathBuf> {
        Ok(self.root.join("snapshots").join(id.path_component()?))
    }

    fn size(dir: &Path) -> Result<Option<u64>> {
        match std::fs::read_to_string(dir.join("size")) {
            Ok(text) => Ok(Some(text.trim().parse().map_err(Error::internal)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Copies the files of `from/data` into `to/data`.
    fn copy_data(from: &Path, to: &Path) -> Result<()> {
        std::fs::create_dir_all(to.join("data"))?;
        for entry in std::fs::read_dir(from.join("data"))? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), to.join("data").join(entry.file_name()))?;
            }
        }
        Ok(())
    }

    /// The mutable parameters recorded in `dir` (one `key=value` a line).
    fn attributes(dir: &Path) -> Result<Parameters> {
        let text = match std::fs::read_to_string(dir.join("attributes")) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e.into()),
        };
        Ok((text.lines())
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    fn write_attributes(dir: &Path, attributes: &Parameters) -> Result<()> {
        let text: String = (attributes.iter())
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        Ok(std::fs::write(dir.join("attributes"), text)?)
    }

    fn read_snapshot(dir: &Path, handle: &str) -> Result<SnapshotInfo> {
        let source = std::fs::read_to_string(dir.join("source"))?;
        let created = std::fs::read_to_string(dir.join("created"))?;
        let created =
            UNIX_EPOCH + Duration::from_secs(created.trim().parse().map_err(Error::internal)?);
        let size = Self::size(dir)?.unwrap_or(0);
        let info = SnapshotInfo::new(handle, source, size, created);
        match std::fs::read_to_string(dir.join("group")) {
            Ok(group) => Ok(info.in_group(group)),
            Err(_) => Ok(info),
        }
    }

    fn group(&self, id: &VolumeId) -> Result<PathBuf> {
        Ok(self.root.join("groups").join(id.path_component()?))
    }

    /// The group at `dir`, `handle`: its members as they are listed.
    fn read_group(&self, dir: &Path, handle: &str) -> Result<GroupSnapshotInfo> {
        let members = std::fs::read_to_string(dir.join("members"))?;
        let members = (members.lines())
            .map(|m| Self::read_snapshot(&self.snapshot(&VolumeId::new(m))?, m))
            .collect::<Result<Vec<_>>>()?;
        Ok(GroupSnapshotInfo::new(handle, members, UNIX_EPOCH))
    }
}

/// Attaches to a device named after the volume (a new one each time
/// with `attach_anew_each_time`, as an author who forgot the volume may
/// be attached already).
#[async_trait]
impl Attach for Dirs {
    async fn attach(&self, req: AttachRequest) -> Result<Attached> {
        let volume = self.volume(&req.handle)?;
        let attachments = volume.with_extension("attachments");
        let count = match std::fs::read_to_string(&attachments) {
            Ok(count) if !self.faults.attach_anew_each_time => count,
            Ok(count) => (count.parse::<u32>().unwrap_or(0) + 1).to_string(),
            Err(_) => "1".to_owned(),
        };
        std::fs::write(&attachments, &count)?;
        let device = format!("/dev/{}-{count}", req.handle.path_component()?);
        Ok(Attached::with_context(
            [("devicePath".to_owned(), device)].into(),
        ))
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        let volume = self.volume(&req.handle)?;
        match std::fs::remove_file(volume.with_extension("attachments")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Create for Dirs {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        let mut id = VolumeId::new(req.name.clone());
        let mut dir = self
            .volume(&id)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        if self.faults.fresh_volume_per_create {
            let mut n = 1;
            while Self::size(&dir)?.is_some() {
                n += 1;
                id = VolumeId::new(format!("{}.{n}", req.name));
                dir = self.volume(&id)?;
            }
        }
        if let Some(size) = Self::size(&dir)? {
            if Self::attributes(&dir)? != req.mutable_parameters {
                return Err(Error::AlreadyExists(format!("{id} has other attributes")));
            }
            return match req.capacity.contains(size) || self.faults.create_ignores_request {
                true => Ok(Volume::new(id, size)),
                false => Err(Error::AlreadyExists(format!("{id} has {size} bytes"))),
            };
        }
        let size = req.capacity.choose(1 << 20, 1)?;
        std::fs::create_dir_all(dir.join("data"))?;
        if let Some(ContentSource::Snapshot(snapshot)) = &req.source {
            Self::copy_data(&self.snapshot(snapshot)?, &dir)?;
        }
        Self::write_attributes(&dir, &req.mutable_parameters)?;
        std::fs::write(dir.join("size"), size.to_string())?;
        Ok(Volume::new(id, size))
    }

    async fn exists(&self, id: &VolumeId) -> Result<bool> {
        Ok(Self::size(&self.volume(id)?)?.is_some())
    }
}

#[async_trait]
impl Delete for Dirs {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        if self.faults.delete_joins_raw_ids {
            // The mistake, fenced in: whatever the id, nothing outside the
            // harness's temporary directory is ever removed by this test.
            let dir = self.root.join("volumes").join(req.handle.as_str());
            if let Some(inside) = fenced(&self.root, &dir) {
                let _ = std::fs::remove_dir_all(inside);
            }
            return Ok(());
        }
        let dir = self.volume(&req.handle)?;
        if self.faults.delete_fails_when_gone {
            return Ok(std::fs::remove_dir_all(dir)?);
        }
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Stage for Dirs {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        let data = self.volume(&req.handle)?.join("data");
        if !data.is_dir() {
            return Err(Error::NotFound(format!("no volume {}", req.handle)));
        }
        if self.faults.stage_mounts_again {
            // Fenced too: only ever onto a path in the harness's directory.
            let target = fenced(&self.root, &req.target_path)
                .ok_or_else(|| Error::Internal("the target is outside the harness".into()))?;
            rustix::mount::mount_bind(&data, &target).map_err(Error::internal)?;
            return Ok(Staged::at(req.target_path));
        }
        Ok(Staged::at(data))
    }
}

#[async_trait]
impl Expand for Dirs {
    async fn expand(&self, req: ExpandRequest) -> Result<Expanded> {
        let dir = self.volume(&req.handle)?;
        let size = Self::size(&dir)?.ok_or_else(|| Error::NotFound(req.handle.to_string()))?;
        let wanted = req.capacity.choose(size, 1)?;
        let size = match self.faults.expand_shrinks {
            true => wanted,
            false => size.max(wanted),
        };
        std::fs::write(dir.join("size"), size.to_string())?;
        Ok(Expanded::new(size).with_node_expansion())
    }
}

#[async_trait]
impl NodeExpand for Dirs {
    async fn node_expand(&self, req: NodeExpandRequest) -> Result<u64> {
        Ok(Self::size(&self.volume(&req.handle)?)?.unwrap_or(0))
    }
}

#[async_trait]
impl Modify for Dirs {
    async fn modify(&self, req: ModifyRequest) -> Result<()> {
        let dir = self.volume(&req.handle)?;
        if self.faults.modify_in_memory {
            let mut modified = self.modified.lock().unwrap();
            let attributes = modified.entry(req.handle.to_string()).or_default();
            attributes.extend(req.mutable_parameters);
            return Ok(());
        }
        let mut attributes = Self::attributes(&dir)?;
        attributes.extend(req.mutable_parameters);
        Self::write_attributes(&dir, &attributes)
    }
}

#[async_trait]
impl List for Dirs {
    async fn list(&self) -> Result<Vec<ListedVolume>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(self.root.join("volumes"))? {
            let entry = entry?;
            if let Some(size) = Self::size(&entry.path())? {
                let name = entry.file_name().to_string_lossy().into_owned();
                found.push(ListedVolume::new(Volume::new(name, size)));
            }
        }
        Ok(found)
    }
}

/// A volume whose directory holds a `broken` file (what [`damage`]
/// leaves) is abnormal: its data is taken for lost.
#[async_trait]
impl Health for Dirs {
    async fn condition(&self, req: HealthRequest) -> Result<VolumeCondition> {
        let dir = self.volume(&req.handle)?;
        if Self::size(&dir)?.is_none() {
            return Err(Error::NotFound(format!("no volume {}", req.handle)));
        }
        if dir.join("broken").exists() && !self.faults.health_never_looks {
            let reason = match self.faults.health_reason_in_words {
                true => "marked broken",
                false => "MarkedBroken",
            };
            let abnormal = VolumeCondition::abnormal(format!("volume {} is broken", req.handle));
            return Ok(abnormal.because(HealthProblem::DataLoss, reason));
        }
        Ok(VolumeCondition::healthy())
    }
}

/// Breaks volume `id` of the storage at `root` the way [`Dirs`]' Health
/// notices.
fn damage(root: &Path, id: &str) -> std::io::Result<()> {
    std::fs::write(root.join("volumes").join(id).join("broken"), "")
}

#[async_trait]
impl Snapshot for Dirs {
    async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
        let handle = VolumeId::new(req.name.clone());
        let dir = self.snapshot(&handle)?;
        if dir.join("source").exists() && !self.faults.snapshot_name_taken_again {
            let taken = Self::read_snapshot(&dir, &req.name)?;
            return match taken.source == req.source.as_str() {
                true => Ok(taken),
                false => Err(Error::AlreadyExists(format!(
                    "{} is of another volume",
                    req.name
                ))),
            };
        }
        let volume = self.volume(&req.source)?;
        let size = Self::size(&volume)?.ok_or_else(|| Error::NotFound(req.source.to_string()))?;
        let _ = std::fs::remove_dir_all(&dir);
        Self::copy_data(&volume, &dir)?;
        std::fs::write(dir.join("size"), size.to_string())?;
        std::fs::write(dir.join("created"), "1700000000")?;
        std::fs::write(dir.join("source"), req.source.as_str())?;
        Self::read_snapshot(&dir, &req.name)
    }

    async fn delete_snapshot(&self, req: DeleteSnapshotRequest) -> Result<()> {
        match std::fs::remove_dir_all(self.snapshot(&req.handle)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.root.join("snapshots")) else {
            return Ok(found);
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            found.push(Self::read_snapshot(&entry.path(), &name)?);
        }
        Ok(found)
    }
}

/// A group is a directory naming its members; each member a snapshot
/// directory (as CreateSnapshot makes) with the group's handle in it.
#[async_trait]
impl GroupSnapshot for Dirs {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let mut handle = VolumeId::new(format!("group-{}", req.name));
        let mut dir = self.group(&handle)?;
        if self.faults.fresh_group_per_create {
            let mut n = 1;
            while dir.exists() {
                n += 1;
                handle = VolumeId::new(format!("group-{}.{n}", req.name));
                dir = self.group(&handle)?;
            }
        }
        let sources: Vec<String> = req.sources.iter().map(|s| s.to_string()).collect();
        if dir.join("members").exists() {
            let taken = self.read_group(&dir, handle.as_str())?;
            let mut had: Vec<&str> = taken.snapshots.iter().map(|s| s.source.as_str()).collect();
            let mut asked: Vec<&str> = sources.iter().map(String::as_str).collect();
            had.sort_unstable();
            asked.sort_unstable();
            return match had == asked {
                true => Ok(taken),
                false => Err(Error::AlreadyExists(format!(
                    "{handle} is of other volumes"
                ))),
            };
        }
        let mut members = Vec::new();
        for source in &sources {
            let member = format!("{}.{source}", handle.as_str());
            let taken = self
                .create_snapshot(pav_sdk::build::snapshot(member.clone(), source.as_str()))
                .await?;
            let snapshot = self.snapshot(&VolumeId::new(taken.handle.clone()))?;
            std::fs::write(snapshot.join("group"), handle.as_str())?;
            members.push(member);
        }
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("members"), members.join("\n"))?;
        self.read_group(&dir, handle.as_str())
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        let dir = self.group(&req.handle)?;
        let Ok(members) = std::fs::read_to_string(dir.join("members")) else {
            return Ok(());
        };
        for member in members.lines() {
            let delete = pav_sdk::build::delete_snapshot(member);
            self.delete_snapshot(delete).await?;
        }
        Ok(std::fs::remove_dir_all(dir)?)
    }

    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let dir = self.group(&req.handle)?;
        match dir.join("members").exists() {
            true => self.read_group(&dir, req.handle.as_str()),
            false => Err(Error::NotFound(format!("no group {}", req.handle))),
        }
    }
}

/// [`Dirs`] on `root` with `faults`, every touch point but Capacity and Stats.
/// Its `volumes` directory is made at once, as a provisioner's would be
/// (a raw id's `volumes/../x` leads somewhere only once it exists).
fn dirs(root: &Path, faults: Faults) -> Provisioner<Dirs> {
    std::fs::create_dir_all(root.join("volumes")).unwrap();
    let dirs = Dirs {
        root: root.to_owned(),
        faults,
        modified: Default::default(),
    };
    Provisioner::new(dirs)
        .with_modify()
        .with_list()
        .with_health()
        .with_create()
        .with_delete()
        .with_stage()
        .with_expand()
        .with_node_expand()
        .with_snapshot()
        .with_group_snapshot()
        .with_attach()
}

/// The checks of `dirs` with `faults`, built on each harness's storage.
fn checks(faults: Faults) -> Conformance {
    Conformance::with_storage(move |root| dirs(root, faults))
        .volume_size(1 << 20)
        .mutable_parameters([("tier", "gold")])
        .damage(damage)
}

#[tokio::test]
async fn a_conforming_provisioner_passes_the_controller_checks() {
    let report = checks(Faults::default())
        .controller_only()
        .run_all()
        .await
        .unwrap();
    assert_eq!(
        report.skipped(),
        [Check::StageUnstageRepeats, Check::PublishUnpublishRepeats],
        "{report}"
    );
    let partly: Vec<Check> = (report.results.iter())
        .filter(|(_, r)| matches!(r, Ok(Outcome::Partly(_))))
        .map(|(check, _)| *check)
        .collect();
    assert_eq!(
        partly,
        [
            Check::Expand,
            Check::SnapshotRoundTrip,
            Check::GroupSnapshotRoundTrip,
            Check::HostileIdsAndPaths,
            Check::Health
        ],
        "what needs the node service is said not to have run: {report}"
    );
    let text = report.to_string();
    assert!(
        text.contains(
            "skipped stage_unstage_repeats: the node service is not served (controller_only)"
        ),
        "{text}"
    );
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_conforming_provisioner_passes_every_check() {
    let report = checks(Faults::default()).run_all().await.unwrap();
    assert_eq!(report.passed(), Check::ALL, "{report}");
    assert!(
        (report.results.iter()).all(|(_, r)| *r == Ok(Outcome::Passed)),
        "{report}"
    );
}

/// The message of `check`'s failure with `faults`, controller only.
async fn failure(faults: Faults, check: Check) -> String {
    let failure = checks(faults)
        .controller_only()
        .run(check)
        .await
        .expect_err("the check passed");
    assert_eq!(failure.check, check);
    failure.message
}

#[tokio::test]
async fn a_create_that_is_not_idempotent_fails_repeated_create() {
    let faults = Faults {
        fresh_volume_per_create: true,
        ..Faults::default()
    };
    // pav-csi's cache answers the first repeat: only the restart shows it.
    let message = failure(faults, Check::RepeatedCreate).await;
    assert!(
        message.contains("CreateVolume repeated after a driver restart")
            && message.contains("\"pav-testing-repeated-create.2\""),
        "{message}"
    );
}

#[tokio::test]
async fn a_create_that_ignores_the_request_fails_repeated_create() {
    let faults = Faults {
        create_ignores_request: true,
        ..Faults::default()
    };
    // pav-csi refuses the smaller volume answered (INTERNAL); the check
    // says what Create must do instead.
    let message = failure(faults, Check::RepeatedCreate).await;
    assert!(
        message.starts_with("CreateVolume of the same name with twice the capacity")
            && message.contains("expected ALREADY_EXISTS, got INTERNAL")
            && message.contains("Create must refuse (Error::AlreadyExists)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_delete_that_fails_for_what_is_gone_fails_delete_unknown_volume() {
    let faults = Faults {
        delete_fails_when_gone: true,
        ..Faults::default()
    };
    let message = failure(faults, Check::DeleteUnknownVolume).await;
    assert!(
        message.starts_with("DeleteVolume of \"reallyfakevolumeid\", which was never created: expected OK, got INTERNAL"),
        "{message}"
    );
}

#[tokio::test]
async fn an_expand_that_shrinks_fails_expand() {
    let faults = Faults {
        expand_shrinks: true,
        ..Faults::default()
    };
    let message = failure(faults, Check::Expand).await;
    assert!(
        message.contains("the volume shrank from 2097152") && message.contains("never shrink"),
        "{message}"
    );
}

#[tokio::test]
async fn a_snapshot_name_taken_again_fails_snapshot_round_trip() {
    let faults = Faults {
        snapshot_name_taken_again: true,
        ..Faults::default()
    };
    // Before the restart pav-csi's cache refuses the other volume itself;
    // the check asks after one.
    let message = failure(faults, Check::SnapshotRoundTrip).await;
    assert!(
        message.starts_with("CreateSnapshot of the same name from another volume")
            && message.contains("expected ALREADY_EXISTS, got OK"),
        "{message}"
    );
}

#[tokio::test]
async fn a_delete_that_follows_ids_out_of_its_directory_fails_hostile_ids() {
    let faults = Faults {
        delete_joins_raw_ids: true,
        ..Faults::default()
    };
    // Every answer has the right code: only the decoys show the escape.
    let message = failure(faults, Check::HostileIdsAndPaths).await;
    assert!(
        message.starts_with("hostile ids or paths reached outside")
            && message.contains("removed ")
            && message.contains("/pav-testing-victim"),
        "{message}"
    );
}

/// A provisioner given as a value keeps its storage outside the harness:
/// ids that climb are not sent, so a Delete that follows them cannot
/// reach the storage's parent; the check says so and how to send them.
#[tokio::test]
async fn ids_that_climb_are_not_sent_to_storage_outside_the_harness() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b/c/storage");
    std::fs::create_dir_all(root.join("volumes")).unwrap();
    let mut decoys = Vec::new();
    for parent in [&root, &root.join("volumes")] {
        let decoy = parent.parent().unwrap().join("pav-testing-victim");
        std::fs::create_dir_all(decoy.join("data")).unwrap();
        std::fs::write(decoy.join("size"), "1").unwrap();
        decoys.push(decoy);
    }
    let faults = Faults {
        delete_joins_raw_ids: true,
        ..Faults::default()
    };
    let checks = Conformance::new(dirs(&root, faults)).controller_only();
    let outcome = checks.hostile_ids_and_paths().await.unwrap();
    let Outcome::Partly(why) = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        why.contains("ids that climb") && why.contains("Conformance::with_storage(|dir| ...)"),
        "{why}"
    );
    for decoy in &decoys {
        assert!(decoy.join("size").is_file(), "{} removed", decoy.display());
    }
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_stage_that_mounts_again_fails_stage_unstage_repeats() {
    let faults = Faults {
        stage_mounts_again: true,
        ..Faults::default()
    };
    let failure = checks(faults)
        .stage_unstage_repeats()
        .await
        .expect_err("the check passed");
    assert!(
        failure.message.contains("3 mount(s)") && failure.message.contains("mount_once"),
        "{failure}"
    );
}

#[tokio::test]
async fn an_attach_that_attaches_anew_fails_attach_detach_repeats() {
    let faults = Faults {
        attach_anew_each_time: true,
        ..Faults::default()
    };
    let message = failure(faults, Check::AttachDetachRepeats).await;
    assert!(
        message.contains("ControllerPublishVolume repeated") && message.contains("publish context"),
        "{message}"
    );
}

#[tokio::test]
async fn run_all_reports_every_failure_and_what_passed() {
    let faults = Faults {
        delete_fails_when_gone: true,
        expand_shrinks: true,
        ..Faults::default()
    };
    let failures = checks(faults)
        .controller_only()
        .run_all()
        .await
        .expect_err("two checks fail");
    let failed: Vec<Check> = failures.0.failures().iter().map(|f| f.check).collect();
    // Deleting what is gone is part of several checks.
    assert!(
        failed.contains(&Check::DeleteUnknownVolume) && failed.contains(&Check::Expand),
        "{failures}"
    );
    let text = format!("{failures:?}");
    assert!(text.contains("conformance check(s) failed"), "{text}");
    assert!(text.contains("FAILED  expand: "), "{text}");
    assert!(text.contains("skipped publish_unpublish_repeats"), "{text}");
}

/// Without Create nothing of the volume checks applies: skipped, not passed.
#[tokio::test]
async fn a_group_taken_again_for_its_name_fails_group_snapshot_round_trip() {
    let faults = Faults {
        fresh_group_per_create: true,
        ..Faults::default()
    };
    let message = failure(faults, Check::GroupSnapshotRoundTrip).await;
    assert!(
        message.starts_with("CreateVolumeGroupSnapshot repeated:")
            && message.contains("\"group-pav-testing-group.2\""),
        "{message}"
    );
}

#[tokio::test]
async fn a_check_without_its_capability_is_skipped() {
    let root = tempfile::tempdir().unwrap();
    let provisioner = Provisioner::new(Dirs {
        root: root.path().to_owned(),
        faults: Faults::default(),
        modified: Default::default(),
    })
    .with_stage();
    let checks = Conformance::new(provisioner).controller_only();
    for check in [
        Check::RepeatedCreate,
        Check::Expand,
        Check::SnapshotRoundTrip,
        Check::GroupSnapshotRoundTrip,
    ] {
        let outcome = checks.run(check).await.unwrap();
        assert!(
            matches!(outcome, Outcome::Skipped(_)),
            "{check}: {outcome:?}"
        );
    }
}

/// A restart empties pav-csi's cache of Create answers: the repeat reaches
/// the provisioner. The socket and directories stay.
#[tokio::test]
async fn a_restart_serves_again_with_empty_caches() {
    use pav_csi::csi;
    let builder = Harness::builder().unwrap().controller_only();
    let storage = builder.storage_dir().to_owned();
    let mut h = builder
        .start(dirs(
            &storage,
            Faults {
                fresh_volume_per_create: true,
                ..Faults::default()
            },
        ))
        .await
        .unwrap();
    let socket = h.socket().to_owned();
    let request = csi::CreateVolumeRequest {
        name: "pvc-1".into(),
        volume_capabilities: vec![pav_csi::testing::capability(
            pav_sdk::VolumeMode::Filesystem,
            pav_sdk::AccessMode::SingleNodeWriter,
        )],
        ..Default::default()
    };
    let mut ids = Vec::new();
    for restart in [false, false, true] {
        if restart {
            h.restart().await.unwrap();
        }
        let created = h.controller.create_volume(request.clone()).await.unwrap();
        ids.push(created.into_inner().volume.unwrap().volume_id);
    }
    assert_eq!(ids, ["pvc-1", "pvc-1", "pvc-1.2"]);
    assert_eq!(h.socket(), socket);
    assert!(storage.join("volumes/pvc-1.2").is_dir());
    h.shutdown().await.unwrap();
    assert!(!socket.exists(), "socket removed");
}

#[tokio::test]
async fn a_modify_that_keeps_parameters_in_memory_fails_modify() {
    let faults = Faults {
        modify_in_memory: true,
        ..Faults::default()
    };
    // Every answer before the restart is right: only the restarted
    // provisioner shows that it forgot.
    let message = failure(faults, Check::Modify).await;
    assert!(
        message.starts_with(
            "CreateVolume repeated after a driver restart, with the mutable parameters"
        ) && message.contains("expected OK, got ALREADY_EXISTS"),
        "{message}"
    );
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_health_reason_in_words_fails_health() {
    let faults = Faults {
        health_reason_in_words: true,
        ..Faults::default()
    };
    let failure = checks(faults).health().await.expect_err("the check passed");
    assert!(
        failure.message.starts_with(
            "NodeGetVolumeHealth of a volume Conformance::damage damaged: reason \"marked broken\" is not one CamelCase word"
        ),
        "{failure}"
    );
}

#[tokio::test]
async fn a_health_that_never_looks_fails_health() {
    let faults = Faults {
        health_never_looks: true,
        ..Faults::default()
    };
    let message = failure(faults, Check::Health).await;
    assert!(
        message.starts_with("ControllerGetVolume of a volume Conformance::damage damaged: healthy"),
        "{message}"
    );
}

/// Without Modify and Health the two checks are skipped, never passed;
/// without mutable parameters or a way to damage a volume they run in part.
#[tokio::test]
async fn modify_and_health_say_what_did_not_apply() {
    let plain = Conformance::with_storage(|root| {
        std::fs::create_dir_all(root.join("volumes")).unwrap();
        let dirs = Dirs {
            root: root.to_owned(),
            faults: Faults::default(),
            modified: Default::default(),
        };
        Provisioner::new(dirs).with_create().with_delete()
    })
    .controller_only();
    for check in [Check::Modify, Check::Health] {
        let outcome = plain.run(check).await.unwrap();
        assert!(
            matches!(outcome, Outcome::Skipped(_)),
            "{check}: {outcome:?}"
        );
    }
    let bare = Conformance::with_storage(move |root| dirs(root, Faults::default()))
        .volume_size(1 << 20)
        .controller_only();
    let modify = bare.modify().await.unwrap();
    assert!(
        matches!(&modify, Outcome::Partly(why) if why.contains("mutable_parameters")),
        "{modify:?}"
    );
    let health = bare.health().await.unwrap();
    assert!(
        matches!(&health, Outcome::Partly(why) if why.contains("Conformance::damage")),
        "{health:?}"
    );
}
