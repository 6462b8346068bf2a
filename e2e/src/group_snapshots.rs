//! VolumeGroupSnapshots (`groupsnapshot.storage.k8s.io/v1`), for the
//! scenarios that take them of examples/sparse-file and
//! examples/local-volumes: taking one and waiting for its member
//! VolumeSnapshots, and deleting one with its members.

use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use crate::{
    STEP, apply, delete_and_wait, event_lines, v1_api, volume_snapshots, wait_for, wait_gone,
    wait_until,
};

/// The API group of VolumeGroupSnapshots, their classes and contents.
pub const API_GROUP: &str = "groupsnapshot.storage.k8s.io";

/// The VolumeGroupSnapshot API of `namespace`.
pub async fn groups(client: &Client, namespace: &str) -> Api<DynamicObject> {
    v1_api(client, namespace, API_GROUP, "VolumeGroupSnapshot").await
}

/// Takes VolumeGroupSnapshot `name` of class `class` in `namespace`, of
/// the claims labelled `selector` (`(label, value)`): applies it, waits
/// until it is readyToUse (panicking with its events otherwise) and until
/// `count` ready member VolumeSnapshots name it. Returns the group as it
/// is then and its members' names, sorted.
pub async fn take(
    client: &Client,
    namespace: &str,
    name: &str,
    class: &str,
    selector: (&str, &str),
    count: usize,
) -> (DynamicObject, Vec<String>) {
    let (label, value) = selector;
    let group_yaml = format!(
        r#"
apiVersion: {API_GROUP}/v1
kind: VolumeGroupSnapshot
metadata:
  name: {name}
  namespace: {namespace}
spec:
  volumeGroupSnapshotClassName: {class}
  source:
    selector:
      matchLabels: {{ {label}: {value} }}
"#
    );
    apply(client, &group_yaml).await.unwrap();
    let ready = wait_for(
        &groups(client, namespace).await,
        name,
        STEP,
        "readyToUse",
        |g| g.data["status"]["readyToUse"] == true,
    )
    .await;
    let group = match ready {
        Ok(group) => group,
        Err(e) => panic!(
            "{e}; events: {:#?}",
            event_lines(client, namespace, name).await
        ),
    };
    let snapshots = volume_snapshots(client, namespace).await;
    let members = wait_until(
        &format!("{count} ready member VolumeSnapshots of {name}"),
        STEP,
        || async {
            let list = snapshots.list(&ListParams::default()).await?;
            let mut members: Vec<String> = list
                .items
                .iter()
                .filter(|s| {
                    s.data["status"]["volumeGroupSnapshotName"] == name
                        && s.data["status"]["readyToUse"] == true
                })
                .filter_map(|s| s.metadata.name.clone())
                .collect();
            members.sort();
            Ok((members.len() == count).then_some(members))
        },
    )
    .await
    .unwrap();
    (group, members)
}

/// Deletes VolumeGroupSnapshot `name` of `namespace` and waits until it
/// and its `members` are gone (its class's deletionPolicy: Delete).
pub async fn delete_with_members(client: &Client, namespace: &str, name: &str, members: &[String]) {
    delete_and_wait(&groups(client, namespace).await, name, STEP)
        .await
        .unwrap();
    let snapshots = volume_snapshots(client, namespace).await;
    for member in members {
        wait_gone(&snapshots, member, STEP).await.unwrap();
    }
}
