//! Volume health: the [`Health`] touch point and what it is asked.
//!
//! One check serves both sides of the driver. The controller asks it
//! without a path (`ControllerGetVolume`, and `ListVolumes` for volumes
//! [`List`](crate::List) gave no condition); the node asks it with the
//! path where the volume is published (`NodeGetVolumeStats` and
//! `NodeGetVolumeHealth`, when [`Stats`](crate::Stats) gave no condition
//! or the provisioner has none), or without a path when kubelet's
//! `NodeGetVolumeHealth` names none (a volume it could not publish).

use std::path::PathBuf;

use async_trait::async_trait;

use crate::types::{VolumeCondition, VolumeMode};
use crate::{Result, VolumeId};

/// Asks how a volume is (CSI `VolumeCondition`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthRequest {
    /// The volume handle. Untrusted input: see
    /// [`VolumeId::path_component`].
    pub handle: VolumeId,
    /// Where the volume is published, when the node asks
    /// (`NodeGetVolumeStats`, `NodeGetVolumeHealth`): a mount point inside
    /// kubelet's directory that pav-csi found mounted. `None` when the
    /// controller asks, and when kubelet asks `NodeGetVolumeHealth` about
    /// a volume it has not published (a mount that failed): the question
    /// is then the controller's, asked on the node.
    pub volume_path: Option<PathBuf>,
    /// Filesystem or block, when the node asks (what is mounted at
    /// `volume_path`).
    pub volume_mode: Option<VolumeMode>,
}

impl HealthRequest {
    /// The controller's question: the volume alone, wherever it is.
    pub fn controller(handle: impl Into<VolumeId>) -> Self {
        Self {
            handle: handle.into(),
            volume_path: None,
            volume_mode: None,
        }
    }

    /// The node's question: the volume published at `volume_path`.
    pub fn node(
        handle: impl Into<VolumeId>,
        volume_path: impl Into<PathBuf>,
        volume_mode: VolumeMode,
    ) -> Self {
        Self {
            handle: handle.into(),
            volume_path: Some(volume_path.into()),
            volume_mode: Some(volume_mode),
        }
    }

    /// True when the node asks (a volume path is given).
    pub fn on_node(&self) -> bool {
        self.volume_path.is_some()
    }
}

/// Tells whether a volume is healthy: its storage is there and intact.
///
/// **What Kubernetes does with it.** Two consumers, both optional:
///
/// * **kubelet**, with its `CSIVolumeHealth` feature gate (alpha, off by
///   default: `featureGates: {CSIVolumeHealth: true}` in the kubelet
///   configuration). From Kubernetes' v1.37 on it calls CSI v1.13's
///   `NodeGetVolumeHealth` for each volume its pods use, every volume
///   stats period (a minute by default), and writes the answer into the
///   pod's `status.volumeHealth`: per volume, `healthConditions` of
///   `{status, reason, message}`, `status` from the condition's
///   [`HealthProblem`](crate::HealthProblem) (`Inaccessible`, `Degraded`,
///   `DataLoss`), `reason` and `message` its own; none when healthy. The
///   gate must be on in kube-apiserver too, which otherwise drops the
///   field. pav-csi advertises the node's `GET_VOLUME_HEALTH` capability
///   when the provisioner has this trait (or [`Stats`](crate::Stats)).
///   Before v1.37 kubelet calls `NodeGetVolumeStats` instead, at each
///   metrics collection, and exports the condition as the gauge
///   `kubelet_volume_stats_health_status_abnormal{namespace,
///   persistentvolumeclaim}` (1 when abnormal, 0 when not) and each
///   abnormal answer as a `VolumeConditionAbnormal` Warning event on the
///   pod (`Volume <name>: <message>`); for it pav-csi advertises
///   `VOLUME_CONDITION` alongside, without which that kubelet ignores
///   conditions. The one answer serves both.
/// * **external-health-monitor**'s controller (the
///   `csi-external-health-monitor-controller` sidecar beside the
///   controller, flags `--csi-address`, `--monitor-interval` (default
///   1m), `--enable-node-watcher`; RBAC to get and list
///   PersistentVolumes, PersistentVolumeClaims, Pods and Nodes and to
///   create Events) calls `ControllerGetVolume` for each
///   PersistentVolume of the driver (or `ListVolumes` with
///   `--list-volumes-interval`) and records an abnormal condition as a
///   Warning event (`VolumeConditionAbnormal`) on the claim. pav-csi
///   advertises `GET_VOLUME` and the controller's `VOLUME_CONDITION`
///   capability when the provisioner has this trait and a listing (a
///   [`List`](crate::List), or [records](crate::Provisioner::keep_records)),
///   which `ControllerGetVolume` finds the volume in.
///
/// Neither changes anything on its own: the condition is for people and
/// their alerts. Report what the user should act on (the storage behind
/// the volume is gone, damaged or full), with a message that names it.
#[async_trait]
pub trait Health: Send + Sync {
    /// The condition of the volume `req.handle`: healthy, or abnormal with
    /// a message saying what is wrong.
    ///
    /// **CSI calls:** `ControllerGetVolume` and `ListVolumes` (without a
    /// path: [`HealthRequest::controller`]), `NodeGetVolumeStats` and
    /// `NodeGetVolumeHealth` (with the path where the volume is published:
    /// [`HealthRequest::node`]; `NodeGetVolumeHealth` without one asks
    /// [`HealthRequest::controller`]). On the node the volume is in use: a
    /// volume whose storage vanished under a mount is abnormal, not
    /// [`NotFound`](crate::Error::NotFound), so that kubelet sees it. Say
    /// what kind of problem it is with
    /// [`VolumeCondition::because`](crate::VolumeCondition::because).
    ///
    /// **Codes:** [`NotFound`](crate::Error::NotFound) when the volume
    /// does not exist (`ControllerGetVolume`, and `NodeGetVolumeHealth`
    /// without a path, answer `NOT_FOUND`); any other error fails the
    /// call, and the caller asks again at its next round. It runs for every
    /// volume at every round: keep it cheap (a `stat`, a few bytes read).
    async fn condition(&self, req: HealthRequest) -> Result<VolumeCondition>;
}
