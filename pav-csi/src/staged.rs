//! Which volume this node service staged where, kept as one small file per
//! volume under `<state dir>/staged/` so that it survives restarts.
//!
//! A record is written before the provisioner's Stage runs (so everything a
//! stage mounts has one) and removed after Unstage succeeded. It is written
//! to a temporary file and renamed over the old one, which a crash of the
//! driver cannot tear; it is not `fsync`ed, since what would need that (a
//! crash of the whole node) also takes every mount it describes away. A
//! record the node's crash left torn or empty is therefore stale: it is
//! renamed to `<name>.unreadable` with a warning and counts as no record,
//! rather than failing every stage on the node. Publishing
//! bind-mounts only a staging path recorded for the same volume and the same
//! volume mode, and unstaging touches only the recorded path: a request can
//! never make the node service bind or unmount a path of its choosing.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use pav_sdk::{AccessMode, VolumeMode};

use crate::convert::Capability;

/// First line of every record; another one is not ours to read.
const HEADER: &str = "pav-csi staged volume v2";
/// Last line of a v2 record: a record torn by a node crash lacks it.
const END: &str = "end";
/// First line of records written (and fsynced) before v2, still read.
const HEADER_V1: &str = "pav-csi staged volume v1";

/// One staged volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) volume_id: String,
    /// The resolved staging path.
    pub(crate) staging: PathBuf,
    /// The capability it was staged with.
    pub(crate) capability: Capability,
}

/// The records of one driver.
#[derive(Debug, Clone)]
pub(crate) struct Records {
    dir: PathBuf,
}

impl Records {
    /// Records under `<state_dir>/staged`, created on first use.
    pub(crate) fn new(state_dir: &Path) -> Self {
        Records {
            dir: state_dir.join("staged"),
        }
    }

    fn file(&self, volume_id: &str) -> PathBuf {
        self.dir
            .join(format!("{:032x}", fnv1a_128(volume_id.as_bytes())))
    }

    /// The record of `volume_id`, if it is staged (or being staged).
    pub(crate) fn get(&self, volume_id: &str) -> io::Result<Option<Record>> {
        Ok(read(&self.file(volume_id))?.filter(|r| r.volume_id == volume_id))
    }

    /// The record of whichever volume is staged at `staging`.
    pub(crate) fn at(&self, staging: &Path) -> io::Result<Option<Record>> {
        Ok(self.all()?.into_iter().find(|r| r.staging == staging))
    }

    /// Every record, in no particular order.
    pub(crate) fn all(&self) -> io::Result<Vec<Record>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut records = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some() {
                continue; // a temporary file
            }
            records.extend(read(&path)?);
        }
        Ok(records)
    }

    /// Stores `record`, replacing the volume's previous one atomically.
    pub(crate) fn put(&self, record: &Record) -> io::Result<()> {
        use std::io::Write;
        let file = self.file(&record.volume_id);
        if let Some(other) = read(&file)?
            && other.volume_id != record.volume_id
        {
            return Err(io::Error::other(format!(
                "record {} belongs to volume {:?}",
                file.display(),
                other.volume_id
            )));
        }
        let partial = file.with_extension("partial");
        // The directory is made on first use only, not checked every time.
        let mut out = match std::fs::File::create(&partial) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&self.dir)?;
                std::fs::File::create(&partial)?
            }
            created => created?,
        };
        out.write_all(encode(record).as_bytes())?;
        drop(out);
        std::fs::rename(&partial, &file)
    }

    /// Forgets `volume_id`; nothing recorded is fine.
    pub(crate) fn remove(&self, volume_id: &str) -> io::Result<()> {
        if self.get(volume_id)?.is_none() {
            return Ok(());
        }
        match std::fs::remove_file(self.file(volume_id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// FNV-1a, 128 bits: a stable file name for any volume id (ids may be 128
/// bytes of anything; the record itself holds the id and is checked).
pub(crate) fn fnv1a_128(bytes: &[u8]) -> u128 {
    const BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes
        .iter()
        .fold(BASIS, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME))
}

/// Percent-escapes every byte outside printable ASCII, `%` and space.
pub(crate) fn escape(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'!'..=b'~' if b != b'%' => char::from(b).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn unescape(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    Some(out)
}

fn encode(record: &Record) -> String {
    let c = &record.capability;
    let mut text = format!(
        "{HEADER}\nvolume_id {}\nstaging {}\nmode {}\naccess_mode {}\nfs_type {}\n",
        escape(record.volume_id.as_bytes()),
        escape(record.staging.as_os_str().as_bytes()),
        c.mode,
        access_mode_name(c.access_mode),
        escape(c.mount.fs_type.as_deref().unwrap_or_default().as_bytes()),
    );
    for flag in &c.mount.mount_flags {
        text.push_str(&format!("mount_flag {}\n", escape(flag.as_bytes())));
    }
    text.push_str(END);
    text.push('\n');
    text
}

/// Reads a record; `None` when the file does not exist.
fn read(file: &Path) -> io::Result<Option<Record>> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if let Some(record) = decode(&text) {
        return Ok(Some(record));
    }
    let aside = file.with_extension("unreadable");
    tracing::warn!(
        record = %file.display(),
        moved_to = %aside.display(),
        "unreadable staging record (left by a crash of the node, whose mounts are gone with it); treated as none"
    );
    match std::fs::rename(file, &aside) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(None),
    }
}

fn decode(text: &str) -> Option<Record> {
    let mut lines = text.lines();
    let needs_end = match lines.next()? {
        HEADER if text.ends_with('\n') => true,
        HEADER_V1 => false,
        _ => return None,
    };
    let mut ended = false;
    let mut record = Record {
        volume_id: String::new(),
        staging: PathBuf::new(),
        capability: Capability {
            mode: VolumeMode::Filesystem,
            access_mode: AccessMode::SingleNodeWriter,
            mount: Default::default(),
        },
    };
    let (mut id, mut staging, mut mode, mut access) = (false, false, false, false);
    for line in lines {
        if ended {
            return None;
        }
        if needs_end && line == END {
            ended = true;
            continue;
        }
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        let bytes = unescape(value)?;
        match key {
            "volume_id" => (record.volume_id, id) = (String::from_utf8(bytes).ok()?, true),
            "staging" => (record.staging, staging) = (OsString::from_vec(bytes).into(), true),
            "mode" => {
                record.capability.mode = match value {
                    "Filesystem" => VolumeMode::Filesystem,
                    "Block" => VolumeMode::Block,
                    _ => return None,
                };
                mode = true;
            }
            "access_mode" => {
                record.capability.access_mode = AccessMode::ALL
                    .into_iter()
                    .find(|m| access_mode_name(*m) == value)?;
                access = true;
            }
            "fs_type" => {
                record.capability.mount.fs_type =
                    Some(String::from_utf8(bytes).ok()?).filter(|t| !t.is_empty());
            }
            "mount_flag" => record
                .capability
                .mount
                .mount_flags
                .push(String::from_utf8(bytes).ok()?),
            _ => return None,
        }
    }
    (id && staging && mode && access && ended == needs_end).then_some(record)
}

/// The CSI name of an access mode: stable across pav-csi versions.
pub(crate) fn access_mode_name(mode: AccessMode) -> &'static str {
    match mode {
        AccessMode::SingleNodeWriter => "SINGLE_NODE_WRITER",
        AccessMode::SingleNodeReaderOnly => "SINGLE_NODE_READER_ONLY",
        AccessMode::MultiNodeReaderOnly => "MULTI_NODE_READER_ONLY",
        AccessMode::MultiNodeSingleWriter => "MULTI_NODE_SINGLE_WRITER",
        AccessMode::MultiNodeMultiWriter => "MULTI_NODE_MULTI_WRITER",
        AccessMode::SingleNodeSingleWriter => "SINGLE_NODE_SINGLE_WRITER",
        AccessMode::SingleNodeMultiWriter => "SINGLE_NODE_MULTI_WRITER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pav_sdk::MountOptions;

    fn record(id: &str, staging: &str) -> Record {
        Record {
            volume_id: id.into(),
            staging: staging.into(),
            capability: Capability {
                mode: VolumeMode::Block,
                access_mode: AccessMode::MultiNodeReaderOnly,
                mount: MountOptions {
                    fs_type: Some("ext4".into()),
                    mount_flags: vec!["noatime".into(), "with space,%\n".into()],
                },
            },
        }
    }

    #[test]
    fn records_round_trip_and_are_found_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path());
        assert_eq!(records.get("v").unwrap(), None);
        assert_eq!(records.at(Path::new("/s")).unwrap(), None);
        let odd = record("v\n%1 ü", "/k/staging dir\n/x");
        records.put(&odd).unwrap();
        records.put(&record("w", "/k/w")).unwrap();
        assert_eq!(records.get("v\n%1 ü").unwrap().as_ref(), Some(&odd));
        assert_eq!(
            records.at(Path::new("/k/w")).unwrap().unwrap().volume_id,
            "w"
        );
        records.remove("v\n%1 ü").unwrap();
        records.remove("v\n%1 ü").unwrap();
        assert_eq!(records.get("v\n%1 ü").unwrap(), None);
        assert!(records.get("w").unwrap().is_some());
    }

    #[test]
    fn torn_records_are_set_aside_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path());
        records.put(&record("w", "/kubelet/w")).unwrap();
        let full = encode(&record("v", "/kubelet/v"));
        // What a node crash can leave: nothing, or a prefix of the record.
        // Every proper prefix, so a cut inside the last mount flag too.
        let torn: Vec<&str> = (0..full.len())
            .filter(|&i| full.is_char_boundary(i))
            .map(|i| &full[..i])
            .collect();
        for torn in torn {
            std::fs::write(records.file("v"), torn).unwrap();
            assert_eq!(records.get("v").unwrap(), None, "{torn:?}");
            assert!(!records.file("v").exists());
            assert!(records.file("v").with_extension("unreadable").exists());
            std::fs::write(records.file("v"), torn).unwrap();
            // Nor does it keep other volumes from being found or staged.
            assert_eq!(records.at(Path::new("/kubelet/v")).unwrap(), None);
            assert!(records.at(Path::new("/kubelet/w")).unwrap().is_some());
            records.put(&record("v", "/kubelet/v")).unwrap();
            assert!(records.get("v").unwrap().is_some());
            records.remove("v").unwrap();
        }
        assert_eq!(decode(&format!("{HEADER}\nvolume_id v\n")), None);
    }

    #[test]
    fn v1_records_are_still_read() {
        let v2 = encode(&record("v", "/kubelet/v"));
        let v1 = v2
            .replace(HEADER, HEADER_V1)
            .strip_suffix(&format!("{END}\n"))
            .unwrap()
            .to_owned();
        assert_eq!(decode(&v1), Some(record("v", "/kubelet/v")));
        assert_eq!(decode(&v2), Some(record("v", "/kubelet/v")));
        // An end line where it does not belong is not a record.
        assert_eq!(decode(&format!("{v2}mode Block\n")), None);
        assert_eq!(decode(&format!("{v1}{END}\n")), None);
    }

    #[test]
    fn access_mode_names_are_distinct() {
        let names: std::collections::BTreeSet<_> =
            AccessMode::ALL.into_iter().map(access_mode_name).collect();
        assert_eq!(names.len(), AccessMode::ALL.len());
    }
}
