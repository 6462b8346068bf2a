//! What a volume is and may be: its mode, how pods may use it, what it
//! may be created from. The spec ([`crate::model`], which re-exports
//! them), the phases' contexts and their evaluated sections share these
//! words, so they depend on none of those modules.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a volume may be created from (a claim's `dataSource.kind`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DataSourceKind {
    /// A VolumeSnapshot of this provisioner: the volume is restored from it.
    VolumeSnapshot,
    /// A claim bound to a volume of this provisioner: the volume is cloned.
    PersistentVolumeClaim,
}

impl DataSourceKind {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DataSourceKind::VolumeSnapshot => "VolumeSnapshot",
            DataSourceKind::PersistentVolumeClaim => "PersistentVolumeClaim",
        }
    }
}

/// Whether a volume is a file system or a raw block device.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum VolumeMode {
    /// A directory tree.
    Filesystem,
    /// A block special file.
    Block,
}

impl VolumeMode {
    /// All volume modes, in the guide's order.
    pub const ALL: [VolumeMode; 2] = [VolumeMode::Filesystem, VolumeMode::Block];

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeMode::Filesystem => "Filesystem",
            VolumeMode::Block => "Block",
        }
    }
}

/// How pods may use a volume.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AccessMode {
    /// Read-write by the pods of a single node.
    ReadWriteOnce,
    /// Read-only by pods on many nodes.
    ReadOnlyMany,
    /// Read-write by pods on many nodes.
    ReadWriteMany,
    /// Read-write by a single pod. Not in the PaV guide (it predates the
    /// mode): a provisioner serves it only when its
    /// `volumeValidation.accessModes` names it.
    ReadWriteOncePod,
}

impl AccessMode {
    /// The guide's three modes, in its order: the default of
    /// `volumeValidation.accessModes`.
    pub const DEFAULT: [AccessMode; 3] = [
        AccessMode::ReadWriteOnce,
        AccessMode::ReadOnlyMany,
        AccessMode::ReadWriteMany,
    ];

    /// Every mode a claim may ask for.
    pub const ALL: [AccessMode; 4] = [
        AccessMode::ReadWriteOnce,
        AccessMode::ReadOnlyMany,
        AccessMode::ReadWriteMany,
        AccessMode::ReadWriteOncePod,
    ];

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
            AccessMode::ReadOnlyMany => "ReadOnlyMany",
            AccessMode::ReadWriteMany => "ReadWriteMany",
            AccessMode::ReadWriteOncePod => "ReadWriteOncePod",
        }
    }
}
