//! What the populator decides without asking the API server: whose claim
//! it is, the prime claim made from it, the patches it sends, the request
//! the driver gets and when a failure is tried again. All pure, so each
//! rule is tested here without a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ApiResource, ObjectMeta};
use kube::runtime::reflector::ObjectRef;
use pav_sdk::VolumeMode;
use pav_sdk::{DataSourceKind, ObjectName, PopulateRequest};
use serde_json::{Value, json};

use super::{CLAIM_ANNOTATION, FINALIZER, POPULATED_FOR_LABEL, PRIME_OF_LABEL};
use crate::claims::SELECTED_NODE;

/// A user's claim: what every step names it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimKey {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
}

impl ClaimKey {
    /// The key of `claim`; `None` for an object the API server did not
    /// write (no namespace, name or uid).
    pub(crate) fn of(claim: &PersistentVolumeClaim) -> Option<Self> {
        let meta = &claim.metadata;
        Some(Self {
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
        })
    }

    pub(crate) fn object_name(&self) -> ObjectName {
        ObjectName {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PersistentVolumeClaim {}/{}", self.namespace, self.name)
    }
}

/// The kind `claim`'s `dataSourceRef` names, when it is one of `kinds`.
pub(crate) fn claimed_kind(
    claim: &PersistentVolumeClaim,
    kinds: &[DataSourceKind],
) -> Option<DataSourceKind> {
    let source = claim.spec.as_ref()?.data_source_ref.as_ref()?;
    let kind = DataSourceKind::new(
        source.api_group.clone().unwrap_or_default(),
        source.kind.clone(),
    );
    kinds.contains(&kind).then_some(kind)
}

/// The annotations the PV controller names a pending claim's provisioner
/// by (GA, then beta), from its StorageClass.
const STORAGE_PROVISIONER: [&str; 2] = [
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
];

/// Whether `claim`, of StorageClass `class` (`None`: gone), is `driver`'s
/// to populate or clean up: its class's provisioner is the driver. Every
/// populator of the cluster shares [`FINALIZER`], so the finalizer alone
/// does not say whose a claim is; for a claim that holds it (`finalized`)
/// and whose class was deleted since, the provisioner the PV controller
/// annotated it with says it, so that its deletion is still cleaned up.
pub(crate) fn owns(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    driver: &str,
    finalized: bool,
) -> bool {
    match class {
        Some(class) => class.provisioner == driver,
        None => {
            let annotations = claim.metadata.annotations.as_ref();
            finalized
                && STORAGE_PROVISIONER.iter().any(|key| {
                    annotations
                        .and_then(|a| a.get(*key))
                        .is_some_and(|p| p == driver)
                })
        }
    }
}

/// Whether the populator's finalizer is on `claim`: then the claim is
/// the populator's whatever its kinds say now, so that its deletion
/// still cleans up.
pub(crate) fn has_finalizer(claim: &PersistentVolumeClaim) -> bool {
    (claim.metadata.finalizers.iter().flatten()).any(|f| f == FINALIZER)
}

/// `claim`'s finalizers with the populator's added (`add`) or removed,
/// as a merge patch that fails (409) if the claim changed since it was
/// read, so another controller's finalizer is never lost; `None` when
/// there is nothing to change.
pub(crate) fn finalizer_patch(claim: &PersistentVolumeClaim, add: bool) -> Option<Value> {
    if has_finalizer(claim) == add {
        return None;
    }
    let mut finalizers: Vec<String> = (claim.metadata.finalizers.iter().flatten())
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if add {
        finalizers.push(FINALIZER.to_owned());
    }
    Some(json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": claim.metadata.resource_version,
    }}))
}

/// The namespace of `claim`'s data source when it is another one than
/// the claim's: refused, as a cross-namespace source needs a
/// ReferenceGrant the populator does not check.
pub(crate) fn foreign_source_namespace(claim: &PersistentVolumeClaim) -> Option<&str> {
    let source = claim.spec.as_ref()?.data_source_ref.as_ref()?;
    let namespace = source.namespace.as_deref()?;
    (Some(namespace) != claim.metadata.namespace.as_deref()).then_some(namespace)
}

/// Whether `claim` waits for the scheduler to pick a node: a volume made
/// before that could land where the pod cannot run.
pub(crate) fn waits_for_consumer(class: &StorageClass, claim: &PersistentVolumeClaim) -> bool {
    class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && !(claim.metadata.annotations.iter().flatten()).any(|(key, _)| key == SELECTED_NODE)
}

/// The name of the prime claim of the claim with uid `uid`: a uid is 36
/// characters, well within a name's 253, and never reused.
pub(crate) fn prime_name(uid: &str) -> String {
    format!("prime-{uid}")
}

/// The prime claim of `claim` in `namespace`: an empty volume of the
/// same class, size, modes and node, with no data source (else it would
/// wait for a populator itself), labelled for the populator's watch and
/// annotated with the claim it is for.
pub(crate) fn prime_claim(
    claim: &PersistentVolumeClaim,
    key: &ClaimKey,
    namespace: &str,
) -> PersistentVolumeClaim {
    let spec = claim.spec.clone().unwrap_or_default();
    let mut annotations = BTreeMap::from([(
        CLAIM_ANNOTATION.to_owned(),
        format!("{}/{}", key.namespace, key.name),
    )]);
    if let Some(node) = (claim.metadata.annotations.as_ref()).and_then(|a| a.get(SELECTED_NODE)) {
        annotations.insert(SELECTED_NODE.to_owned(), node.clone());
    }
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(prime_name(&key.uid)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                PRIME_OF_LABEL.to_owned(),
                key.uid.clone(),
            )])),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: spec.access_modes,
            resources: spec.resources,
            storage_class_name: spec.storage_class_name,
            volume_mode: spec.volume_mode,
            ..Default::default()
        }),
        status: None,
    }
}

/// The user's claim a prime claim is for, from its annotation.
pub(crate) fn claim_of_prime(
    prime: &PersistentVolumeClaim,
) -> Option<ObjectRef<PersistentVolumeClaim>> {
    let claim = prime.metadata.annotations.as_ref()?.get(CLAIM_ANNOTATION)?;
    let (namespace, name) = claim.split_once('/')?;
    Some(ObjectRef::new(name).within(namespace))
}

/// Whether `volume` is claimed by the claim with uid `uid`.
pub(crate) fn claimed_by(volume: &PersistentVolume, uid: &str) -> bool {
    let claim = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    claim.and_then(|c| c.uid.as_deref()) == Some(uid)
}

/// The merge patch that hands `volume` over to `claim`: the claim
/// reference the PV controller binds a pending claim to, with the
/// claim's uid so that no other claim of that name can take it, and the
/// label that finds the volume again before the claim is bound. Fails
/// (409) if the volume changed since it was read.
pub(crate) fn handover_patch(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Value {
    json!({
        "metadata": {
            "labels": {POPULATED_FOR_LABEL: claim.metadata.uid},
            "resourceVersion": volume.metadata.resource_version,
        },
        "spec": {"claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": claim.metadata.namespace,
            "name": claim.metadata.name,
            "uid": claim.metadata.uid,
            "resourceVersion": claim.metadata.resource_version,
        }},
    })
}

/// Why a prime claim's volume cannot be filled.
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum RequestError {
    /// Not provisioned by this driver (the StorageClass changed hands?).
    #[error("it is not a CSI volume of driver {driver}")]
    OtherDriver { driver: String },
    /// No `spec.capacity.storage`.
    #[error("it has no spec.capacity.storage")]
    NoCapacity,
    /// A capacity that is no quantity of bytes.
    #[error("its spec.capacity.storage {0:?} is not a quantity of bytes")]
    Capacity(String),
    /// A volume mode Kubernetes does not have.
    #[error("its spec.volumeMode {0:?} is neither Filesystem nor Block")]
    Mode(String),
}

/// What the driver is asked to fill `volume` (the prime claim's) with:
/// `source` of `source_kind`, with `class`'s parameters.
pub(crate) fn populate_request(
    volume: &PersistentVolume,
    class: &StorageClass,
    driver: &str,
    (claim, prime_claim): (ObjectName, ObjectName),
    (source_kind, source): (DataSourceKind, Value),
) -> Result<PopulateRequest, RequestError> {
    let spec = volume.spec.clone().unwrap_or_default();
    let csi = (spec.csi)
        .filter(|csi| csi.driver == driver)
        .ok_or_else(|| RequestError::OtherDriver {
            driver: driver.to_owned(),
        })?;
    let capacity = (spec.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .ok_or(RequestError::NoCapacity)?;
    let capacity = super::quantity::bytes(&capacity.0)
        .ok_or_else(|| RequestError::Capacity(capacity.0.clone()))?;
    let volume_mode = match spec.volume_mode.as_deref() {
        None | Some("Filesystem") => VolumeMode::Filesystem,
        Some("Block") => VolumeMode::Block,
        Some(other) => return Err(RequestError::Mode(other.to_owned())),
    };
    let mut request = PopulateRequest::new(
        csi.volume_handle,
        capacity,
        (claim, prime_claim),
        (source_kind, source),
    );
    request.volume_mode = volume_mode;
    request.parameters = class.parameters.clone().unwrap_or_default();
    Ok(request)
}

/// `<Kind> <name>` of `claim`'s data source, for messages (the kind with
/// its group: `Dataset.example.com set`, `ConfigMap seed`).
pub(crate) fn source_description(claim: &PersistentVolumeClaim) -> String {
    match claim.spec.as_ref().and_then(|s| s.data_source_ref.as_ref()) {
        Some(source) => {
            let kind = DataSourceKind::new(
                source.api_group.clone().unwrap_or_default(),
                source.kind.clone(),
            );
            format!("{kind} {}", source.name)
        }
        None => "no data source".to_owned(),
    }
}

/// How RBAC rules and `kubectl auth can-i` name `resource`:
/// `<plural>.<group>`, or `<plural>` in the core group.
pub(crate) fn resource_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// `note` within an event note's 1 kB, cut at a character boundary: the
/// API server refuses a longer one, and a driver's message may be long.
pub(crate) fn event_note(mut note: String) -> String {
    const MOST: usize = 1024;
    const MORE: &str = "…";
    if note.len() > MOST {
        let mut end = MOST - MORE.len();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str(MORE);
    }
    note
}

/// How long to wait after the `failures`th failure in a row (from 1):
/// 5 s, doubling, at most 5 minutes.
pub(crate) fn backoff(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(5);
    const MOST: Duration = Duration::from_secs(300);
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST * 2u32.pow(doublings)).min(MOST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn claim(value: Value) -> PersistentVolumeClaim {
        let mut object = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"namespace": "apps", "name": "data", "uid": "u-1", "resourceVersion": "41"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": "2Gi"}},
                "storageClassName": "fast",
                "volumeMode": "Block",
                "dataSourceRef": {"apiGroup": "example.com", "kind": "Dataset", "name": "set"},
                "dataSource": {"apiGroup": "example.com", "kind": "Dataset", "name": "set"},
                "selector": {"matchLabels": {"a": "b"}},
                "volumeAttributesClassName": "gold",
            },
        });
        merge(&mut object, value);
        serde_json::from_value(object).unwrap()
    }

    fn merge(target: &mut Value, patch: Value) {
        match (target, patch) {
            (Value::Object(target), Value::Object(patch)) => {
                for (key, value) in patch {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
            (target, patch) => *target = patch,
        }
    }

    fn class(provisioner: &str, mode: Option<&str>) -> StorageClass {
        StorageClass {
            provisioner: provisioner.into(),
            volume_binding_mode: mode.map(Into::into),
            parameters: Some(BTreeMap::from([("tier".into(), "gold".into())])),
            ..Default::default()
        }
    }

    fn key() -> ClaimKey {
        ClaimKey::of(&claim(json!({}))).unwrap()
    }

    fn volume(value: Value) -> PersistentVolume {
        let mut object = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pvc-9", "resourceVersion": "77"},
            "spec": {
                "capacity": {"storage": "1536Mi"},
                "csi": {"driver": "pop.example.com", "volumeHandle": "vol-9"},
                "claimRef": {"namespace": "pav", "name": "prime-u-1", "uid": "u-prime"},
            },
        });
        merge(&mut object, value);
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_claim_is_the_populators_by_its_source_kind() {
        let kinds = [
            DataSourceKind::new("", "ConfigMap"),
            DataSourceKind::new("example.com", "Dataset"),
        ];
        assert_eq!(
            claimed_kind(&claim(json!({})), &kinds),
            Some(DataSourceKind::new("example.com", "Dataset"))
        );
        let core =
            claim(json!({"spec": {"dataSourceRef": {"apiGroup": null, "kind": "ConfigMap"}}}));
        assert_eq!(
            claimed_kind(&core, &kinds),
            Some(DataSourceKind::new("", "ConfigMap"))
        );
        let other = claim(json!({"spec": {"dataSourceRef": {"kind": "Secret"}}}));
        assert_eq!(claimed_kind(&other, &kinds), None);
        let group = claim(json!({"spec": {"dataSourceRef": {"apiGroup": "other.io"}}}));
        assert_eq!(claimed_kind(&group, &kinds), None);
        let none = claim(json!({"spec": {"dataSourceRef": null}}));
        assert_eq!(claimed_kind(&none, &kinds), None);
        assert_eq!(claimed_kind(&claim(json!({})), &[]), None);
    }

    #[test]
    fn a_claim_is_the_drivers_by_its_class_or_once_held_by_its_provisioner_annotation() {
        let ours = class("pop.example.com", None);
        let theirs = class("other.example.com", None);
        let plain = claim(json!({}));
        for finalized in [false, true] {
            assert!(owns(&plain, Some(&ours), "pop.example.com", finalized));
            assert!(!owns(&plain, Some(&theirs), "pop.example.com", finalized));
            assert!(!owns(&plain, None, "pop.example.com", finalized));
        }
        for key in STORAGE_PROVISIONER {
            let annotated = claim(json!({"metadata": {"annotations": {key: "pop.example.com"}}}));
            assert!(owns(&annotated, None, "pop.example.com", true), "{key}");
            assert!(!owns(&annotated, None, "pop.example.com", false), "{key}");
            assert!(!owns(&annotated, None, "other.example.com", true), "{key}");
            // The class, while it exists, decides.
            assert!(
                !owns(&annotated, Some(&theirs), "pop.example.com", true),
                "{key}"
            );
        }
    }

    #[test]
    fn the_finalizer_is_added_and_removed_keeping_the_others() {
        let plain = claim(json!({"metadata": {"finalizers": ["kubernetes.io/pvc-protection"]}}));
        assert!(!has_finalizer(&plain));
        assert_eq!(finalizer_patch(&plain, false), None);
        let added = finalizer_patch(&plain, true).unwrap();
        assert_eq!(
            added,
            json!({"metadata": {
                "finalizers": ["kubernetes.io/pvc-protection", FINALIZER],
                "resourceVersion": "41",
            }})
        );

        let ours = claim(json!({"metadata": {"finalizers": ["a", FINALIZER, "b"]}}));
        assert!(has_finalizer(&ours));
        assert_eq!(finalizer_patch(&ours, true), None);
        assert_eq!(
            finalizer_patch(&ours, false).unwrap()["metadata"]["finalizers"],
            json!(["a", "b"])
        );
        let only = claim(json!({"metadata": {"finalizers": [FINALIZER]}}));
        assert_eq!(
            finalizer_patch(&only, false).unwrap()["metadata"]["finalizers"],
            json!([])
        );
        let none = claim(json!({}));
        assert_eq!(
            finalizer_patch(&none, true).unwrap()["metadata"]["finalizers"],
            json!([FINALIZER])
        );
    }

    #[test]
    fn a_source_in_another_namespace_is_named() {
        assert_eq!(foreign_source_namespace(&claim(json!({}))), None);
        let same = claim(json!({"spec": {"dataSourceRef": {"namespace": "apps"}}}));
        assert_eq!(foreign_source_namespace(&same), None);
        let other = claim(json!({"spec": {"dataSourceRef": {"namespace": "secrets"}}}));
        assert_eq!(foreign_source_namespace(&other), Some("secrets"));
    }

    #[test]
    fn a_late_binding_claim_waits_for_its_node() {
        let late = class("d", Some("WaitForFirstConsumer"));
        let unscheduled = claim(json!({}));
        let scheduled = claim(json!({"metadata": {"annotations": {SELECTED_NODE: "node-3"}}}));
        assert!(waits_for_consumer(&late, &unscheduled));
        assert!(!waits_for_consumer(&late, &scheduled));
        assert!(!waits_for_consumer(
            &class("d", Some("Immediate")),
            &unscheduled
        ));
        assert!(!waits_for_consumer(&class("d", None), &unscheduled));
    }

    #[test]
    fn the_prime_claim_copies_size_modes_class_and_node_but_no_source() {
        let user = claim(json!({"metadata": {
            "annotations": {SELECTED_NODE: "node-3", "note": "mine"},
            "labels": {"app": "db"},
            "finalizers": [FINALIZER],
        }}));
        let prime = prime_claim(&user, &key(), "pav");
        let expected = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "prime-u-1",
                "namespace": "pav",
                "labels": {PRIME_OF_LABEL: "u-1"},
                "annotations": {CLAIM_ANNOTATION: "apps/data", SELECTED_NODE: "node-3"},
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": "2Gi"}},
                "storageClassName": "fast",
                "volumeMode": "Block",
            },
        });
        assert_eq!(serde_json::to_value(&prime).unwrap(), expected);
        assert!(PRIME_OF_LABEL.len() <= 63 && prime_name(&"u".repeat(36)).len() <= 63);

        let unscheduled = prime_claim(&claim(json!({})), &key(), "pav");
        assert_eq!(
            unscheduled.metadata.annotations,
            Some(BTreeMap::from([(
                CLAIM_ANNOTATION.into(),
                "apps/data".into()
            )]))
        );
        assert_eq!(
            claim_of_prime(&prime),
            Some(ObjectRef::new("data").within("apps"))
        );
        assert_eq!(claim_of_prime(&user), None);
    }

    #[test]
    fn the_handover_names_the_claim_by_uid_and_version() {
        let pv = volume(json!({}));
        assert!(claimed_by(&pv, "u-prime"));
        assert!(!claimed_by(&pv, "u-1"));
        assert!(!claimed_by(
            &volume(json!({"spec": {"claimRef": null}})),
            "u-1"
        ));
        assert_eq!(
            handover_patch(&pv, &claim(json!({}))),
            json!({
                "metadata": {"labels": {POPULATED_FOR_LABEL: "u-1"}, "resourceVersion": "77"},
                "spec": {"claimRef": {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": "apps", "name": "data", "uid": "u-1", "resourceVersion": "41",
                }},
            })
        );
    }

    fn request(pv: &PersistentVolume) -> Result<PopulateRequest, RequestError> {
        let names = (
            key().object_name(),
            ObjectName {
                namespace: "pav".into(),
                name: "prime-u-1".into(),
            },
        );
        let source = json!({"apiVersion": "example.com/v1", "kind": "Dataset"});
        let kind = DataSourceKind::new("example.com", "Dataset");
        populate_request(
            pv,
            &class("pop.example.com", None),
            "pop.example.com",
            names,
            (kind, source),
        )
    }

    #[test]
    fn the_request_is_the_volume_the_class_and_the_source() {
        let req = request(&volume(json!({}))).unwrap();
        assert_eq!(req.handle.as_str(), "vol-9");
        assert_eq!(req.capacity, 1536 << 20);
        assert_eq!(req.volume_mode, VolumeMode::Filesystem);
        assert_eq!(req.parameters.get("tier").map(String::as_str), Some("gold"));
        assert_eq!(req.claim.to_string(), "apps/data");
        assert_eq!(req.prime_claim.to_string(), "pav/prime-u-1");
        assert_eq!(req.source_kind.to_string(), "Dataset.example.com");
        assert_eq!(req.source["kind"], "Dataset");
        let block = request(&volume(json!({"spec": {"volumeMode": "Block"}}))).unwrap();
        assert_eq!(block.volume_mode, VolumeMode::Block);
    }

    #[test]
    fn a_volume_that_cannot_be_filled_says_why() {
        let other = volume(json!({"spec": {"csi": {"driver": "other"}}}));
        assert_eq!(
            request(&other).unwrap_err().to_string(),
            "it is not a CSI volume of driver pop.example.com"
        );
        let not_csi = volume(json!({"spec": {"csi": null, "hostPath": {"path": "/x"}}}));
        assert!(matches!(
            request(&not_csi),
            Err(RequestError::OtherDriver { .. })
        ));
        let empty = volume(json!({"spec": {"capacity": null}}));
        assert_eq!(request(&empty), Err(RequestError::NoCapacity));
        let mut odd = volume(json!({}));
        (odd.spec.as_mut().unwrap().capacity.as_mut().unwrap())
            .insert("storage".into(), Quantity("lots".into()));
        assert_eq!(request(&odd), Err(RequestError::Capacity("lots".into())));
        let mode = volume(json!({"spec": {"volumeMode": "Tape"}}));
        assert_eq!(request(&mode), Err(RequestError::Mode("Tape".into())));
    }

    #[test]
    fn messages_name_the_source_the_resource_and_fit_an_event() {
        assert_eq!(
            source_description(&claim(json!({}))),
            "Dataset.example.com set"
        );
        let core = claim(
            json!({"spec": {"dataSourceRef": {"apiGroup": null, "kind": "ConfigMap", "name": "seed"}}}),
        );
        assert_eq!(source_description(&core), "ConfigMap seed");

        let config_maps = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        assert_eq!(resource_name(&config_maps), "configmaps");
        let classes = ApiResource::erase::<StorageClass>(&());
        assert_eq!(resource_name(&classes), "storageclasses.storage.k8s.io");

        assert_eq!(event_note("short".into()), "short");
        let exact = "x".repeat(1024);
        assert_eq!(event_note(exact.clone()), exact);
        let long = event_note("é".repeat(600));
        assert!(long.len() <= 1024 && long.ends_with("é…"), "{}", long.len());
    }

    #[test]
    fn backoff_doubles_from_five_seconds_to_five_minutes() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff(0), Duration::from_secs(5));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }
}
