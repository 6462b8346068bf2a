//! Attaching volumes to nodes (CSI `ControllerPublishVolume` and
//! `ControllerUnpublishVolume`, Kubernetes VolumeAttachment objects): the
//! [`Attach`] touch point and its requests.
//!
//! A network or cloud disk is first attached to the node's machine (an
//! iSCSI or NVMe-oF login, a cloud API's "attach disk to instance"), by
//! the controller, and only then staged by the node: what the controller
//! did reaches the node as the *publish context*
//! ([`Attached::publish_context`], then
//! [`StageRequest::publish_context`](crate::StageRequest::publish_context)),
//! such as the device path the disk appeared at.

use async_trait::async_trait;

use crate::types::{AccessMode, Parameters, Secrets, VolumeMode, VolumeRecord, recorded};
use crate::{Result, VolumeId};

/// Attaches volumes to nodes before they are staged there, and detaches
/// them after they were unstaged (block storage reached over a network:
/// iSCSI, NVMe-oF, cloud disks).
///
/// With it, pav-csi advertises the `PUBLISH_UNPUBLISH_VOLUME` controller
/// capability (and `PUBLISH_READONLY` when [`attaches_read_only`](Self::attaches_read_only)),
/// and Kubernetes attaches each volume before a pod on a node uses it:
///
/// - the CSIDriver object has `attachRequired: true` (the default when it
///   is absent);
/// - the external-attacher sidecar runs beside the controller
///   (`registry.k8s.io/sig-storage/csi-attacher`, flags
///   `--csi-address=/csi/csi.sock` and, with more than one replica,
///   `--leader-election`), with RBAC to `get`, `list`, `watch`, `update`
///   and `patch` `volumeattachments` and `volumeattachments/status`
///   (`storage.k8s.io`), and to `get`, `list` and `watch`
///   `persistentvolumes`, `nodes` and `csinodes`;
/// - kube-controller-manager's attach/detach controller creates a
///   VolumeAttachment for each volume a scheduled pod uses on its node;
///   external-attacher calls [`attach`](Self::attach) and writes the
///   publish context into the VolumeAttachment's `status.attachmentMetadata`,
///   which kubelet passes to `NodeStageVolume`; once no pod on the node
///   uses the volume and kubelet unstaged it, the VolumeAttachment is
///   deleted and external-attacher calls [`detach`](Self::detach).
///
/// The node ids are those the node plugins report (`NodeGetInfo`, the
/// `node_id` given to pav-csi's `serve_node`): kubelet records them in
/// the node's CSINode object, where external-attacher reads them.
///
/// **Volumes per node:** a node that can hold only so many attached
/// volumes (a cloud instance's disk slots) says so with
/// [`Provisioner::max_volumes_per_node`](crate::Provisioner::max_volumes_per_node):
/// the node plugin reports it (`NodeGetInfo.max_volumes_per_node`, which
/// kubelet copies into CSINode's `allocatable.count` and the scheduler
/// counts), and, with [records](crate::Provisioner::keep_records), the
/// controller refuses an attach past it (`RESOURCE_EXHAUSTED`). Give the
/// controller's provisioner the same limit as the nodes' for that.
///
/// **With records** ([`Provisioner::keep_records`](crate::Provisioner::keep_records)),
/// pav-sdk records each volume's attachments (node, capability,
/// read-only flag, publish context) and answers itself what the CSI spec
/// requires:
///
/// | call | answered |
/// |---|---|
/// | attach of an unrecorded volume | `NOT_FOUND`; the author is not called |
/// | attach to a node it is attached to, same capability and read-only flag | the recorded publish context; the author is not called |
/// | attach to a node it is attached to, another capability or flag | `ALREADY_EXISTS` |
/// | attach of a volume attached elsewhere, when either attachment's access mode is a single node's | `FAILED_PRECONDITION` |
/// | attach to a node holding [`max_volumes_per_node`](crate::Provisioner::max_volumes_per_node) attachments | `RESOURCE_EXHAUSTED` |
/// | detach of an unrecorded volume, or from a node it is not attached to | success; the author is not called |
/// | detach without a node | [`detach`](Self::detach) once per attached node |
/// | Delete of a volume still attached | `FAILED_PRECONDITION` (the CSI spec's "volume in use"); Delete is not called |
///
/// Without records, these are the author's to answer.
#[async_trait]
pub trait Attach: Send + Sync {
    /// Attaches the volume `req.handle` to the node `req.node_id`, and
    /// returns what the node needs to find it (the publish context). The
    /// same request again (a retry) returns the same context.
    ///
    /// **CSI call:** `ControllerPublishVolume`, from external-attacher,
    /// for a VolumeAttachment of this driver. pav-csi has checked the
    /// request (volume id, node id and capability present, the modes
    /// declared), that the volume exists (with [`Create::exists`](crate::Create::exists)),
    /// and runs no other call on the volume meanwhile.
    ///
    /// **Codes**, as the CSI spec gives them, and what external-attacher
    /// does (its v4.13 source): every error is written into the
    /// VolumeAttachment's `status.attachError` and retried with
    /// exponential backoff; kubelet waits for `attached: true` meanwhile
    /// (the pod stays `ContainerCreating`, a `FailedAttachVolume` event).
    ///
    /// | Return | Meaning |
    /// |---|---|
    /// | [`NotFound`](crate::Error::NotFound) | the volume, or the node, does not exist |
    /// | [`AlreadyExists`](crate::Error::AlreadyExists) | attached to this node already, with another capability or read-only flag |
    /// | [`FailedPrecondition`](crate::Error::FailedPrecondition) | attached to another node and cannot be attached to two (its access mode is one node's) |
    /// | [`ResourceExhausted`](crate::Error::ResourceExhausted) | the node holds as many volumes as it can |
    /// | [`Unavailable`](crate::Error::Unavailable), [`Aborted`](crate::Error::Aborted) | not finished: call again |
    /// | [`Internal`](crate::Error::Internal) | failed |
    ///
    /// The publish context is at most 4 KiB (keys and values), of CSI
    /// strings; pav-csi answers `INTERNAL` for one it cannot carry.
    async fn attach(&self, req: AttachRequest) -> Result<Attached>;

    /// Detaches the volume from `req.node_id`, or from every node when
    /// it is `None`. A volume that is not attached there, or does not
    /// exist, is detached: success.
    ///
    /// **CSI call:** `ControllerUnpublishVolume`, from external-attacher,
    /// when a VolumeAttachment is deleted (after kubelet unstaged the
    /// volume); its error goes into `status.detachError` and is retried.
    async fn detach(&self, req: DetachRequest) -> Result<()>;

    /// Whether [`attach`](Self::attach) attaches read-only when
    /// [`AttachRequest::read_only`] says so; pav-csi then advertises
    /// `PUBLISH_READONLY`. Without it, pav-csi refuses a read-only attach
    /// (`INVALID_ARGUMENT`): the volume would be writable on the node.
    /// Kubernetes asks for one for a PersistentVolume whose
    /// `spec.csi.readOnly` is true, and only when advertised.
    fn attaches_read_only(&self) -> bool {
        false
    }
}

/// Asks to attach a volume to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttachRequest {
    /// The volume handle, untrusted as every [`VolumeId`] is; pav-csi has
    /// checked that the volume exists.
    pub handle: VolumeId,
    /// The node to attach to, as its node plugin reports it (untrusted:
    /// check it before it names a path or a command's argument).
    pub node_id: String,
    /// Filesystem or block, as the volume will be staged.
    pub volume_mode: VolumeMode,
    /// The access mode it will be used with.
    pub access_mode: AccessMode,
    /// Attach read-only (only asked when [`Attach::attaches_read_only`]).
    pub read_only: bool,
    /// The context returned by Create, or PV volume attributes for static volumes.
    pub context: Parameters,
    /// Secrets for the operation (external-attacher's
    /// `csi.storage.k8s.io/controller-publish-secret-*` StorageClass keys).
    pub secrets: Secrets,
    /// The volume as pav-sdk recorded it (without this attachment), as
    /// for [`StageRequest::record`](crate::StageRequest::record). With
    /// records it is always there: pav-sdk answers `NOT_FOUND` for an
    /// unrecorded volume without asking; `None` without records.
    pub record: Option<VolumeRecord>,
}

impl AttachRequest {
    /// [`record`](Self::record), or [`Error::NotFound`](crate::Error::NotFound)
    /// when there is none.
    pub fn recorded(&self) -> Result<&VolumeRecord> {
        recorded(&self.record, &self.handle)
    }
}

/// What [`Attach::attach`] answers: what the node needs to use the volume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attached {
    /// Passed to the node's Stage as
    /// [`StageRequest::publish_context`](crate::StageRequest::publish_context)
    /// (the CSI `publish_context`): a device path, a target's address, ...
    pub publish_context: Parameters,
}

impl Attached {
    /// Attached, with `publish_context` for the node.
    pub fn with_context(publish_context: Parameters) -> Self {
        Self { publish_context }
    }
}

/// Asks to detach a volume from a node, or from every node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DetachRequest {
    /// The volume handle (untrusted; it may name no volume).
    pub handle: VolumeId,
    /// The node to detach from; `None`: from every node it is attached to.
    pub node_id: Option<String>,
    /// Secrets for the operation (`csi.storage.k8s.io/controller-publish-secret-*`).
    pub secrets: Secrets,
}

/// Constructors of the attach requests (re-exported from
/// [`build`](crate::build)).
pub(crate) mod build {
    use super::*;

    /// A read-write `SingleNodeWriter` [`AttachRequest`] of `handle` to `node_id`.
    pub fn attach(
        handle: impl Into<VolumeId>,
        node_id: impl Into<String>,
        mode: VolumeMode,
    ) -> AttachRequest {
        AttachRequest {
            handle: handle.into(),
            node_id: node_id.into(),
            volume_mode: mode,
            access_mode: AccessMode::SingleNodeWriter,
            read_only: false,
            context: Parameters::new(),
            secrets: Secrets::default(),
            record: None,
        }
    }

    /// A [`DetachRequest`] of `handle` from `node_id` (`None`: every node).
    pub fn detach(handle: impl Into<VolumeId>, node_id: Option<String>) -> DetachRequest {
        DetachRequest {
            handle: handle.into(),
            node_id,
            secrets: Secrets::default(),
        }
    }
}
