//! What pav's watch caches keep of an object. A reflector store holds every
//! object it watches for the process' life, so each watch drops what no
//! reader of its store needs before the store keeps it: the cost of a cache
//! then follows what pav reads, not what the API server sends.

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use kube::Resource;

/// Drops `object`'s managedFields: the server-side apply bookkeeping of
/// every field manager, often the largest part of an object's metadata,
/// which pav never reads.
pub fn without_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A PersistentVolume reduced to its name, uid and CSI driver: what the
/// operator reads of every volume in the cluster (a driver's count), and
/// all a driver keeps of another driver's volume.
pub fn slim_volume(pv: &mut PersistentVolume) {
    let driver = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.driver.clone());
    pv.metadata = kube::api::ObjectMeta {
        name: pv.metadata.name.take(),
        uid: pv.metadata.uid.take(),
        ..Default::default()
    };
    pv.status = None;
    pv.spec = driver.map(|driver| PersistentVolumeSpec {
        csi: Some(CSIPersistentVolumeSource {
            driver,
            ..Default::default()
        }),
        ..Default::default()
    });
}

/// What the driver of `provisioner` keeps of a PersistentVolume: its own
/// volumes whole but for managedFields (a volume's object reaches the
/// templates), any other volume slim.
pub fn volume_of(provisioner: &str) -> impl FnMut(&mut PersistentVolume) + Send + 'static {
    let provisioner = provisioner.to_owned();
    move |pv| {
        let ours = (pv.spec.as_ref())
            .and_then(|s| s.csi.as_ref())
            .is_some_and(|c| c.driver == provisioner);
        if ours {
            without_managed_fields(pv);
        } else {
            slim_volume(pv);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn volumes() -> Vec<PersistentVolume> {
        serde_yaml::from_str(
            "- metadata: { name: a, uid: u1, annotations: { x: y }, labels: { l: v },\n    \
                 managedFields: [ { manager: kube-controller-manager, operation: Update } ] }\n  \
               spec: { csi: { driver: hello, volumeHandle: h1, volumeAttributes: { k: v } }, capacity: { storage: 1Gi } }\n  \
               status: { phase: Bound }\n\
             - metadata: { name: b, uid: u2, managedFields: [ { manager: m } ] }\n  \
               spec: { csi: { driver: other, volumeHandle: h2 }, capacity: { storage: 1Gi } }\n\
             - metadata: { name: c }\n  spec: { hostPath: { path: /x } }\n",
        )
        .unwrap()
    }

    #[test]
    fn slim_volumes_keep_name_uid_and_driver_only() {
        let mut pvs = volumes();
        pvs.iter_mut().for_each(slim_volume);
        assert_eq!(
            serde_json::to_value(&pvs).unwrap(),
            json!([
                { "apiVersion": "v1", "kind": "PersistentVolume",
                  "metadata": { "name": "a", "uid": "u1" },
                  "spec": { "csi": { "driver": "hello", "volumeHandle": "" } } },
                { "apiVersion": "v1", "kind": "PersistentVolume",
                  "metadata": { "name": "b", "uid": "u2" },
                  "spec": { "csi": { "driver": "other", "volumeHandle": "" } } },
                { "apiVersion": "v1", "kind": "PersistentVolume", "metadata": { "name": "c" } },
            ])
        );
    }

    #[test]
    fn a_driver_keeps_its_own_volumes_whole_but_for_managed_fields() {
        let mut pvs = volumes();
        let expected_own = {
            let mut own = serde_json::to_value(&pvs[0]).unwrap();
            own["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            own
        };
        pvs.iter_mut().for_each(volume_of("hello"));
        let json = serde_json::to_value(&pvs).unwrap();
        assert_eq!(json[0], expected_own);
        assert_eq!(
            json[0]["spec"]["csi"]["volumeAttributes"],
            json!({"k": "v"})
        );
        assert_eq!(
            json[1],
            json!({ "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": { "name": "b", "uid": "u2" },
                    "spec": { "csi": { "driver": "other", "volumeHandle": "" } } })
        );
    }

    #[test]
    fn managed_fields_go_and_the_rest_stays() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "p", "labels": { "a": "b" },
                          "managedFields": [ { "manager": "pav", "operation": "Apply" } ] },
            "status": { "phase": "Running" },
        }))
        .unwrap();
        without_managed_fields(&mut pod);
        assert_eq!(
            serde_json::to_value(&pod).unwrap(),
            json!({ "apiVersion": "v1", "kind": "Pod",
                    "metadata": { "name": "p", "labels": { "a": "b" } },
                    "status": { "phase": "Running" } })
        );
    }
}
