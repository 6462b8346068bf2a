//! Group snapshots: a copy of several images taken at one instant.
//!
//! Each member is an ordinary snapshot image (`snap-<hash>-<volume
//! hex>.img`, restored and listed as any), and the group is a manifest,
//! `group-<hash of name>.group`, naming its members one per line; it is
//! written (and renamed into place) only once every member is copied, so
//! a group that exists is whole.
//!
//! Consistency: while the members are copied, each image is held with the
//! exclusive `flock` that Stage and Modify take (no attach or release
//! meanwhile), and each member's filesystem that is mounted on this node
//! (found by its loop device in the mount table) is frozen with
//! `FIFREEZE`: its dirty data is written to the image first, and writes
//! wait until the copies are made; every frozen filesystem is thawed on
//! every way out. A block volume, or one staged on no node, is copied as
//! it is (its writer cannot be stopped from here).

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use pav_csi::mount::Frozen;
use pav_csi::mount::blocking::{freeze, mount_table};
use pav_sdk::group_snapshot::check_members;
use pav_sdk::{
    DeleteGroupSnapshotRequest, Error, GetGroupSnapshotRequest, GroupSnapshot, GroupSnapshotInfo,
    GroupSnapshotRequest, Result, SnapshotInfo, async_trait,
};

use super::{SparseFiles, backing, copy_file, fnv, io_error, locked, loop_devices};

/// One member being taken: the volume's image, where its copy goes.
#[derive(Debug, Clone)]
struct Member {
    source: String,
    from: PathBuf,
    handle: String,
    image: PathBuf,
}

impl SparseFiles {
    /// The handle of the group named `name`: `group-<hash of name>`.
    fn group_handle_for(name: &str) -> String {
        format!("group-{:016x}", fnv(name))
    }

    /// The manifest of group `handle`, refusing handles we never issued.
    fn group_manifest(&self, handle: &str) -> Option<PathBuf> {
        let hex = handle.strip_prefix("group-")?;
        (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.dir.join(format!("{handle}.group")))
    }

    /// The member handles a manifest names; `None` when there is none.
    fn group_members(manifest: &Path) -> Result<Option<Vec<String>>> {
        match std::fs::read_to_string(manifest) {
            Ok(text) => Ok(Some(text.lines().map(str::to_owned).collect())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The group `handle` as it is: its members that still exist (each
    /// may have been deleted alone).
    fn group_info(
        &self,
        handle: &str,
        manifest: &Path,
        members: &[String],
    ) -> Result<GroupSnapshotInfo> {
        let created = std::fs::metadata(manifest)?.modified()?;
        let mut snapshots = Vec::new();
        for member in members {
            let (image, source) = self.snapshot_image(member)?;
            match Self::snapshot_info(member, source, &image) {
                Ok(info) => snapshots.push(info),
                Err(_) if !image.exists() => {} // deleted alone
                Err(e) => return Err(e),
            }
        }
        Ok(GroupSnapshotInfo::new(handle, snapshots, created))
    }

    /// The member of group `name` that is a copy of volume `source`: its
    /// snapshot handle, from a name no CreateSnapshot gives (CSI names
    /// hold no NUL), so a retry finds the same member.
    fn member(&self, name: &str, source: &str) -> Result<Member> {
        let from = self.existing_image(source)?;
        let handle = Self::snapshot_handle_for(&format!("{name}\0{source}"), source);
        let (image, _) = self.snapshot_image(&handle)?;
        Ok(Member {
            source: source.to_owned(),
            from,
            handle,
            image,
        })
    }

    /// Sets each listed snapshot's group from the manifests: members are
    /// listed with their group.
    pub(super) fn mark_group_members(&self, snapshots: &mut [SnapshotInfo]) -> Result<()> {
        for entry in std::fs::read_dir(&self.dir)? {
            let file = entry?.file_name();
            let Some(handle) = file.to_str().and_then(|f| f.strip_suffix(".group")) else {
                continue;
            };
            let Some(manifest) = self.group_manifest(handle) else {
                continue;
            };
            let members = Self::group_members(&manifest)?.unwrap_or_default();
            for snapshot in snapshots.iter_mut() {
                if members.contains(&snapshot.handle) {
                    snapshot.group = Some(handle.to_owned());
                }
            }
        }
        Ok(())
    }

    /// Copies every member at one instant (see the module), then writes
    /// the manifest; a failure part-way removes the copies made.
    async fn take_group(&self, manifest: &Path, members: &[Member]) -> Result<()> {
        // Sorted: two takers never wait on each other's locks.
        let images: BTreeSet<&Path> = members.iter().map(|m| m.from.as_path()).collect();
        let mut held = Vec::new();
        for image in &images {
            held.push(locked(image).await?);
        }
        let mut devices = Vec::new();
        for image in &images {
            devices.extend(loop_devices(image).await?);
        }
        let (members, manifest) = (members.to_vec(), manifest.to_owned());
        tokio::task::spawn_blocking(move || {
            let frozen = freeze_mounted(&devices)?;
            let copied = copy_members(&members);
            drop(frozen); // thawed before anything else, on every path
            drop(held);
            copied?;
            write_manifest(&manifest, &members).inspect_err(|_| remove_copies(&members))
        })
        .await
        .map_err(|e| Error::Internal(format!("group snapshot task: {e}")))?
    }
}

/// Freezes the filesystem of each loop device in `devices` that is
/// mounted here, once per filesystem; on a failure, thaws those frozen.
fn freeze_mounted(devices: &[String]) -> Result<Vec<Frozen>> {
    if devices.is_empty() {
        return Ok(Vec::new());
    }
    let numbers: BTreeSet<(u32, u32)> = (devices.iter())
        .filter_map(|device| std::fs::metadata(device).ok())
        .map(|meta| {
            let rdev = std::os::unix::fs::MetadataExt::rdev(&meta);
            (rustix::fs::major(rdev), rustix::fs::minor(rdev))
        })
        .collect();
    // pav_csi::mount's errors become Error::Internal with their chain.
    let table = mount_table()?;
    let mut seen = BTreeSet::new();
    let mut frozen = Vec::new();
    for mount in table {
        if numbers.contains(&mount.device) && seen.insert(mount.device) {
            // `frozen` thaws what is frozen so far when this returns early.
            frozen.push(freeze(&mount.mount_point)?);
            tracing::info!(mount_point = %mount.mount_point.display(), "froze a member's filesystem");
        }
    }
    Ok(frozen)
}

/// Copies each member as a snapshot is copied (a reflink where the
/// filesystem has them); on a failure, removes the copies made.
fn copy_members(members: &[Member]) -> Result<()> {
    for (done, member) in members.iter().enumerate() {
        let partial = member.image.with_extension("partial");
        let copied = remove_if_present(&partial)
            .and_then(|()| copy_file(&member.from, &partial, 0, super::Provisioning::Thin))
            .and_then(|()| std::fs::rename(&partial, &member.image));
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&partial);
            remove_copies(&members[..done]);
            return Err(io_error("copying into", &member.image, e));
        }
    }
    Ok(())
}

/// Removes the member copies `members` (a failed group leaks none).
fn remove_copies(members: &[Member]) {
    for member in members {
        if let Err(e) = remove_if_present(&member.image) {
            tracing::error!(image = %member.image.display(), error = %e, "a member of a failed group snapshot could not be removed");
        }
    }
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes the manifest naming `members`, crash-safe: a partial file
/// renamed into place once synced.
fn write_manifest(manifest: &Path, members: &[Member]) -> Result<()> {
    use std::io::Write as _;
    let partial = manifest.with_extension("group-partial");
    let written = (|| {
        let mut file = std::fs::File::create(&partial)?;
        for member in members {
            writeln!(file, "{}", member.handle)?;
        }
        file.sync_all()?;
        std::fs::rename(&partial, manifest)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        io_error("writing", manifest, e)
    })
}

/// The one group class parameter accepted (and ignored): see
/// `create_group_snapshot`.
const IGNORED_PARAMETER: &str = "deletionPolicy";

#[async_trait]
impl GroupSnapshot for SparseFiles {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        // Groups take no parameters. `deletionPolicy` is the class's own
        // field, which Kubernetes' storage e2e suite (v1.37,
        // test/e2e/storage/utils/volume_group_snapshot.go) also copies into
        // the class's parameters: accepted and ignored, so that its
        // volumegroupsnapshottable specs run.
        if let Some(key) = (req.parameters.keys()).find(|key| *key != IGNORED_PARAMETER) {
            return Err(Error::InvalidArgument(format!("unknown parameter {key:?}")));
        }
        let members = (req.sources.iter())
            .map(|source| self.member(&req.name, source))
            .collect::<Result<Vec<_>>>()?;
        let handle = Self::group_handle_for(&req.name);
        let manifest = self.group_manifest(&handle).expect("our own handle");
        if let Some(taken) = Self::group_members(&manifest)? {
            let wanted: BTreeSet<&str> = members.iter().map(|m| m.handle.as_str()).collect();
            let have: BTreeSet<&str> = taken.iter().map(String::as_str).collect();
            if wanted != have {
                return Err(Error::AlreadyExists(format!(
                    "group snapshot {:?} exists of other volumes",
                    req.name
                )));
            }
            return self.group_info(&handle, &manifest, &taken); // a retry
        }
        let mut allocated: u64 = 0;
        for member in &members {
            let (bytes, _) = backing(&std::fs::metadata(&member.from)?);
            allocated = allocated.saturating_add(bytes);
        }
        self.check_space(allocated)?;
        self.take_group(&manifest, &members).await?;
        let sources: Vec<&str> = members.iter().map(|m| m.source.as_str()).collect();
        tracing::info!(name = %req.name, %handle, ?sources, "took group snapshot");
        let handles: Vec<String> = members.into_iter().map(|m| m.handle).collect();
        self.group_info(&handle, &manifest, &handles)
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        let Some(manifest) = self.group_manifest(&req.handle) else {
            return Ok(()); // never ours: nothing to delete
        };
        let Some(members) = Self::group_members(&manifest)? else {
            return Ok(()); // deleted already
        };
        check_members(
            &req.handle,
            &req.snapshot_ids,
            members.iter().map(String::as_str),
        )?;
        for member in &members {
            let (image, _) = self.snapshot_image(member)?;
            remove_if_present(&image)?;
        }
        // Last: a failure above leaves the group, which the retry deletes.
        remove_if_present(&manifest)?;
        Ok(())
    }

    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let not_found = || {
            Error::NotFound(format!(
                "group snapshot {:?} does not exist",
                req.handle.as_str()
            ))
        };
        let manifest = self.group_manifest(&req.handle).ok_or_else(not_found)?;
        let members = Self::group_members(&manifest)?.ok_or_else(not_found)?;
        self.group_info(&req.handle, &manifest, &members)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt as _;

    use pav_sdk::group_snapshot::build;
    use pav_sdk::{ContentSource, Create, CreateRequest, Snapshot, VolumeMode};

    use super::*;

    const MIB: u64 = 1 << 20;

    fn request(name: &str) -> CreateRequest {
        let mut req = pav_sdk::build::create(name, VolumeMode::Filesystem);
        req.capacity.min_bytes = Some(4 * MIB);
        req
    }

    fn write_at(files: &SparseFiles, handle: &str, data: &[u8]) {
        let image = files.existing_image(handle).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(image).unwrap();
        file.write_all_at(data, 3 * MIB).unwrap();
    }

    fn read_at(image: &Path) -> Vec<u8> {
        let mut buffer = vec![0; 4];
        (std::fs::File::open(image).unwrap())
            .read_exact_at(&mut buffer, 3 * MIB)
            .unwrap();
        buffer
    }

    fn entries(dir: &Path) -> BTreeSet<String> {
        (std::fs::read_dir(dir).unwrap())
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Two volumes holding `aaaa` and `bbbb`.
    async fn two_volumes(files: &SparseFiles) -> [String; 2] {
        let a = files.create(request("pvc-a")).await.unwrap().handle;
        let b = files.create(request("pvc-b")).await.unwrap().handle;
        write_at(files, &a, b"aaaa");
        write_at(files, &b, b"bbbb");
        [a.to_string(), b.to_string()]
    }

    #[tokio::test]
    async fn a_group_copies_every_member_which_restores_as_a_volume() {
        let dir = tempfile::tempdir().unwrap();
        let files = SparseFiles::new(dir.path().into());
        let [a, b] = two_volumes(&files).await;
        let ask = build::group_snapshot("group-1", [a.as_str(), b.as_str()]);
        let taken = files.create_group_snapshot(ask.clone()).await.unwrap();
        assert!(taken.handle.starts_with("group-") && taken.ready());
        let sources: Vec<&str> = taken.snapshots.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(sources, [a.as_str(), b.as_str()]);
        assert!(
            (taken.snapshots.iter()).all(|s| s.group.as_deref() == Some(taken.handle.as_str()))
        );
        // Written after the group: in neither member.
        write_at(&files, &a, b"lost");
        write_at(&files, &b, b"lost");
        assert_eq!(
            files.create_group_snapshot(ask).await.unwrap(),
            taken,
            "a retry"
        );
        let reordered = build::group_snapshot("group-1", [b.as_str(), a.as_str()]);
        let retried = files.create_group_snapshot(reordered).await.unwrap();
        assert_eq!(retried.handle, taken.handle);
        let fewer = build::group_snapshot("group-1", [a.as_str()]);
        let answer = files.create_group_snapshot(fewer).await;
        assert!(matches!(answer, Err(Error::AlreadyExists(_))), "{answer:?}");
        let missing = build::group_snapshot("group-2", [a.as_str(), "sparse-0123456789abcdef"]);
        let answer = files.create_group_snapshot(missing).await;
        assert!(matches!(answer, Err(Error::NotFound(_))), "{answer:?}");
        let hostile = build::group_snapshot("group-2", [a.as_str(), "../../etc/passwd"]);
        let answer = files.create_group_snapshot(hostile).await;
        assert!(matches!(answer, Err(Error::NotFound(_))), "{answer:?}");

        // Members are ordinary snapshots, listed with their group.
        let mut listed = files.list_snapshots().await.unwrap();
        listed.sort_by(|x, y| x.source.cmp(&y.source));
        let mut members = taken.snapshots.clone();
        members.sort_by(|x, y| x.source.cmp(&y.source));
        assert_eq!(listed, members);
        for (member, data) in taken.snapshots.iter().zip([b"aaaa", b"bbbb"]) {
            let mut restore = request(&format!("restored-{}", member.source));
            restore.source = Some(ContentSource::Snapshot(member.handle.as_str().into()));
            let restored = files.create(restore).await.unwrap();
            assert_eq!(
                read_at(&files.existing_image(&restored.handle).unwrap()),
                data
            );
        }

        let got = files
            .get_group_snapshot(build::get_group_snapshot(
                taken.handle.as_str(),
                Vec::<String>::new(),
            ))
            .await
            .unwrap();
        assert_eq!(got, taken);
        for unknown in ["group-0123456789abcdef", "../x", "snap-1"] {
            let get = build::get_group_snapshot(unknown, Vec::<String>::new());
            let answer = files.get_group_snapshot(get).await;
            assert!(
                matches!(answer, Err(Error::NotFound(_))),
                "{unknown}: {answer:?}"
            );
        }
    }

    /// No parameter is taken but the class's `deletionPolicy`, which
    /// Kubernetes' storage e2e suite copies into the parameters.
    #[tokio::test]
    async fn only_the_deletion_policy_parameter_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let files = SparseFiles::new(dir.path().into());
        let [a, b] = two_volumes(&files).await;
        let mut unknown = build::group_snapshot("group-1", [a.as_str(), b.as_str()]);
        unknown.parameters = [("tier".to_owned(), "gold".to_owned())].into();
        let answer = files.create_group_snapshot(unknown).await;
        assert!(
            matches!(&answer, Err(Error::InvalidArgument(m)) if m.contains("tier")),
            "{answer:?}"
        );
        let mut policy = build::group_snapshot("group-1", [a.as_str(), b.as_str()]);
        policy.parameters = [("deletionPolicy".to_owned(), "Delete".to_owned())].into();
        files.create_group_snapshot(policy).await.unwrap();
    }

    #[tokio::test]
    async fn deleting_a_group_deletes_its_members() {
        let dir = tempfile::tempdir().unwrap();
        let files = SparseFiles::new(dir.path().into());
        let [a, b] = two_volumes(&files).await;
        let before = entries(dir.path());
        let ask = build::group_snapshot("group-1", [a.as_str(), b.as_str()]);
        let taken = files.create_group_snapshot(ask).await.unwrap();
        let ids: Vec<&str> = taken.snapshots.iter().map(|s| s.handle.as_str()).collect();
        let wrong = build::delete_group_snapshot(taken.handle.as_str(), [ids[0]]);
        let answer = files.delete_group_snapshot(wrong).await;
        assert!(
            matches!(answer, Err(Error::InvalidArgument(_))),
            "{answer:?}"
        );
        assert_eq!(
            files.list_snapshots().await.unwrap().len(),
            2,
            "nothing deleted"
        );
        let delete = build::delete_group_snapshot(taken.handle.as_str(), ids.clone());
        files.delete_group_snapshot(delete.clone()).await.unwrap();
        assert_eq!(entries(dir.path()), before, "members and manifest gone");
        files.delete_group_snapshot(delete).await.unwrap();
        let foreign = build::delete_group_snapshot("../../etc", Vec::<String>::new());
        files.delete_group_snapshot(foreign).await.unwrap();
    }

    /// The second member cannot be copied: the first is removed again,
    /// and no partial file or manifest is left.
    #[tokio::test]
    async fn a_failure_part_way_leaves_no_member_behind() {
        let dir = tempfile::tempdir().unwrap();
        let files = SparseFiles::new(dir.path().into());
        let [a, b] = two_volumes(&files).await;
        let second = files.member("group-1", &b).unwrap();
        // A directory where the second copy is renamed to: the rename fails.
        std::fs::create_dir(&second.image).unwrap();
        std::fs::write(second.image.join("keep"), b"").unwrap();
        let before = entries(dir.path());
        let ask = build::group_snapshot("group-1", [a.as_str(), b.as_str()]);
        let answer = files.create_group_snapshot(ask.clone()).await;
        assert!(matches!(answer, Err(Error::Internal(_))), "{answer:?}");
        assert_eq!(
            entries(dir.path()),
            before,
            "no member, partial or manifest left"
        );
        // Once the way is clear, the group is taken.
        std::fs::remove_dir_all(&second.image).unwrap();
        let taken = files.create_group_snapshot(ask).await.unwrap();
        assert_eq!(taken.snapshots.len(), 2);
    }

    /// Unmounts the test's staging paths and detaches its images' loop
    /// devices, also when it panics; every path is in the test's own
    /// temporary directory.
    struct Staged(Vec<(PathBuf, PathBuf)>);

    impl Drop for Staged {
        fn drop(&mut self) {
            use std::process::Command;
            for (target, image) in &self.0 {
                let _ = Command::new("umount").arg("-l").arg(target).status();
                let listing = Command::new("losetup")
                    .arg("--associated")
                    .arg(image)
                    .output();
                let listing = listing.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
                for line in listing.unwrap_or_default().lines() {
                    if let Some(device) = line.split(':').next() {
                        let _ = Command::new("losetup").args(["--detach", device]).status();
                    }
                }
            }
        }
    }

    /// Needs root, loop devices and e2fsprogs. Both members mounted: their
    /// filesystems are frozen while copied, so a file written and not
    /// synced is in the copies (the freeze flushed it), and they are
    /// writable again afterwards (thawed).
    #[tokio::test]
    #[ignore = "needs root and loop devices: .ci/run runs it as root"]
    async fn mounted_members_are_frozen_while_copied_and_thawed() {
        use pav_sdk::Stage as _;
        let dir = tempfile::tempdir().unwrap();
        let volumes = dir.path().join("volumes");
        std::fs::create_dir(&volumes).unwrap();
        let files = SparseFiles::new(volumes);
        let mut staged = Staged(Vec::new());
        let mut handles = Vec::new();
        for name in ["pvc-a", "pvc-b"] {
            let mut req = request(name);
            req.capacity.min_bytes = Some(32 * MIB);
            let handle = files.create(req).await.unwrap().handle;
            let target = dir.path().join(format!("staging-{name}"));
            staged
                .0
                .push((target.clone(), files.existing_image(&handle).unwrap()));
            let stage =
                pav_sdk::build::stage(handle.as_str(), "n1", &target, VolumeMode::Filesystem);
            files.stage(stage).await.unwrap();
            std::fs::write(target.join("data"), name).unwrap(); // not synced
            handles.push(handle.to_string());
        }
        let ask = build::group_snapshot("group-1", handles.iter().map(String::as_str));
        let taken = files.create_group_snapshot(ask).await.unwrap();
        for (target, _) in &staged.0 {
            std::fs::write(target.join("after"), b"thawed").unwrap();
        }
        for (member, name) in taken.snapshots.iter().zip(["pvc-a", "pvc-b"]) {
            let mut restore = request(&format!("restored-{name}"));
            restore.capacity.min_bytes = Some(32 * MIB);
            restore.source = Some(ContentSource::Snapshot(member.handle.as_str().into()));
            let restored = files.create(restore).await.unwrap().handle;
            let target = dir.path().join(format!("restored-{name}"));
            staged
                .0
                .push((target.clone(), files.existing_image(&restored).unwrap()));
            let stage =
                pav_sdk::build::stage(restored.as_str(), "n1", &target, VolumeMode::Filesystem);
            files.stage(stage).await.unwrap();
            assert_eq!(std::fs::read_to_string(target.join("data")).unwrap(), name);
            assert!(!target.join("after").exists(), "written after the group");
        }
    }
}
