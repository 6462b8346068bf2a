//! The optional touch points beyond create, delete and stage (expansion,
//! capacity, listing, snapshots) through a real tonic client: each is
//! advertised only when implemented, and pav-csi's checks and codes.

mod common;

use common::{Harness, Options, capability, create_request, is_root};
use pav_csi::csi;
use pav_sdk::VolumeMode;
use tonic::Code;

/// The controller RPC capabilities the driver advertises.
async fn controller_rpcs(h: &mut Harness) -> Vec<i32> {
    use csi::controller_service_capability::Type;
    let caps = h
        .controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    caps.iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect()
}

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
        !controller_rpcs(&mut plain)
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
        controller_rpcs(&mut online)
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
    if !is_root() {
        eprintln!("SKIPPED: publishing needs root to mount");
        return;
    }
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
        !controller_rpcs(&mut plain)
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
        controller_rpcs(&mut h)
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
    let rpcs = controller_rpcs(&mut plain).await;
    assert!(!rpcs.contains(&(Controller::ListVolumes as i32)));
    assert!(!rpcs.contains(&(Controller::VolumeCondition as i32)));
    plain.stop().await;

    let mut h = Harness::start_with(Options {
        list: true,
        ..Default::default()
    })
    .await;
    let rpcs = controller_rpcs(&mut h).await;
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
