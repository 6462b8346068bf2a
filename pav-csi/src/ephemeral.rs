//! The CSI ephemeral inline volumes this node service created, kept as one
//! small file per volume under `<state dir>/ephemeral/`.
//!
//! A record is written before the provisioner's Create runs, with what
//! that Create is asked (so that it can be asked again), completed with the
//! handle Create answered, and removed once Delete succeeded. Whatever a
//! crash interrupts, the record is there: the kubelet's repeated
//! `NodePublishVolume` finishes the volume, its `NodeUnpublishVolume`
//! deletes it (asking Create again for the handle if the record has none
//! yet: Create is idempotent by name). Written as staging records are (a
//! temporary file renamed over the old one) and fsynced, since a node's
//! crash does not take an ephemeral volume's storage away as it takes
//! its mounts.

use std::ffi::OsString;
use std::io::{self, Write as _};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use pav_sdk::{AccessMode, MountOptions, Parameters, VolumeMode};

use crate::convert::Capability;
use crate::staged::{access_mode_name, escape, fnv1a_128, unescape};

/// First line of every record.
const HEADER: &str = "pav-csi ephemeral volume v1";
/// Last line: a record without it is torn.
const END: &str = "end";

/// One ephemeral inline volume of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The volume id the kubelet chose, and the name Create is given.
    pub(crate) volume_id: String,
    /// Where it is published (resolved inside the kubelet directory).
    pub(crate) target: PathBuf,
    /// The capability it is published with.
    pub(crate) capability: Capability,
    /// Bytes asked for (the `size` attribute), if any.
    pub(crate) size: Option<u64>,
    /// The parameters Create is given.
    pub(crate) parameters: Parameters,
    /// The handle Create answered, once it has.
    pub(crate) handle: Option<String>,
}

/// The ephemeral records of one driver.
#[derive(Debug, Clone)]
pub(crate) struct Records {
    dir: PathBuf,
}

impl Records {
    /// Records under `<state_dir>/ephemeral`, created on first use.
    pub(crate) fn new(state_dir: &Path) -> Self {
        Records {
            dir: state_dir.join("ephemeral"),
        }
    }

    fn file(&self, volume_id: &str) -> PathBuf {
        (self.dir).join(format!("{:032x}", fnv1a_128(volume_id.as_bytes())))
    }

    /// The record of `volume_id`, if it is an ephemeral volume of this node.
    pub(crate) fn get(&self, volume_id: &str) -> io::Result<Option<Record>> {
        let file = self.file(volume_id);
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match decode(&text) {
            Some(record) => Ok(Some(record).filter(|r| r.volume_id == volume_id)),
            None => Err(io::Error::other(format!(
                "ephemeral volume record {} is unreadable",
                file.display()
            ))),
        }
    }

    /// Stores `record` durably, replacing the volume's previous one.
    pub(crate) fn put(&self, record: &Record) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let file = self.file(&record.volume_id);
        let partial = file.with_extension("partial");
        let mut out = std::fs::File::create(&partial)?;
        out.write_all(encode(record).as_bytes())?;
        out.sync_all()?;
        drop(out);
        std::fs::rename(&partial, &file)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Forgets `volume_id`; nothing recorded is fine.
    pub(crate) fn remove(&self, volume_id: &str) -> io::Result<()> {
        match std::fs::remove_file(self.file(volume_id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn encode(record: &Record) -> String {
    let c = &record.capability;
    let mut text = format!(
        "{HEADER}\nvolume_id {}\ntarget {}\nmode {}\naccess_mode {}\nfs_type {}\n",
        escape(record.volume_id.as_bytes()),
        escape(record.target.as_os_str().as_bytes()),
        c.mode,
        access_mode_name(c.access_mode),
        escape(c.mount.fs_type.as_deref().unwrap_or_default().as_bytes()),
    );
    for flag in &c.mount.mount_flags {
        text.push_str(&format!("mount_flag {}\n", escape(flag.as_bytes())));
    }
    if let Some(size) = record.size {
        text.push_str(&format!("size {size}\n"));
    }
    for (key, value) in &record.parameters {
        let (key, value) = (escape(key.as_bytes()), escape(value.as_bytes()));
        text.push_str(&format!("parameter {key} {value}\n"));
    }
    if let Some(handle) = &record.handle {
        text.push_str(&format!("handle {}\n", escape(handle.as_bytes())));
    }
    text.push_str(END);
    text.push('\n');
    text
}

fn decode(text: &str) -> Option<Record> {
    let mut lines = text.lines();
    if lines.next()? != HEADER || !text.ends_with(&format!("\n{END}\n")) {
        return None;
    }
    let string = |value: &str| String::from_utf8(unescape(value)?).ok();
    let mut record = Record {
        volume_id: String::new(),
        target: PathBuf::new(),
        capability: Capability {
            mode: VolumeMode::Filesystem,
            access_mode: AccessMode::SingleNodeWriter,
            mount: MountOptions::default(),
        },
        size: None,
        parameters: Parameters::new(),
        handle: None,
    };
    for line in lines {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "volume_id" => record.volume_id = string(value)?,
            "target" => record.target = OsString::from_vec(unescape(value)?).into(),
            "mode" => {
                record.capability.mode = match value {
                    "Filesystem" => VolumeMode::Filesystem,
                    "Block" => VolumeMode::Block,
                    _ => return None,
                }
            }
            "access_mode" => {
                record.capability.access_mode =
                    (AccessMode::ALL.into_iter()).find(|m| access_mode_name(*m) == value)?;
            }
            "fs_type" => record.capability.mount.fs_type = Some(string(value)?),
            "mount_flag" => record.capability.mount.mount_flags.push(string(value)?),
            "size" => record.size = Some(value.parse().ok()?),
            "parameter" => {
                let (key, value) = value.split_once(' ')?;
                record.parameters.insert(string(key)?, string(value)?);
            }
            "handle" => record.handle = Some(string(value)?),
            END => {}
            _ => return None,
        }
    }
    record.capability.mount.fs_type = record.capability.mount.fs_type.filter(|t| !t.is_empty());
    (!record.volume_id.is_empty()).then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            volume_id: "csi-0123 with space".into(),
            target: "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/scratch/mount".into(),
            capability: Capability {
                mode: VolumeMode::Filesystem,
                access_mode: AccessMode::SingleNodeWriter,
                mount: MountOptions {
                    fs_type: Some("xfs".into()),
                    mount_flags: vec!["noatime".into()],
                },
            },
            size: Some(64 << 20),
            parameters: [("tier".to_owned(), "a b%".to_owned())].into(),
            handle: None,
        }
    }

    #[test]
    fn records_round_trip_and_are_completed_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path());
        assert_eq!(records.get("csi-0123 with space").unwrap(), None);
        let mut record = record();
        records.put(&record).unwrap();
        assert_eq!(
            records.get(&record.volume_id).unwrap(),
            Some(record.clone())
        );
        record.handle = Some("sparse-0001".into());
        records.put(&record).unwrap();
        assert_eq!(
            records.get(&record.volume_id).unwrap(),
            Some(record.clone())
        );
        records.remove(&record.volume_id).unwrap();
        records.remove(&record.volume_id).unwrap();
        assert_eq!(records.get(&record.volume_id).unwrap(), None);
    }

    /// A torn record is an error, not "no record": treating it as none
    /// would leak the volume it describes.
    #[test]
    fn a_torn_record_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path());
        let record = record();
        records.put(&record).unwrap();
        let file = records.file(&record.volume_id);
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, &text[..text.len() - 4]).unwrap();
        assert!(records.get(&record.volume_id).is_err());
    }
}
