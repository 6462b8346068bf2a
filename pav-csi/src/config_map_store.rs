//! A [`RecordStore`] in ConfigMaps (feature `kube`): records that a
//! controller and the node plugins of a driver deployed apart share. The
//! controller writes them; each node plugin reads them to give Stage its
//! volume's record and to find the volumes deleted elsewhere
//! ([`pav_sdk::StageRequest::node_dir`]).

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};
use pav_sdk::records::{GroupRecord, RecordStore, Recorded, SnapshotRecord, VolumeRecord};
use pav_sdk::{Error, Result};
use serde::Serialize;

use crate::staged::fnv1a_128;

/// The label naming the driver whose record a ConfigMap holds.
pub const DRIVER_LABEL: &str = "records.pav.albertofaria.github.io/driver";
/// The label naming the kind of record (`volume`, `snapshot`, `group`).
pub const KIND_LABEL: &str = "records.pav.albertofaria.github.io/kind";
/// The ConfigMap key holding the record, as JSON.
const RECORD_KEY: &str = "record.json";
/// Server-side apply's field manager.
const FIELD_MANAGER: &str = "pav-csi-records";

/// One ConfigMap per record in one namespace, labelled with the driver's
/// name and the record's kind, named after a hash of both and the
/// record's name (names CSI gives are longer than Kubernetes allows).
///
/// The controller needs `get`, `list`, `patch`, `create` and `delete` on
/// ConfigMaps in the namespace; node plugins `list`.
///
/// ```no_run
/// # async fn f(client: kube::Client) {
/// let store = pav_csi::config_map_store::ConfigMapStore::new(client, "tmpfs", "tmpfs.example.com");
/// let records = pav_sdk::records::Records::in_store(store);
/// # let _ = records;
/// # }
/// ```
#[derive(Clone)]
pub struct ConfigMapStore {
    api: Api<ConfigMap>,
    namespace: String,
    driver: String,
}

impl std::fmt::Debug for ConfigMapStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapStore")
            .field("namespace", &self.namespace)
            .field("driver", &self.driver)
            .finish_non_exhaustive()
    }
}

/// The kinds of record, by their label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Volume,
    Snapshot,
    Group,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Volume, Kind::Snapshot, Kind::Group];

    fn label(self) -> &'static str {
        match self {
            Kind::Volume => "volume",
            Kind::Snapshot => "snapshot",
            Kind::Group => "group",
        }
    }
}

impl ConfigMapStore {
    /// Records of driver `driver` in ConfigMaps of `namespace`.
    pub fn new(client: Client, namespace: &str, driver: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            driver: driver.to_owned(),
        }
    }

    /// The ConfigMap of record `name` of `kind`.
    fn config_map_name(&self, kind: Kind, name: &str) -> String {
        let key = [self.driver.as_bytes(), b"\0", name.as_bytes()].concat();
        format!("pav-record-{}-{:032x}", kind.label(), fnv1a_128(&key))
    }

    fn unavailable(&self, doing: &str, what: &str, error: &kube::Error) -> Error {
        Error::Unavailable(format!(
            "{doing} {what} in namespace {}: {error}",
            self.namespace
        ))
    }

    async fn put<T: Serialize>(&self, kind: Kind, name: &str, record: &T) -> Result<()> {
        let config_map_name = self.config_map_name(kind, name);
        let json = serde_json::to_string(record)
            .map_err(|e| Error::Internal(format!("encoding record {name:?}: {e}")))?;
        let labels = BTreeMap::from([
            (DRIVER_LABEL.to_owned(), self.driver.clone()),
            (KIND_LABEL.to_owned(), kind.label().to_owned()),
        ]);
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(config_map_name.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(RECORD_KEY.to_owned(), json)])),
            ..Default::default()
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = (self.api)
            .patch(&config_map_name, &params, &Patch::Apply(&config_map))
            .await;
        let what = format!("record ConfigMap {config_map_name} ({name:?})");
        applied.map_err(|e| self.unavailable("writing", &what, &e))?;
        Ok(())
    }

    async fn remove(&self, kind: Kind, name: &str) -> Result<()> {
        let config_map_name = self.config_map_name(kind, name);
        match self
            .api
            .delete(&config_map_name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => {
                let what = format!("record ConfigMap {config_map_name} ({name:?})");
                Err(self.unavailable("removing", &what, &e))
            }
        }
    }
}

/// The record a ConfigMap holds, of the kind its label names.
fn parse<T: serde::de::DeserializeOwned>(config_map: &ConfigMap) -> Result<T> {
    let name = config_map.metadata.name.as_deref().unwrap_or_default();
    let json = (config_map.data.as_ref())
        .and_then(|data| data.get(RECORD_KEY))
        .ok_or_else(|| Error::Internal(format!("record ConfigMap {name} has no {RECORD_KEY}")))?;
    serde_json::from_str(json).map_err(|e| {
        Error::Internal(format!(
            "record ConfigMap {name} is unreadable ({e}): move it away once you know which volume it was"
        ))
    })
}

#[async_trait]
impl RecordStore for ConfigMapStore {
    async fn load(&self) -> Result<Recorded> {
        let selector = format!("{DRIVER_LABEL}={}", self.driver);
        let listed = (self
            .api
            .list(&ListParams::default().labels(&selector))
            .await)
            .map_err(|e| self.unavailable("listing", "record ConfigMaps", &e))?;
        let mut recorded = Recorded::default();
        for config_map in &listed.items {
            let labels = config_map.metadata.labels.as_ref();
            let kind = labels.and_then(|labels| labels.get(KIND_LABEL));
            match Kind::ALL
                .into_iter()
                .find(|k| Some(k.label()) == kind.map(String::as_str))
            {
                Some(Kind::Volume) => recorded.volumes.push(parse(config_map)?),
                Some(Kind::Snapshot) => recorded.snapshots.push(parse(config_map)?),
                Some(Kind::Group) => recorded.groups.push(parse(config_map)?),
                None => {} // a kind a newer pav-csi writes
            }
        }
        Ok(recorded)
    }

    async fn put_volume(&self, record: &VolumeRecord) -> Result<()> {
        self.put(Kind::Volume, &record.name, record).await
    }

    async fn remove_volume(&self, name: &str) -> Result<()> {
        self.remove(Kind::Volume, name).await
    }

    async fn put_snapshot(&self, record: &SnapshotRecord) -> Result<()> {
        self.put(Kind::Snapshot, &record.name, record).await
    }

    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.remove(Kind::Snapshot, name).await
    }

    async fn put_group(&self, record: &GroupRecord) -> Result<()> {
        self.put(Kind::Group, &record.name, record).await
    }

    async fn remove_group(&self, name: &str) -> Result<()> {
        self.remove(Kind::Group, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn config_map_names_are_valid_and_differ_by_driver_kind_and_name() {
        let client = || {
            let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
            Client::try_from(config).unwrap()
        };
        let a = ConfigMapStore::new(client(), "ns", "a.example.com");
        let b = ConfigMapStore::new(client(), "ns", "b.example.com");
        let long = "pvc-".to_owned() + &"x".repeat(124);
        let names = [
            a.config_map_name(Kind::Volume, &long),
            a.config_map_name(Kind::Snapshot, &long),
            b.config_map_name(Kind::Volume, &long),
            a.config_map_name(Kind::Volume, "pvc-1"),
        ];
        for name in &names {
            assert!(name.len() <= 63, "{name}");
            assert!(
                (name.chars()).all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
        }
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
    }
}
