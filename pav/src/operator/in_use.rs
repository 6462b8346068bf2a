//! What keeps a PavProvisioner from being deleted: its volumes, the claims
//! of its StorageClasses, its staging pods, its snapshots ([`InUse`]).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt as _};

use super::Error;

/// Why a PavProvisioner may not be deleted yet: what still uses it —
/// volumes, claims, volumes still staged for a client pod (a claim may be
/// deleted before kubelet unpublishes it, and unstaging needs the node
/// plugin), or snapshots (deleting one runs the provisioner's snapshot
/// deletion pod through its driver; without the driver its data would
/// leak). Its message is the condition's and the event's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PavProvisioner {provisioner} is still used by {}; delete them before the PavProvisioner can be deleted", self.uses())]
pub struct InUse {
    /// The PavProvisioner's name.
    pub provisioner: String,
    /// Its PersistentVolumes.
    pub volumes: usize,
    /// Claims of its StorageClasses.
    pub claims: usize,
    /// Its volumes still staged for client pods.
    pub staged: usize,
    /// VolumeSnapshotContents of its driver.
    pub snapshots: usize,
}

impl InUse {
    /// Whether anything still uses the provisioner.
    pub fn blocks(&self) -> bool {
        self.volumes + self.claims + self.staged + self.snapshots > 0
    }

    /// `1 PersistentVolume, 2 PersistentVolumeClaims, 1 staged volume and
    /// 3 VolumeSnapshotContents`.
    fn uses(&self) -> String {
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let uses: Vec<String> = [
            (self.volumes, "PersistentVolume"),
            (self.claims, "PersistentVolumeClaim"),
            (self.staged, "staged volume"),
            (self.snapshots, "VolumeSnapshotContent"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| plural(n, what))
        .collect();
        match uses.as_slice() {
            [] => "nothing".to_owned(),
            [only] => only.clone(),
            [first @ .., last] => format!("{} and {last}", first.join(", ")),
        }
    }
}

/// How many staging pods of provisioner `name` exist: volumes staged (or
/// being unstaged) for client pods.
pub(super) async fn staging_pods_of(client: &Client, name: &str) -> Result<usize, Error> {
    Ok(staging_pods(client, name).await?.len())
}

/// The staging pods of provisioner `name` (metadata only), in every
/// namespace.
pub(super) async fn staging_pods(
    client: &Client,
    name: &str,
) -> Result<Vec<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod>>, Error> {
    let selector = format!(
        "{}={name},{}=staging",
        crate::pods::LABEL_PROVISIONER,
        crate::pods::LABEL_PHASE
    );
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&selector))
        .await?;
    Ok(pods.items)
}

/// How many VolumeSnapshotContents of provisioner `name`'s driver exist.
/// None in a cluster without the snapshot CRDs: the API server answers
/// their list with 404 (by status code: the message is not a contract).
pub(super) async fn snapshots_of(client: &Client, name: &str) -> Result<usize, Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crate::snapshots::api_resource());
    match api.list(&ListParams::default()).await {
        Ok(contents) => Ok(snapshots_in(&contents.items, name)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(0),
        Err(err) => Err(err.into()),
    }
}

/// How many of the VolumeSnapshotContents `contents` are of driver `name`
/// (`spec.driver`).
fn snapshots_in(contents: &[DynamicObject], name: &str) -> usize {
    contents
        .iter()
        .filter(|c| crate::snapshots::is_of_driver(c, name))
        .count()
}

/// Names of the PersistentVolumes whose CSI driver is `name`.
pub(super) async fn volumes_of(client: &Client, name: &str) -> Result<Vec<String>, Error> {
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(volumes_in(&pvs.items, name))
}

/// Names of the PersistentVolumes in `pvs` whose CSI driver is `name`.
pub fn volumes_in<P: std::borrow::Borrow<PersistentVolume>>(pvs: &[P], name: &str) -> Vec<String> {
    of_driver(pvs, name).map(|pv| pv.name_any()).collect()
}

/// Names and UIDs of the PersistentVolumes in `pvs` whose CSI driver is
/// `name`.
pub(super) fn volume_ids_in<P: std::borrow::Borrow<PersistentVolume>>(
    pvs: &[P],
    name: &str,
) -> Vec<(String, String)> {
    of_driver(pvs, name)
        .map(|pv| (pv.name_any(), pv.uid().unwrap_or_default()))
        .collect()
}

fn of_driver<'a, P: std::borrow::Borrow<PersistentVolume>>(
    pvs: &'a [P],
    name: &'a str,
) -> impl Iterator<Item = &'a PersistentVolume> {
    pvs.iter()
        .map(std::borrow::Borrow::borrow)
        .filter(move |pv: &&PersistentVolume| {
            pv.spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .is_some_and(|csi| csi.driver == name)
        })
}

pub(super) async fn claims_of(client: &Client, name: &str) -> Result<Vec<String>, Error> {
    let classes = Api::<StorageClass>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let pvcs = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(claims_in(&pvcs.items, &classes.items, name))
}

/// `namespace/name` of the claims in `pvcs` that are, or will be, served
/// by provisioner `name`: of one of its StorageClasses, or annotated with
/// it as storage provisioner.
pub fn claims_in(
    pvcs: &[PersistentVolumeClaim],
    classes: &[StorageClass],
    name: &str,
) -> Vec<String> {
    let classes: BTreeSet<String> = classes
        .iter()
        .filter(|sc| sc.provisioner == name)
        .map(|sc| sc.name_any())
        .collect();
    pvcs.iter()
        .filter(|pvc| {
            let annotations = pvc.annotations();
            let class = pvc
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.clone())
                .or_else(|| {
                    annotations
                        .get("volume.beta.kubernetes.io/storage-class")
                        .cloned()
                });
            class.is_some_and(|c| classes.contains(&c))
                || [
                    "volume.kubernetes.io/storage-provisioner",
                    "volume.beta.kubernetes.io/storage-provisioner",
                ]
                .iter()
                .any(|key| annotations.get(*key).is_some_and(|p| p == name))
        })
        .map(|pvc| format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_use_message_counts() {
        let in_use_message = |provisioner: &str, volumes, claims, staged, snapshots| {
            let in_use = InUse {
                provisioner: provisioner.to_owned(),
                volumes,
                claims,
                staged,
                snapshots,
            };
            in_use.blocks().then(|| in_use.to_string())
        };
        assert_eq!(in_use_message("p", 0, 0, 0, 0), None);
        assert_eq!(
            in_use_message("p", 1, 2, 0, 0).unwrap(),
            "PavProvisioner p is still used by 1 PersistentVolume and 2 PersistentVolumeClaims; \
             delete them before the PavProvisioner can be deleted"
        );
        assert_eq!(
            in_use_message("p", 0, 0, 1, 0).unwrap(),
            "PavProvisioner p is still used by 1 staged volume; \
             delete them before the PavProvisioner can be deleted"
        );
        assert_eq!(
            in_use_message("p", 1, 1, 3, 0).unwrap(),
            "PavProvisioner p is still used by 1 PersistentVolume, 1 PersistentVolumeClaim and 3 staged volumes; \
             delete them before the PavProvisioner can be deleted"
        );
        assert_eq!(
            in_use_message("p", 0, 0, 0, 1).unwrap(),
            "PavProvisioner p is still used by 1 VolumeSnapshotContent; \
             delete them before the PavProvisioner can be deleted"
        );
        assert_eq!(
            in_use_message("p", 0, 1, 0, 2).unwrap(),
            "PavProvisioner p is still used by 1 PersistentVolumeClaim and 2 VolumeSnapshotContents; \
             delete them before the PavProvisioner can be deleted"
        );
    }

    #[test]
    fn volumes_and_claims_of_a_provisioner() {
        let pvs: Vec<PersistentVolume> = serde_yaml::from_str(
            "- metadata: { name: a }\n  spec: { csi: { driver: hello, volumeHandle: h1 } }\n\
             - metadata: { name: b }\n  spec: { csi: { driver: other, volumeHandle: h2 } }\n\
             - metadata: { name: c }\n  spec: { hostPath: { path: /x } }\n",
        )
        .unwrap();
        assert_eq!(volumes_in(&pvs, "hello"), ["a"]);
        let classes: Vec<StorageClass> = serde_yaml::from_str(
            "- metadata: { name: fast }\n  provisioner: hello\n\
             - metadata: { name: slow }\n  provisioner: other\n",
        )
        .unwrap();
        let pvcs: Vec<PersistentVolumeClaim> = serde_yaml::from_str(
            "- metadata: { name: one, namespace: ns }\n  spec: { storageClassName: fast }\n\
             - metadata: { name: two, namespace: ns }\n  spec: { storageClassName: slow }\n\
             - metadata: { name: three, namespace: ns, annotations: { volume.kubernetes.io/storage-provisioner: hello } }\n  spec: {}\n",
        )
        .unwrap();
        assert_eq!(claims_in(&pvcs, &classes, "hello"), ["ns/one", "ns/three"]);
    }

    #[test]
    fn snapshots_of_a_provisioner_are_those_of_its_driver() {
        let contents: Vec<DynamicObject> = serde_yaml::from_str(
            "- { apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshotContent, metadata: { name: a }, spec: { driver: hello } }\n\
             - { apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshotContent, metadata: { name: b }, spec: { driver: other } }\n\
             - { apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshotContent, metadata: { name: c }, spec: { driver: hello } }\n\
             - { apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshotContent, metadata: { name: d } }\n",
        )
        .unwrap();
        assert_eq!(snapshots_in(&contents, "hello"), 2);
        assert_eq!(snapshots_in(&contents, "other"), 1);
        assert_eq!(snapshots_in(&contents, "none"), 0);
    }
}
