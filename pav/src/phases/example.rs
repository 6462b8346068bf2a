//! What `pav render` shows a phase with: the objects it was given (or the
//! built-in samples), what the driver would derive from them (the volume
//! handle, the node, the client pod, the kubelet target path), and how a
//! plan is printed. Every phase's example reads it; it reads no phase.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::{Phase, samples};
use serde::Serialize;

use crate::pods::PodTarget;
use crate::recipe::{Plan, PlanError};

/// The Kubernetes objects a phase is evaluated against.
pub(crate) struct Objects {
    pub(crate) pvc: PersistentVolumeClaim,
    pub(crate) sc: StorageClass,
    pub(crate) pv: PersistentVolume,
    pub(crate) node: Node,
    /// The client pod of staging and unstaging.
    pub(crate) client_pod: Pod,
    /// The kubelet target path (`None`: kubelet's for the client pod).
    pub(crate) target_path: Option<String>,
    /// The `parameters` of `--vac` (none without it).
    pub(crate) mutable_parameters: BTreeMap<String, String>,
    /// `--snapshot-content`'s (none: a sample snapshot of the claim's
    /// volume).
    pub(crate) snapshot: Option<RecordedSnapshot>,
    /// The `parameters` of `--snapshot-class`, as a snapshot's templates
    /// see them.
    pub(crate) snapshot_parameters: BTreeMap<String, String>,
    /// Whether `--vac` was given.
    pub(crate) vac_given: bool,
    /// `--data-source`'s object (none: one of the claim's data source
    /// kind with a name only).
    pub(crate) data_source: Option<serde_json::Value>,
    pub(crate) claims: Vec<PersistentVolumeClaim>,
    /// Where each of the four came from, to label errors about them.
    pub(crate) origins: Origins,
}

impl Objects {
    /// `--snapshot-content` for `phase`: refused when it records the
    /// other kind (a group for a snapshot phase, or the reverse), or, for a
    /// deletion, no handle (a snapshot not taken yet).
    pub(crate) fn recorded_snapshot(
        &self,
        phase: Phase,
    ) -> anyhow::Result<Option<&RecordedSnapshot>> {
        let Some(recorded) = &self.snapshot else {
            return Ok(None);
        };
        let group = matches!(
            phase,
            Phase::GroupSnapshotCreation | Phase::GroupSnapshotDeletion
        );
        let kind = |group| {
            if group {
                "VolumeGroupSnapshotContent"
            } else {
                "VolumeSnapshotContent"
            }
        };
        if recorded.group != group {
            anyhow::bail!(
                "--snapshot-content {}: a {}, but --phase {phase} reads a {}",
                recorded.path.display(),
                kind(recorded.group),
                kind(group)
            );
        }
        let deletion = matches!(
            phase,
            Phase::SnapshotDeletion | Phase::GroupSnapshotDeletion
        );
        if deletion && recorded.handle.is_none() {
            anyhow::bail!(
                "--snapshot-content {}: the {} records no handle (the snapshot was not taken)",
                recorded.path.display(),
                kind(group)
            );
        }
        Ok(Some(recorded))
    }

    /// The name of the snapshot (`prefix` `snapshot`) or group
    /// (`groupsnapshot`) being taken: csi-snapshotter's for
    /// `--snapshot-content`, else `PREFIX-<the claim's UID>`.
    pub(crate) fn snapshot_name(&self, prefix: &str) -> String {
        match self.snapshot.as_ref().and_then(|s| s.name.clone()) {
            Some(name) => name,
            None => {
                let uid = self.pvc.metadata.uid.as_deref().unwrap_or_default();
                format!("{prefix}-{uid}")
            }
        }
    }
}

/// A snapshot or group snapshot as `--snapshot-content` records it.
pub(crate) struct RecordedSnapshot {
    /// The file it was read from.
    pub(crate) path: PathBuf,
    /// Whether it is a group (a VolumeGroupSnapshotContent).
    pub(crate) group: bool,
    /// The name csi-snapshotter gives it (`None`: pre-provisioned).
    pub(crate) name: Option<String>,
    /// Its handle (`None`: not taken yet).
    pub(crate) handle: Option<String>,
    /// A group's members, or the snapshot itself: each handle, and its
    /// source volume's handle when known.
    pub(crate) members: Vec<(String, Option<String>)>,
}

/// The files `--pvc`, `--sc`, `--pv` and `--node` named (`None`: sample).
pub(crate) struct Origins {
    pub(crate) pvc: Option<Origin>,
    pub(crate) sc: Option<Origin>,
    pub(crate) pv: Option<Origin>,
    pub(crate) node: Option<Origin>,
}

/// The option and file that gave an object.
#[derive(Debug)]
pub(crate) struct Origin {
    option: &'static str,
    path: PathBuf,
}

impl Origin {
    pub(crate) fn new(option: &'static str, path: PathBuf) -> Self {
        Self { option, path }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.option, self.path.display())
    }
}

impl Origins {
    /// Relabels an error pav-templates raised about one of the objects
    /// (its location names the object, `PersistentVolumeClaim ns/name`,
    /// where a PavProvisioner's name would be): says which file holds the
    /// object, or that it is a built-in sample, and never calls it a
    /// provisioner.
    pub(crate) fn label(&self, error: pav_templates::Error) -> anyhow::Error {
        let pav_templates::Error::Schema { at, message } = error else {
            return error.into();
        };
        let kind = at.provisioner.split(' ').next().unwrap_or_default();
        let origin = match kind {
            PersistentVolumeClaim::KIND => &self.pvc,
            StorageClass::KIND => &self.sc,
            PersistentVolume::KIND => &self.pv,
            Node::KIND => &self.node,
            _ => {
                return pav_templates::Error::Schema { at, message }.into();
            }
        };
        let origin = match origin {
            Some(origin) => origin.to_string(),
            None => "built-in sample".to_owned(),
        };
        ObjectError {
            origin,
            object: at.provisioner,
            path: at.path,
            message,
        }
        .into()
    }
}

/// A claim, class, volume or node that a phase cannot be evaluated against.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {object}, field {path}: {message}")]
struct ObjectError {
    /// `--pvc FILE`, or `built-in sample`.
    origin: String,
    /// Kind and name, as `PersistentVolumeClaim ns/name`.
    object: String,
    /// The field at fault.
    path: String,
    /// What is wrong with it.
    message: String,
}

/// The flags of `pav render` that are not objects.
pub(crate) struct RenderOptions {
    pub(crate) static_provisioning: bool,
    pub(crate) read_only: bool,
    /// The driver's `--namespace`.
    pub(crate) namespace: String,
    /// When a health check runs.
    pub(crate) time: std::time::SystemTime,
}

/// The client pod `pav render` stages for when given none: `sample-client`
/// in the sample claim's namespace.
pub(crate) fn sample_client_pod() -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("sample-client".to_owned());
    pod.metadata.namespace = samples::pvc().metadata.namespace;
    pod.metadata.uid = Some("7b1e2c3d-4f5a-4b6c-8d7e-9f0a1b2c3d4e".to_owned());
    pod
}

/// Where kubelet publishes a volume of the CSI driver for a client pod:
/// `/var/lib/kubelet/pods/<pod uid>/volumes/kubernetes.io~csi/<pv>/mount`.
fn kubelet_target_path(client_uid: &str, pv: &str) -> String {
    format!("/var/lib/kubelet/pods/{client_uid}/volumes/kubernetes.io~csi/{pv}/mount")
}

/// One phase as `pav render` shows it: the objects and flags it was given,
/// and what the driver's RPCs would know besides them, derived once here
/// so that every phase of a volume on a node names the same volume, node,
/// client pod and target path (and so the same staging pod).
pub(crate) struct Example<'a> {
    /// The PavProvisioner's name.
    pub(crate) provisioner: &'a str,
    /// The phase shown.
    pub(crate) phase: Phase,
    /// The objects given, or the samples.
    pub(crate) objects: &'a Objects,
    /// The other flags.
    pub(crate) options: &'a RenderOptions,
    /// The volume handle, from the PersistentVolume.
    pub(crate) handle: String,
    /// The Node's name.
    pub(crate) node_name: String,
    /// The client pod's namespace, name and UID.
    pub(crate) client: (&'a str, &'a str, &'a str),
    /// The kubelet target path the volume is published at for the client
    /// pod: `--target-path`, else kubelet's.
    pub(crate) target_path: String,
}

impl<'a> Example<'a> {
    /// `phase` of the PavProvisioner named `provisioner`, shown with
    /// `objects` and `options`.
    pub(crate) fn new(
        provisioner: &'a str,
        phase: Phase,
        objects: &'a Objects,
        options: &'a RenderOptions,
    ) -> Self {
        let handle = crate::recipe::plan::handle_of(&objects.pv).to_owned();
        let node_name = objects.node.metadata.name.clone().unwrap_or_default();
        let pv_name = objects.pv.metadata.name.clone().unwrap_or_default();
        let client = &objects.client_pod.metadata;
        let client = (
            client.namespace.as_deref().unwrap_or_default(),
            client.name.as_deref().unwrap_or_default(),
            client.uid.as_deref().unwrap_or_default(),
        );
        let target_path = objects
            .target_path
            .clone()
            .unwrap_or_else(|| kubelet_target_path(client.2, &pv_name));
        Example {
            provisioner,
            phase,
            objects,
            options,
            handle,
            node_name,
            client,
            target_path,
        }
    }

    /// A plan's error as `pav render` prints it: a context error names the
    /// file the object came from, a template's error is printed whole.
    pub(crate) fn planned<T>(&self, result: Result<T, PlanError>) -> anyhow::Result<T> {
        result.map_err(|error| match error {
            PlanError::Context(e) => self.objects.origins.label(e),
            PlanError::Render { error, .. } => error.into(),
            other => other.into(),
        })
    }

    /// The claim's requested capacity, at least and at most, as the
    /// driver reads it from the claim; an error names the claim's file.
    pub(crate) fn requested_capacity(&self) -> anyhow::Result<(u64, Option<u64>)> {
        pav_templates::context::requested_capacity(&self.objects.pvc)
            .map_err(|e| self.objects.origins.label(e))
    }

    /// The name of the staging pod of the example's volume at its target
    /// path on its node: the pod whose staged volume node expansion and
    /// health checks see.
    pub(crate) fn staging_pod(&self) -> String {
        PodTarget {
            provisioner: self.provisioner,
            phase: Phase::Staging,
            volume: &crate::pods::staging_key(&self.handle, &self.target_path),
            node: Some(&self.node_name),
        }
        .pod_name()
    }

    /// `plan` as `pav render` prints it.
    pub(crate) fn to_yaml<E: Serialize>(&self, plan: Plan<E>) -> anyhow::Result<String> {
        Ok(serde_yaml::to_string(&Rendered {
            provisioner: self.provisioner.to_owned(),
            phase: self.phase.name().to_owned(),
            evaluated: plan.evaluated,
            pods: plan.pod.into_iter().collect(),
        })?)
    }
}

/// What `pav render` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rendered<E: Serialize> {
    provisioner: String,
    phase: String,
    evaluated: E,
    /// The phase's pod, if it has one.
    pods: Vec<Pod>,
}
