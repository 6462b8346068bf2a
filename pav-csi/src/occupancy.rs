//! Whether a staging or target path is free for a new mount: mounting there
//! must neither hide other mounts nor reach into another volume.
//!
//! Kubelet never asks for such paths; the checks are defence in depth
//! against a bug or a compromised caller, made only before a new mount (a
//! repeated call is answered from the mount table first).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tonic::Status;

use crate::error::internal;
use crate::mount;
use crate::staged::Records;

/// `FAILED_PRECONDITION` naming `field` when mounting on `path` would hide
/// a mount below it (the kubelet's `pods` directory, another volume's
/// paths), or when `path` lies inside a volume this driver staged: below a
/// recorded staging path, or below a mount of one (a published target).
pub(crate) fn check_free(field: &str, path: &Path, records: &Records) -> Result<(), Status> {
    let refuse = |why: String| {
        Err(Status::failed_precondition(format!(
            "{field} {path:?} {why}"
        )))
    };
    let hidden = mount::mounts_inside(path).map_err(|e| internal("reading mounts", e))?;
    if let Some(point) = hidden.first() {
        return refuse(format!(
            "holds the mount point {point:?} (and {} more): mounting there would hide it",
            hidden.len() - 1
        ));
    }
    let records = records
        .all()
        .map_err(|e| internal("reading staging records", e))?;
    if let Some(record) = records
        .iter()
        .find(|r| path != r.staging && path.starts_with(&r.staging))
    {
        return refuse(format!(
            "lies inside the staging path of volume {:?}",
            record.volume_id
        ));
    }
    // A published target is a bind of a staging path: the same directory.
    let staged: Vec<(u64, u64, &str)> = records
        .iter()
        .filter_map(|r| {
            let meta = std::fs::metadata(&r.staging).ok()?;
            Some((meta.dev(), meta.ino(), r.volume_id.as_str()))
        })
        .collect();
    for ancestor in path.ancestors().skip(1) {
        if !mount::is_mounted(ancestor).map_err(|e| internal("reading mounts", e))? {
            continue;
        }
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        if let Some((_, _, volume)) = staged
            .iter()
            .find(|(dev, ino, _)| (*dev, *ino) == (meta.dev(), meta.ino()))
        {
            return refuse(format!(
                "lies inside {ancestor:?}, where volume {volume:?} is mounted"
            ));
        }
    }
    Ok(())
}
