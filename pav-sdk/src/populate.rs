//! Volume populators: the [`Populate`] touch point and what it is asked.
//!
//! A claim whose `dataSourceRef` names a kind other than a claim or a
//! VolumeSnapshot (a custom resource: the API server accepts no other
//! kind of the core group) is not provisioned by external-provisioner: it
//! waits for a populator. With
//! [`Populate`], the driver is that populator. pav-csi's `populator`
//! (feature `populator`) runs Kubernetes' populator protocol: it creates an
//! empty copy of the claim (the *prime claim*, in the driver's namespace),
//! which the driver provisions as any other; asks [`Populate::populate`] to
//! fill its volume; then hands the volume to the user's claim and deletes
//! the copy. A volume is handed over only once it is filled: a failed
//! population is retried with backoff, and a claim deleted on the way
//! leaves nothing behind.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::types::VolumeMode;
use crate::{Result, VolumeId};

/// A kind of object a claim's `dataSourceRef` may name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DataSourceKind {
    /// The API group (`example.com`).
    pub api_group: String,
    /// The kind (`VolumeFiles`).
    pub kind: String,
}

impl DataSourceKind {
    /// The kind `kind` of API group `api_group`.
    pub fn new(api_group: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_group: api_group.into(),
            kind: kind.into(),
        }
    }
}

impl std::fmt::Display for DataSourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.api_group.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.api_group)
        }
    }
}

/// A namespaced object by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Asks to fill a new, empty volume from a claim's data source.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PopulateRequest {
    /// The volume to fill, as the driver created it for the prime claim.
    /// Untrusted input: see [`VolumeId::path_component`].
    pub handle: VolumeId,
    /// Its capacity in bytes.
    pub capacity: u64,
    /// Filesystem or block.
    pub volume_mode: VolumeMode,
    /// The StorageClass's parameters.
    pub parameters: BTreeMap<String, String>,
    /// The user's claim, which gets the volume once it is filled.
    pub claim: ObjectName,
    /// The prime claim: the empty copy the volume is bound to while it is
    /// filled, in the driver's namespace. A pod that mounts it there sees
    /// the volume.
    pub prime_claim: ObjectName,
    /// The kind of the data source.
    pub source_kind: DataSourceKind,
    /// The data source, as the API server returned it (JSON, with
    /// `apiVersion` and `kind`; without `metadata.managedFields`).
    /// Written by the claim's owner: untrusted.
    pub source: serde_json::Value,
}

impl PopulateRequest {
    /// A request to fill `handle` from `source`, for the fields a test or
    /// another runner needs to set; the rest keep their defaults
    /// (filesystem, no parameters).
    pub fn new(
        handle: impl Into<VolumeId>,
        capacity: u64,
        (claim, prime_claim): (ObjectName, ObjectName),
        (source_kind, source): (DataSourceKind, serde_json::Value),
    ) -> Self {
        Self {
            handle: handle.into(),
            capacity,
            volume_mode: VolumeMode::Filesystem,
            parameters: BTreeMap::new(),
            claim,
            prime_claim,
            source_kind,
            source,
        }
    }
}

/// Fills new volumes from the objects claims name in their
/// `dataSourceRef`.
///
/// The runner calls [`populate`](Populate::populate) until it returns
/// `Ok`, with backoff, for as long as the claim exists, and hands the
/// volume over only then: it must be idempotent (a retry after a crash
/// finds a half-filled volume) and must not return `Ok` before the data is
/// durable. Its error's message becomes a Warning event on the claim.
#[async_trait]
pub trait Populate: Send + Sync + 'static {
    /// The kinds it fills volumes from. Asked at each claim the runner
    /// sees, so the answer may change while the driver runs.
    async fn data_source_kinds(&self) -> Vec<DataSourceKind>;

    /// Fills the volume of `req` from its source.
    async fn populate(&self, req: PopulateRequest) -> Result<()>;
}
