//! The optional touch points beyond create, delete and stage (expansion,
//! capacity, listing, snapshots, modification) through a real tonic
//! client: each is
//! advertised only when implemented, and pav-csi's checks and codes.

mod common;

use common::{Harness, Options, capability, create_request};
use pav_csi::csi;
use pav_sdk::VolumeMode;
use tonic::Code;

/// The node RPC capabilities the driver advertises.
async fn node_rpcs(h: &mut Harness) -> Vec<i32> {
    use csi::node_service_capability::Type;
    let caps = h
        .node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    caps.iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect()
}

/// The plugin's `VolumeExpansion` capabilities.
async fn expansion_kinds(h: &mut Harness) -> Vec<i32> {
    use csi::plugin_capability::Type;
    let caps = h
        .identity
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    caps.iter()
        .filter_map(|c| match &c.r#type {
            Some(Type::VolumeExpansion(e)) => Some(e.r#type),
            _ => None,
        })
        .collect()
}

fn expand_request(id: &str, bytes: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: id.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn expansion_is_advertised_only_when_implemented() {
    use csi::controller_service_capability::rpc::Type as Controller;
    use csi::node_service_capability::rpc::Type as Node;
    use csi::plugin_capability::volume_expansion::Type as Kind;
    let mut plain = Harness::start().await;
    assert!(
        !common::controller_rpcs(&mut plain)
            .await
            .contains(&(Controller::ExpandVolume as i32))
    );
    assert!(
        !node_rpcs(&mut plain)
            .await
            .contains(&(Node::ExpandVolume as i32))
    );
    assert_eq!(expansion_kinds(&mut plain).await, Vec::<i32>::new());
    let expand = plain
        .controller
        .controller_expand_volume(expand_request("vol-1", 1 << 20))
        .await
        .unwrap_err();
    assert_eq!(expand.code(), Code::Unimplemented);
    plain.stop().await;

    let options = Options {
        expand: true,
        ..Default::default()
    };
    let mut online = Harness::start_with(options.clone()).await;
    assert!(
        common::controller_rpcs(&mut online)
            .await
            .contains(&(Controller::ExpandVolume as i32))
    );
    assert!(
        node_rpcs(&mut online)
            .await
            .contains(&(Node::ExpandVolume as i32))
    );
    assert_eq!(
        expansion_kinds(&mut online).await,
        vec![Kind::Online as i32]
    );
    online.stop().await;

    let mut offline = Harness::start_with(Options {
        offline_expansion: true,
        ..options
    })
    .await;
    assert_eq!(
        expansion_kinds(&mut offline).await,
        vec![Kind::Offline as i32]
    );
    offline.stop().await;
}

#[tokio::test]
async fn controller_expand_checks_and_grows() {
    let mut h = Harness::start_with(Options {
        expand: true,
        ..Default::default()
    })
    .await;
    let volume = h
        .controller
        .create_volume(create_request("pvc-grow"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let id = volume.volume_id.as_str();
    let code = |r: Result<tonic::Response<csi::ControllerExpandVolumeResponse>, tonic::Status>| {
        r.unwrap_err().code()
    };
    let c = &mut h.controller;
    assert_eq!(
        code(
            c.controller_expand_volume(expand_request("", 2 << 20))
                .await
        ),
        Code::InvalidArgument
    );
    let mut no_range = expand_request(id, 0);
    no_range.capacity_range = None;
    assert_eq!(
        code(c.controller_expand_volume(no_range).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.controller_expand_volume(expand_request(id, -1)).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            c.controller_expand_volume(expand_request("vol-nope", 2 << 20))
                .await
        ),
        Code::NotFound
    );

    let grown = c
        .controller_expand_volume(expand_request(id, 3 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grown.capacity_bytes, 3 << 20);
    assert!(grown.node_expansion_required);
    // A repeat, and a smaller request, keep the size: never shrink.
    for bytes in [3 << 20, 2 << 20] {
        let again = c
            .controller_expand_volume(expand_request(id, bytes))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(again.capacity_bytes, 3 << 20);
    }
    // A limit below what the provisioner answers is its error, not a success.
    let mut capped = expand_request(id, 2 << 20);
    capped.capacity_range.as_mut().unwrap().limit_bytes = 2 << 20;
    assert_eq!(
        code(c.controller_expand_volume(capped).await),
        Code::Internal
    );
    // CreateVolume's cached answer does not report the old size.
    let again = c
        .create_volume(create_request("pvc-grow"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(again.capacity_bytes, 3 << 20);
    assert_eq!(
        h.provisioner
            .calls()
            .iter()
            .filter(|c| **c == "expand")
            .count(),
        4
    );
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn node_expand_needs_a_published_volume() {
    let mut h = Harness::start_with(Options {
        expand: true,
        ..Default::default()
    })
    .await;
    let request = |id: &str, path: &str| csi::NodeExpandVolumeRequest {
        volume_id: id.into(),
        volume_path: path.into(),
        ..Default::default()
    };
    let target = h.path("pods/p/target");
    let target = target.to_str().unwrap().to_owned();
    let code = |r: Result<tonic::Response<csi::NodeExpandVolumeResponse>, tonic::Status>| {
        r.unwrap_err().code()
    };
    assert_eq!(
        code(h.node.node_expand_volume(request("", &target)).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(h.node.node_expand_volume(request("v", "")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(h.node.node_expand_volume(request("v", "some/path")).await),
        Code::NotFound
    );
    assert_eq!(
        code(h.node.node_expand_volume(request("v", "/etc")).await),
        Code::NotFound
    );
    assert_eq!(
        code(h.node.node_expand_volume(request("v", &target)).await),
        Code::NotFound
    );
    assert!(!h.provisioner.calls().contains(&"node_expand"));
    let volume = h
        .controller
        .create_volume(create_request("pvc-node"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let id = volume.volume_id;
    let staging = h.path("staging");
    std::fs::create_dir_all(&staging).unwrap();
    h.node
        .node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: id.clone(),
            staging_target_path: staging.to_string_lossy().into(),
            volume_capability: Some(capability(VolumeMode::Filesystem)),
            ..Default::default()
        })
        .await
        .unwrap();
    h.node
        .node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: id.clone(),
            staging_target_path: staging.to_string_lossy().into(),
            target_path: target.clone(),
            volume_capability: Some(capability(VolumeMode::Filesystem)),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut block = request(&id, &target);
    block.volume_capability = Some(capability(VolumeMode::Block));
    assert_eq!(
        code(h.node.node_expand_volume(block).await),
        Code::InvalidArgument
    );
    let grown = h
        .node
        .node_expand_volume(request(&id, &target))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grown.capacity_bytes, 1 << 20);
    assert_eq!(
        h.provisioner
            .calls()
            .iter()
            .filter(|c| **c == "node_expand")
            .count(),
        1
    );
    h.stop().await;
}

#[tokio::test]
async fn capacity_is_reported_per_topology_segment() {
    use csi::controller_service_capability::rpc::Type as Controller;
    let mut plain = Harness::start().await;
    assert!(
        !common::controller_rpcs(&mut plain)
            .await
            .contains(&(Controller::GetCapacity as i32))
    );
    plain.stop().await;

    let mut h = Harness::start_with(Options {
        capacity: true,
        access_modes: Some(vec![pav_sdk::AccessMode::SingleNodeWriter]),
        block: false,
        ..Default::default()
    })
    .await;
    assert!(
        common::controller_rpcs(&mut h)
            .await
            .contains(&(Controller::GetCapacity as i32))
    );
    let zone = |z: &str| csi::Topology {
        segments: [("zone".to_owned(), z.to_owned())].into(),
    };
    let ask = |topology: Option<csi::Topology>, caps: Vec<csi::VolumeCapability>| {
        csi::GetCapacityRequest {
            volume_capabilities: caps,
            accessible_topology: topology,
            ..Default::default()
        }
    };
    let everything = h
        .controller
        .get_capacity(ask(None, vec![]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(everything.available_capacity, 100 << 20);
    assert_eq!(everything.maximum_volume_size, Some(64 << 20));
    assert_eq!(everything.minimum_volume_size, None);
    h.controller
        .create_volume(create_request("pvc-cap"))
        .await
        .unwrap();
    let filesystem = vec![capability(VolumeMode::Filesystem)];
    let in_a = h
        .controller
        .get_capacity(ask(Some(zone("a")), filesystem.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(in_a.available_capacity, 99 << 20, "the new volume counts");
    let in_b = h
        .controller
        .get_capacity(ask(Some(zone("b")), filesystem))
        .await
        .unwrap();
    assert_eq!(in_b.into_inner().available_capacity, 0);
    // No room at all for volumes the provisioner cannot make: answered
    // without asking it.
    let asked = h
        .provisioner
        .calls()
        .iter()
        .filter(|c| **c == "capacity")
        .count();
    let block = h
        .controller
        .get_capacity(ask(None, vec![capability(VolumeMode::Block)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (block.available_capacity, block.maximum_volume_size),
        (0, None)
    );
    let asked_after = h
        .provisioner
        .calls()
        .iter()
        .filter(|c| **c == "capacity")
        .count();
    assert_eq!(asked, asked_after);
    let mut huge = ask(None, vec![]);
    huge.parameters = [("k".to_owned(), "v".repeat(5000))].into();
    let error = h.controller.get_capacity(huge).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    h.stop().await;
}

#[tokio::test]
async fn list_volumes_pages_by_handle_with_conditions() {
    use csi::controller_service_capability::rpc::Type as Controller;
    let mut plain = Harness::start().await;
    let rpcs = common::controller_rpcs(&mut plain).await;
    assert!(!rpcs.contains(&(Controller::ListVolumes as i32)));
    assert!(!rpcs.contains(&(Controller::VolumeCondition as i32)));
    plain.stop().await;

    let mut h = Harness::start_with(Options {
        list: true,
        ..Default::default()
    })
    .await;
    let rpcs = common::controller_rpcs(&mut h).await;
    assert!(rpcs.contains(&(Controller::ListVolumes as i32)));
    assert!(rpcs.contains(&(Controller::VolumeCondition as i32)));
    for handle in ["v-c", "v-a", "sick-b", "v-d"] {
        let mut create = create_request(&format!("pvc-{handle}"));
        create.parameters.insert("handle".into(), handle.into());
        h.controller.create_volume(create).await.unwrap();
    }
    let list = |token: &str, max: i32| csi::ListVolumesRequest {
        max_entries: max,
        starting_token: token.into(),
    };
    let ids = |r: &csi::ListVolumesResponse| -> Vec<String> {
        r.entries
            .iter()
            .map(|e| e.volume.as_ref().unwrap().volume_id.clone())
            .collect()
    };
    let first = h
        .controller
        .list_volumes(list("", 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(&first), ["sick-b", "v-a"]);
    let sick = first.entries[0]
        .status
        .as_ref()
        .unwrap()
        .volume_condition
        .as_ref()
        .unwrap();
    assert!(sick.abnormal);
    assert!(!first.next_token.is_empty());
    // The page's last volume deleted: its token still leads on.
    h.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: "v-a".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let rest = h
        .controller
        .list_volumes(list(&first.next_token, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(&rest), ["v-c", "v-d"]);
    assert_eq!(rest.next_token, "");
    let all = h
        .controller
        .list_volumes(list("", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(&all), ["sick-b", "v-c", "v-d"]);
    let all = &all.entries[1];
    assert_eq!(
        all.volume.as_ref().unwrap().volume_context["origin"],
        "memory"
    );
    let bad = h
        .controller
        .list_volumes(list("invalid-token", 0))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::Aborted);
    let negative = h.controller.list_volumes(list("", -1)).await.unwrap_err();
    assert_eq!(negative.code(), Code::InvalidArgument);
    h.stop().await;
}

fn snapshot_request(name: &str, source: &str) -> csi::CreateSnapshotRequest {
    csi::CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: source.into(),
        ..Default::default()
    }
}

fn from_source(name: &str, source: csi::volume_content_source::Type) -> csi::CreateVolumeRequest {
    let mut create = create_request(name);
    create.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(source),
    });
    create
}

fn of_snapshot(id: &str) -> csi::volume_content_source::Type {
    csi::volume_content_source::Type::Snapshot(csi::volume_content_source::SnapshotSource {
        snapshot_id: id.into(),
    })
}

fn of_volume(id: &str) -> csi::volume_content_source::Type {
    csi::volume_content_source::Type::Volume(csi::volume_content_source::VolumeSource {
        volume_id: id.into(),
    })
}

#[tokio::test]
async fn without_snapshots_content_sources_are_refused() {
    use csi::controller_service_capability::rpc::Type as Controller;
    let mut h = Harness::start().await;
    let rpcs = common::controller_rpcs(&mut h).await;
    for rpc in [
        Controller::CreateDeleteSnapshot,
        Controller::ListSnapshots,
        Controller::CloneVolume,
    ] {
        assert!(!rpcs.contains(&(rpc as i32)), "{rpc:?}");
    }
    for source in [of_snapshot("snap-x"), of_volume("vol-x")] {
        let error = h
            .controller
            .create_volume(from_source("pvc-s", source))
            .await
            .unwrap_err();
        assert_eq!(error.code(), Code::InvalidArgument);
    }
    let list = h
        .controller
        .list_snapshots(csi::ListSnapshotsRequest::default())
        .await;
    assert_eq!(list.unwrap_err().code(), Code::Unimplemented);
    let delete = h
        .controller
        .delete_snapshot(csi::DeleteSnapshotRequest::default())
        .await;
    assert_eq!(delete.unwrap_err().code(), Code::Unimplemented);
    assert!(!h.provisioner.calls().contains(&"create"));
    h.stop().await;
}

#[tokio::test]
async fn snapshots_are_checked_cached_listed_and_restored() {
    use csi::controller_service_capability::rpc::Type as Controller;
    let mut h = Harness::start_with(Options {
        snapshots: true,
        list: true,
        ..Default::default()
    })
    .await;
    let rpcs = common::controller_rpcs(&mut h).await;
    for rpc in [
        Controller::CreateDeleteSnapshot,
        Controller::ListSnapshots,
        Controller::CloneVolume,
    ] {
        assert!(rpcs.contains(&(rpc as i32)), "{rpc:?}");
    }
    let mut big = create_request("pvc-src");
    big.capacity_range.as_mut().unwrap().required_bytes = 4 << 20;
    let source = h
        .controller
        .create_volume(big)
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let id = source.volume_id.clone();
    let c = &mut h.controller;
    let code = |r: Result<tonic::Response<csi::CreateSnapshotResponse>, tonic::Status>| {
        r.unwrap_err().code()
    };
    assert_eq!(
        code(c.create_snapshot(snapshot_request("", &id)).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_snapshot(snapshot_request("s1", "")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_snapshot(snapshot_request("s1", "vol-nope")).await),
        Code::NotFound
    );
    let taken = c
        .create_snapshot(snapshot_request("s1", &id))
        .await
        .unwrap()
        .into_inner();
    let taken = taken.snapshot.unwrap();
    assert_eq!(
        (taken.snapshot_id.as_str(), taken.source_volume_id.as_str()),
        ("snap-s1", id.as_str())
    );
    assert_eq!(taken.size_bytes, 4 << 20);
    assert!(taken.ready_to_use);
    assert_eq!(
        taken.creation_time.as_ref().map(|t| t.seconds),
        Some(1_700_000_000)
    );
    // The repeat is answered from the cache; another source is refused.
    let again = c
        .create_snapshot(snapshot_request("s1", &id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.snapshot.unwrap(), taken);
    let other = c
        .create_volume(create_request("pvc-other"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        code(
            c.create_snapshot(snapshot_request("s1", &other.volume_id))
                .await
        ),
        Code::AlreadyExists
    );
    c.create_snapshot(snapshot_request("s2", &other.volume_id))
        .await
        .unwrap();
    let calls = h.provisioner.calls();
    assert_eq!(calls.iter().filter(|c| **c == "create_snapshot").count(), 2);

    let list = |snapshot_id: &str, source: &str, max: i32, token: &str| csi::ListSnapshotsRequest {
        max_entries: max,
        starting_token: token.into(),
        source_volume_id: source.into(),
        snapshot_id: snapshot_id.into(),
        ..Default::default()
    };
    let ids = |r: csi::ListSnapshotsResponse| -> (Vec<String>, String) {
        let ids = r
            .entries
            .into_iter()
            .map(|e| e.snapshot.unwrap().snapshot_id)
            .collect();
        (ids, r.next_token)
    };
    let c = &mut h.controller;
    let all = ids(c
        .list_snapshots(list("", "", 0, ""))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(
        all,
        (
            vec!["snap-s1".to_owned(), "snap-s2".to_owned()],
            String::new()
        )
    );
    let (first, token) = ids(c
        .list_snapshots(list("", "", 1, ""))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(first, ["snap-s1"]);
    let (rest, _) = ids(c
        .list_snapshots(list("", "", 0, &token))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(rest, ["snap-s2"]);
    let (by_id, _) = ids(c
        .list_snapshots(list("snap-s2", "", 0, ""))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(by_id, ["snap-s2"]);
    let (by_source, _) = ids(c
        .list_snapshots(list("", &id, 0, ""))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(by_source, ["snap-s1"]);
    let (none, _) = ids(c
        .list_snapshots(list("snap-nope", "", 0, ""))
        .await
        .unwrap()
        .into_inner());
    assert!(none.is_empty());
    let bad = c
        .list_snapshots(list("", "", 0, "invalid-token"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::Aborted);

    // Restore and clone: sources checked, their size against the limit.
    let restore = from_source("pvc-restored", of_snapshot("snap-s1"));
    let restored = c
        .create_volume(restore.clone())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(restored.content_source, restore.volume_content_source);
    let clone = from_source("pvc-clone", of_volume(&id));
    let cloned = c
        .create_volume(clone.clone())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(cloned.content_source, clone.volume_content_source);
    let volume_code = |r: Result<tonic::Response<csi::CreateVolumeResponse>, tonic::Status>| {
        r.unwrap_err().code()
    };
    assert_eq!(
        volume_code(
            c.create_volume(from_source("pvc-x", of_snapshot("snap-nope")))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        volume_code(
            c.create_volume(from_source("pvc-x", of_volume("vol-nope")))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        volume_code(c.create_volume(from_source("pvc-x", of_snapshot(""))).await),
        Code::InvalidArgument
    );
    for source in [of_snapshot("snap-s1"), of_volume(&id)] {
        let mut small = from_source("pvc-small", source);
        small.capacity_range.as_mut().unwrap().limit_bytes = 2 << 20;
        assert_eq!(volume_code(c.create_volume(small).await), Code::OutOfRange);
    }
    // The same name from another source is another volume: refused.
    let moved = from_source("pvc-restored", of_volume(&id));
    assert_eq!(
        volume_code(c.create_volume(moved).await),
        Code::AlreadyExists
    );

    // Delete is idempotent and forgets the cached answer.
    for _ in 0..2 {
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: "snap-s1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let missing = c
        .delete_snapshot(csi::DeleteSnapshotRequest::default())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    c.create_snapshot(snapshot_request("s1", &id))
        .await
        .unwrap();
    let calls = h.provisioner.calls();
    assert_eq!(calls.iter().filter(|c| **c == "create_snapshot").count(), 3);
    h.stop().await;
}

/// A volume placed outside every requisite topology is refused and deleted:
/// the PV would get node affinity to where the CO did not ask for it.
#[tokio::test]
async fn volumes_placed_outside_the_requisite_topology_are_refused_and_deleted() {
    let mut h = Harness::start_with(Options {
        topology: true,
        ..Default::default()
    })
    .await;
    let zone = |z: &str| csi::Topology {
        segments: [("zone".to_owned(), z.to_owned())].into(),
    };
    let ask = |name: &str, placed: &str| {
        let mut request = create_request(name);
        request.parameters = [("zone".to_owned(), placed.to_owned())].into();
        request.accessibility_requirements = Some(csi::TopologyRequirement {
            requisite: vec![zone("a"), zone("b")],
            preferred: vec![zone("b")],
        });
        request
    };
    let inside = h
        .controller
        .create_volume(ask("pvc-in", "b"))
        .await
        .unwrap();
    let topology = inside.into_inner().volume.unwrap().accessible_topology;
    assert_eq!(topology, vec![zone("b")]);

    let outside = h.controller.create_volume(ask("pvc-out", "c")).await;
    let status = outside.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert!(status.message().contains("requisite"), "{status:?}");
    let deletes = (h.provisioner.calls().iter())
        .filter(|c| **c == "delete")
        .count();
    assert_eq!(deletes, 1, "the misplaced volume is deleted");
    h.stop().await;
}

fn modify_request(id: &str, pairs: &[(&str, &str)]) -> csi::ControllerModifyVolumeRequest {
    csi::ControllerModifyVolumeRequest {
        volume_id: id.into(),
        mutable_parameters: (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

fn parameters(pairs: &[(&str, &str)]) -> pav_sdk::Parameters {
    (pairs.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Without Modify: no `MODIFY_VOLUME`, `UNIMPLEMENTED`, and a class at
/// creation refused (CSI: mutable_parameters "SHALL NOT be specified
/// unless the SP has the MODIFY_VOLUME plugin capability"). With it: the
/// capability, and the class's parameters passed to Create, without the
/// sidecars' keys.
#[tokio::test]
async fn modify_is_advertised_only_when_implemented() {
    use csi::controller_service_capability::rpc::Type as Controller;
    let modify_volume = Controller::ModifyVolume as i32;
    let with_class = || {
        let mut request = create_request("pvc-class");
        request.mutable_parameters = [
            ("tier".to_owned(), "gold".to_owned()),
            ("csi.storage.k8s.io/pvc/name".to_owned(), "data".to_owned()),
        ]
        .into();
        request
    };
    let validate_class = |volume_id: &str| csi::ValidateVolumeCapabilitiesRequest {
        volume_id: volume_id.into(),
        volume_capabilities: vec![capability(VolumeMode::Filesystem)],
        mutable_parameters: [("tier".to_owned(), "gold".to_owned())].into(),
        ..Default::default()
    };

    let mut plain = Harness::start().await;
    assert!(
        !common::controller_rpcs(&mut plain)
            .await
            .contains(&modify_volume)
    );
    let modify = plain
        .controller
        .controller_modify_volume(modify_request("vol-1", &[("tier", "gold")]))
        .await
        .unwrap_err();
    assert_eq!(modify.code(), Code::Unimplemented);
    assert!(modify.message().contains("MODIFY_VOLUME"), "{modify:?}");
    let refused = plain
        .controller
        .create_volume(with_class())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("mutable_parameters"),
        "{refused:?}"
    );
    let id = plain
        .controller
        .create_volume(create_request("pvc-plain"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let unconfirmed = plain
        .controller
        .validate_volume_capabilities(validate_class(&id))
        .await
        .unwrap()
        .into_inner();
    assert!(unconfirmed.confirmed.is_none());
    assert!(
        unconfirmed.message.contains("MODIFY_VOLUME"),
        "{unconfirmed:?}"
    );
    assert_eq!(plain.provisioner.count("create"), 1);
    plain.stop().await;

    let mut h = Harness::start_with(Options {
        modify: true,
        ..Default::default()
    })
    .await;
    assert!(
        common::controller_rpcs(&mut h)
            .await
            .contains(&modify_volume)
    );
    let volume = h
        .controller
        .create_volume(with_class())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let attributes = h.provisioner.attributes.lock().unwrap().clone();
    assert_eq!(
        attributes[&volume.volume_id],
        parameters(&[("tier", "gold")])
    );
    // The same name with another class is another volume: ALREADY_EXISTS.
    let mut other = with_class();
    other
        .mutable_parameters
        .insert("tier".into(), "silver".into());
    let other = h.controller.create_volume(other).await.unwrap_err();
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    let confirmed = h
        .controller
        .validate_volume_capabilities(validate_class(&volume.volume_id))
        .await
        .unwrap()
        .into_inner();
    assert!(confirmed.confirmed.is_some(), "{confirmed:?}");
    h.stop().await;
}

#[tokio::test]
async fn controller_modify_checks_holds_and_modifies() {
    let mut h = Harness::start_with(Options {
        modify: true,
        ..Default::default()
    })
    .await;
    let mut request = create_request("pvc-mod");
    request.mutable_parameters = [("tier".to_owned(), "gold".to_owned())].into();
    let id = h
        .controller
        .create_volume(request.clone())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let c = &mut h.controller;
    let code = |r: Result<tonic::Response<csi::ControllerModifyVolumeResponse>, tonic::Status>| {
        r.unwrap_err().code()
    };
    assert_eq!(
        code(
            c.controller_modify_volume(modify_request("", &[("tier", "silver")]))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            c.controller_modify_volume(modify_request("vol-nope", &[("tier", "silver")]))
                .await
        ),
        Code::NotFound
    );
    // Nothing to change: OK, the provisioner not asked (also when only
    // external-resizer's --extra-modify-metadata keys are there).
    c.controller_modify_volume(modify_request(&id, &[]))
        .await
        .unwrap();
    c.controller_modify_volume(modify_request(
        &id,
        &[("csi.storage.k8s.io/pvc/name", "data")],
    ))
    .await
    .unwrap();
    assert_eq!(h.provisioner.count("modify"), 0);

    let metadata = [
        ("tier", "silver"),
        ("csi.storage.k8s.io/pvc/name", "data"),
        ("csi.storage.k8s.io/pvc/namespace", "apps"),
        ("csi.storage.k8s.io/pv/name", "pvc-mod"),
    ];
    for _ in 0..2 {
        c.controller_modify_volume(modify_request(&id, &metadata))
            .await
            .unwrap();
    }
    assert_eq!(
        h.provisioner.attributes.lock().unwrap()[&id],
        parameters(&[("tier", "silver")])
    );
    let claim = h.provisioner.modify_claims.lock().unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(
        (claim.namespace.as_str(), claim.name.as_str()),
        ("apps", "data")
    );
    assert_eq!(claim.pv_name.as_deref(), Some("pvc-mod"));

    // The provisioner's errors, with their codes.
    for (error, wanted) in [
        ("invalid", Code::InvalidArgument),
        ("precondition", Code::FailedPrecondition),
        ("unavailable", Code::Unavailable),
    ] {
        let refused = c
            .controller_modify_volume(modify_request(&id, &[("error", error)]))
            .await;
        assert_eq!(code(refused), wanted, "{error}");
    }

    // One call per volume: a second while the first runs is ABORTED.
    let mut slow = h.controller.clone();
    let slow_id = id.clone();
    let running = tokio::spawn(async move {
        slow.controller_modify_volume(modify_request(&slow_id, &[("slow", "yes")]))
            .await
    });
    h.provisioner.wait_for_calls("modify", 6).await;
    let busy = h
        .controller
        .controller_modify_volume(modify_request(&id, &[("tier", "bronze")]))
        .await;
    assert_eq!(code(busy), Code::Aborted);
    running.await.unwrap().unwrap();
    assert_eq!(h.provisioner.count("modify"), 6);

    // CreateVolume's cached answer is forgotten: the provisioner is asked
    // about the modified volume (this one answers it by name).
    let creates = h.provisioner.count("create");
    h.controller.create_volume(request).await.unwrap();
    assert_eq!(h.provisioner.count("create"), creates + 1);
    h.stop().await;
}

fn get_volume(id: &str) -> csi::ControllerGetVolumeRequest {
    csi::ControllerGetVolumeRequest {
        volume_id: id.into(),
    }
}

/// The condition in a `ControllerGetVolume` answer.
fn condition_of(answer: &csi::ControllerGetVolumeResponse) -> csi::VolumeCondition {
    let status = answer.status.as_ref().expect("a status with GET_VOLUME");
    status.volume_condition.clone().expect("a condition")
}

/// `GET_VOLUME` and the controller's `VOLUME_CONDITION` only with Health
/// and a listing (ControllerGetVolume finds the volume in it): without
/// them `UNIMPLEMENTED`, naming the capability.
#[tokio::test]
async fn health_is_advertised_only_when_implemented() {
    use csi::controller_service_capability::rpc::Type as Controller;
    use csi::node_service_capability::rpc::Type as Node;
    let get_volume_rpc = Controller::GetVolume as i32;
    for (list, health) in [(false, false), (true, false), (false, true)] {
        let mut h = Harness::start_with(Options {
            list,
            health,
            ..Default::default()
        })
        .await;
        let rpcs = common::controller_rpcs(&mut h).await;
        assert!(
            !rpcs.contains(&get_volume_rpc),
            "list {list}, health {health}"
        );
        let refused = (h
            .controller
            .controller_get_volume(get_volume("vol-1"))
            .await)
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unimplemented);
        assert!(refused.message().contains("GET_VOLUME"), "{refused:?}");
        // The node's VOLUME_CONDITION needs Health (or Stats) alone.
        let node = node_rpcs(&mut h).await;
        assert_eq!(node.contains(&(Node::VolumeCondition as i32)), health);
        h.stop().await;
    }
    let mut h = Harness::start_with(Options {
        list: true,
        health: true,
        ..Default::default()
    })
    .await;
    let rpcs = common::controller_rpcs(&mut h).await;
    assert!(rpcs.contains(&get_volume_rpc));
    assert!(rpcs.contains(&(Controller::VolumeCondition as i32)));
    h.stop().await;
}

/// The node reports volume health both ways when the provisioner has
/// Stats or Health: `VOLUME_CONDITION` (NodeGetVolumeStats' condition,
/// for kubelets before v1.37) and `GET_VOLUME_HEALTH` (NodeGetVolumeHealth,
/// from v1.37), together. Without either, NodeGetVolumeHealth is
/// `UNIMPLEMENTED`, naming the capability.
#[tokio::test]
async fn node_volume_health_is_advertised_with_stats_or_health() {
    use csi::node_service_capability::rpc::Type as Node;
    for (stats, health) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut h = Harness::start_with(Options {
            stats,
            health,
            ..Default::default()
        })
        .await;
        let rpcs = node_rpcs(&mut h).await;
        let reported = stats || health;
        let case = format!("stats {stats}, health {health}");
        assert_eq!(
            rpcs.contains(&(Node::GetVolumeHealth as i32)),
            reported,
            "{case}"
        );
        assert_eq!(
            rpcs.contains(&(Node::VolumeCondition as i32)),
            reported,
            "{case}"
        );
        if !reported {
            let refused = common::volume_health(&mut h, "vol-1", "")
                .await
                .unwrap_err();
            assert_eq!(refused.code(), Code::Unimplemented);
            assert!(
                refused.message().contains("GET_VOLUME_HEALTH"),
                "{refused:?}"
            );
        }
        h.stop().await;
    }
}

/// NodeGetVolumeHealth without a publish path (a volume the CO could not
/// publish) asks Health about the volume alone, as the controller does:
/// each problem with its reason and message, none when healthy, and
/// `NOT_FOUND` for a volume that does not exist. With Stats alone there is
/// nothing to ask without a path: healthy.
#[tokio::test]
async fn node_volume_health_without_a_publish_path_asks_health_about_the_volume() {
    use csi::VolumeHealthErrorType::{DataLoss, Degraded, Inaccessible};
    let mut h = Harness::start_with(Options {
        health: true,
        ..Default::default()
    })
    .await;
    for handle in ["fine-1", "broken-1", "degraded-1", "lost-1"] {
        let mut request = create_request(handle);
        request.parameters.insert("handle".into(), handle.into());
        h.controller.create_volume(request).await.unwrap();
    }
    let broken = |handle: &str| format!("volume {handle} is broken");
    let expected = [
        ("fine-1", vec![]),
        (
            "broken-1",
            vec![(Inaccessible, "VolumeAbnormal".into(), broken("broken-1"))],
        ),
        (
            "degraded-1",
            vec![(Degraded, "SlowDisk".into(), broken("degraded-1"))],
        ),
        (
            "lost-1",
            vec![(DataLoss, "DiskFailed".into(), broken("lost-1"))],
        ),
    ];
    for (handle, statuses) in expected {
        let answer = common::volume_health(&mut h, handle, "").await.unwrap();
        assert_eq!(answer, statuses, "{handle}");
    }
    let missing = common::volume_health(&mut h, "vol-never", "").await;
    assert_eq!(missing.unwrap_err().code(), Code::NotFound);
    h.stop().await;

    let mut h = Harness::start_with(Options {
        stats: true,
        ..Default::default()
    })
    .await;
    let answer = common::volume_health(&mut h, "sick", "").await.unwrap();
    assert_eq!(answer, vec![]);
    assert_eq!(h.provisioner.calls(), Vec::<&str>::new());
    h.stop().await;
}

/// ControllerGetVolume: the volume id required, an unknown volume
/// NOT_FOUND, the volume as listed with the listing's condition when it
/// has one, else Health's; ListVolumes asks Health for the entries the
/// listing left without one.
#[tokio::test]
async fn controller_get_volume_answers_the_volume_and_its_condition() {
    let mut h = Harness::start_with(Options {
        list: true,
        health: true,
        ..Default::default()
    })
    .await;
    for handle in ["sick-1", "quiet-fine", "quiet-broken"] {
        let mut create = create_request(&format!("pvc-{handle}"));
        create.parameters.insert("handle".into(), handle.into());
        h.controller.create_volume(create).await.unwrap();
    }
    let missing = (h.controller.controller_get_volume(get_volume("")).await).unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    assert!(missing.message().contains("volume_id"), "{missing:?}");
    let long = h
        .controller
        .controller_get_volume(get_volume(&"v".repeat(129)));
    assert_eq!(long.await.unwrap_err().code(), Code::InvalidArgument);
    let unknown = (h.controller.controller_get_volume(get_volume("nope")).await).unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    assert!(unknown.message().contains("nope"), "{unknown:?}");
    let asked = h.provisioner.count("condition");

    let sick = h.controller.controller_get_volume(get_volume("sick-1"));
    let sick = sick.await.unwrap().into_inner();
    assert_eq!(sick.volume.as_ref().unwrap().volume_id, "sick-1");
    assert_eq!(sick.volume.as_ref().unwrap().capacity_bytes, 1 << 20);
    assert!(condition_of(&sick).abnormal, "the listing's condition");
    assert_eq!(h.provisioner.count("condition"), asked, "not asked again");

    let fine = h.controller.controller_get_volume(get_volume("quiet-fine"));
    let fine = fine.await.unwrap().into_inner();
    assert!(!condition_of(&fine).abnormal);
    let broken = h
        .controller
        .controller_get_volume(get_volume("quiet-broken"));
    let broken = condition_of(&broken.await.unwrap().into_inner());
    assert!(broken.abnormal);
    assert_eq!(broken.message, "volume quiet-broken is broken");
    assert_eq!(h.provisioner.count("condition"), asked + 2);

    let listed = h
        .controller
        .list_volumes(csi::ListVolumesRequest::default());
    let listed = listed.await.unwrap().into_inner();
    let conditions: Vec<(String, bool)> = (listed.entries.iter())
        .map(|e| {
            let status = e.status.as_ref().expect("every entry has a condition");
            let condition = status.volume_condition.as_ref().unwrap();
            (
                e.volume.as_ref().unwrap().volume_id.clone(),
                condition.abnormal,
            )
        })
        .collect();
    assert_eq!(
        conditions,
        [
            ("quiet-broken".to_owned(), true),
            ("quiet-fine".to_owned(), false),
            ("sick-1".to_owned(), true)
        ]
    );
    h.stop().await;
}
