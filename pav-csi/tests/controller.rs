//! Identity and Controller RPCs through a real tonic client over a Unix socket.

mod common;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;

use common::{Harness, Options, capability, create_request};
use pav_csi::csi;
use pav_sdk::{AccessMode, VolumeMode};
use tonic::Code;

#[tokio::test]
async fn identity_reports_name_capabilities_and_readiness() {
    let mut h = Harness::start().await;
    let info = h
        .identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap();
    assert_eq!(info.get_ref().name, "test.pav.example.com");
    assert_eq!(info.get_ref().vendor_version, "9.9.9");
    let caps = h
        .identity
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let services: Vec<i32> = caps
        .iter()
        .filter_map(|c| match &c.r#type {
            Some(csi::plugin_capability::Type::Service(s)) => Some(s.r#type),
            _ => None,
        })
        .collect();
    use csi::plugin_capability::service::Type;
    assert!(services.contains(&(Type::ControllerService as i32)));
    assert!(services.contains(&(Type::VolumeAccessibilityConstraints as i32)));
    let probe = h.identity.probe(csi::ProbeRequest {}).await.unwrap();
    assert_eq!(probe.get_ref().ready, Some(true));
    h.stop().await;
}

#[tokio::test]
async fn socket_is_private_and_a_stale_one_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap()); // stale leftover
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let provisioner =
        pav_sdk::Provisioner::new(common::Memory::new(dir.path().into())).with_create();
    let server = tokio::spawn(
        pav_csi::Driver::builder("test.pav.example.com")
            .provisioner(provisioner)
            .serve_controller(&socket)
            .run_until(async {
                let _ = stopped.await;
            }),
    );
    // The stale file exists from the start: wait until the driver answers.
    let mut identity = loop {
        if let Ok(channel) = pav_csi::client::connect(&socket).await {
            let mut client = csi::identity_client::IdentityClient::new(channel);
            if client.probe(csi::ProbeRequest {}).await.is_ok() {
                break client;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(identity.probe(csi::ProbeRequest {}).await.is_ok());
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    assert!(!socket.exists());
}

#[tokio::test]
async fn builder_refuses_node_service_without_stage() {
    let dir = tempfile::tempdir().unwrap();
    let provisioner =
        pav_sdk::Provisioner::new(common::Memory::new(dir.path().into())).with_create();
    let err = pav_csi::Driver::builder("test.pav.example.com")
        .provisioner(provisioner)
        .serve_node(dir.path().join("csi.sock"), "node-a")
        .run_until(async {})
        .await
        .unwrap_err();
    assert!(matches!(err, pav_csi::Error::Config(_)), "{err}");
}

#[tokio::test]
async fn controller_capabilities_follow_the_provisioner() {
    use csi::controller_service_capability::rpc;
    async fn rpcs(options: Options) -> Vec<i32> {
        let mut h = Harness::start_with(options).await;
        let rpcs = common::controller_rpcs(&mut h).await;
        h.stop().await;
        rpcs
    }
    // The default access modes tell ReadWriteOncePod from ReadWriteOnce.
    assert_eq!(
        rpcs(Options::default()).await,
        [
            rpc::Type::CreateDeleteVolume,
            rpc::Type::SingleNodeMultiWriter
        ]
        .map(|t| t as i32)
    );
    let single_writer_only = Options {
        access_modes: Some(vec![AccessMode::SingleNodeWriter]),
        ..Options::default()
    };
    assert_eq!(
        rpcs(single_writer_only).await,
        [rpc::Type::CreateDeleteVolume as i32]
    );
}

#[tokio::test]
async fn create_volume_checks_required_fields_and_limits() {
    let mut h = Harness::start().await;
    let cases = [
        (
            csi::CreateVolumeRequest {
                name: String::new(),
                ..create_request("x")
            },
            Code::InvalidArgument,
            "name",
        ),
        (
            create_request(&"n".repeat(129)),
            Code::InvalidArgument,
            "name",
        ),
        (
            csi::CreateVolumeRequest {
                volume_capabilities: vec![],
                ..create_request("x")
            },
            Code::InvalidArgument,
            "volume_capabilities",
        ),
        (
            csi::CreateVolumeRequest {
                volume_capabilities: vec![csi::VolumeCapability {
                    access_mode: None,
                    ..capability(VolumeMode::Filesystem)
                }],
                ..create_request("x")
            },
            Code::InvalidArgument,
            "access_mode",
        ),
        (
            csi::CreateVolumeRequest {
                parameters: [("big".to_owned(), "v".repeat(5000))].into(),
                ..create_request("x")
            },
            Code::InvalidArgument,
            "parameters",
        ),
        (
            csi::CreateVolumeRequest {
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 10,
                    limit_bytes: 5,
                }),
                ..create_request("x")
            },
            Code::OutOfRange,
            "limit_bytes",
        ),
        (
            csi::CreateVolumeRequest {
                volume_capabilities: vec![
                    capability(VolumeMode::Filesystem),
                    capability(VolumeMode::Block),
                ],
                ..create_request("x")
            },
            Code::InvalidArgument,
            "mixes",
        ),
    ];
    for (request, code, field) in cases {
        let status = h.controller.create_volume(request).await.unwrap_err();
        assert_eq!(status.code(), code, "{status:?}");
        assert!(
            status.message().contains(field),
            "{field} not in {status:?}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn provisioner_errors_map_to_grpc_codes() {
    let mut h = Harness::start().await;
    let cases = [
        ("invalid", Code::InvalidArgument),
        ("not-found", Code::NotFound),
        ("exists", Code::AlreadyExists),
        ("range", Code::OutOfRange),
        ("exhausted", Code::ResourceExhausted),
        ("precondition", Code::FailedPrecondition),
        ("aborted", Code::Aborted),
        ("unavailable", Code::Unavailable),
        ("internal", Code::Internal),
    ];
    for (i, (error, code)) in cases.into_iter().enumerate() {
        let mut request = create_request(&format!("failing-{i}"));
        request.parameters.insert("error".into(), error.into());
        let status = h.controller.create_volume(request).await.unwrap_err();
        assert_eq!(status.code(), code, "{error}: {status:?}");
    }
    let mut rejected = create_request("rejected");
    rejected.parameters.insert("reject".into(), "yes".into());
    let status = h.controller.create_volume(rejected).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    h.stop().await;
}

#[tokio::test]
async fn create_volume_is_idempotent_by_name() {
    let mut h = Harness::start().await;
    let mut request = create_request("pvc-1");
    request.parameters = [
        ("csi.storage.k8s.io/pvc/name".to_owned(), "data".to_owned()),
        (
            "csi.storage.k8s.io/pvc/namespace".to_owned(),
            "apps".to_owned(),
        ),
    ]
    .into();
    request.secrets = [("token".to_owned(), "hunter2".to_owned())].into();
    let first = h
        .controller
        .create_volume(request.clone())
        .await
        .unwrap()
        .into_inner();
    let again = h
        .controller
        .create_volume(request.clone())
        .await
        .unwrap()
        .into_inner();
    let volume = first.volume.unwrap();
    assert_eq!(Some(&volume), again.volume.as_ref());
    assert_eq!(volume.capacity_bytes, 1 << 20);
    assert_eq!(
        volume.volume_context.get("origin").map(String::as_str),
        Some("memory")
    );

    request.capacity_range = Some(csi::CapacityRange {
        required_bytes: 2 << 20,
        limit_bytes: 0,
    });
    let status = h.controller.create_volume(request).await.unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    assert_eq!(h.provisioner.creates.load(Ordering::SeqCst), 1);
    h.stop().await;
}

#[tokio::test]
async fn hundred_concurrent_creates_make_one_volume() {
    let h = Harness::start().await;
    let calls = (0..100).map(|_| {
        let mut controller = h.controller.clone();
        tokio::spawn(async move { controller.create_volume(create_request("contended")).await })
    });
    let mut ids = HashSet::new();
    let mut aborted = 0;
    for call in calls.collect::<Vec<_>>() {
        match call.await.unwrap() {
            Ok(response) => {
                ids.insert(response.into_inner().volume.unwrap().volume_id);
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Aborted, "{status:?}");
                aborted += 1;
            }
        }
    }
    assert_eq!(ids.len(), 1, "every success returns the same volume");
    assert!(aborted < 100);
    // The provisioner is asked once: the others were refused while it ran,
    // or answered from the cache once it had. (Its own store would hide a
    // second call: it dedupes by name.)
    assert_eq!(h.provisioner.count("create"), 1, "calls overlapped");
    assert_eq!(h.provisioner.creates.load(Ordering::SeqCst), 1);
    assert_eq!(h.provisioner.volumes.lock().unwrap().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn delete_volume_is_idempotent() {
    let mut h = Harness::start().await;
    let status = h
        .controller
        .delete_volume(csi::DeleteVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("volume_id"));
    let volume = h
        .controller
        .create_volume(create_request("gone"))
        .await
        .unwrap();
    let id = volume.into_inner().volume.unwrap().volume_id;
    for _ in 0..2 {
        h.controller
            .delete_volume(csi::DeleteVolumeRequest {
                volume_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    h.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: "never-existed".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(h.provisioner.volumes.lock().unwrap().is_empty());
    // After deletion the name is free again.
    h.controller
        .create_volume(create_request("gone"))
        .await
        .unwrap();
    assert_eq!(h.provisioner.creates.load(Ordering::SeqCst), 2);
    h.stop().await;
}

#[tokio::test]
async fn validate_volume_capabilities() {
    let mut h = Harness::start().await;
    let id = h
        .controller
        .create_volume(create_request("v"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let request = |volume_id: &str| csi::ValidateVolumeCapabilitiesRequest {
        volume_id: volume_id.into(),
        volume_capabilities: vec![capability(VolumeMode::Filesystem)],
        ..Default::default()
    };
    let ok = h
        .controller
        .validate_volume_capabilities(request(&id))
        .await
        .unwrap();
    assert!(ok.get_ref().confirmed.is_some());

    let missing = h
        .controller
        .validate_volume_capabilities(request("nope"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let no_id = h
        .controller
        .validate_volume_capabilities(request(""))
        .await
        .unwrap_err();
    assert_eq!(no_id.code(), Code::InvalidArgument);
    let no_caps = csi::ValidateVolumeCapabilitiesRequest {
        volume_capabilities: vec![],
        ..request(&id)
    };
    let no_caps = h
        .controller
        .validate_volume_capabilities(no_caps)
        .await
        .unwrap_err();
    assert_eq!(no_caps.code(), Code::InvalidArgument);
    assert!(no_caps.message().contains("volume_capabilities"));

    let mut rejected = request(&id);
    rejected.parameters.insert("reject".into(), "yes".into());
    let rejected = h
        .controller
        .validate_volume_capabilities(rejected)
        .await
        .unwrap()
        .into_inner();
    assert!(rejected.confirmed.is_none());
    assert!(!rejected.message.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn without_validate_a_missing_volume_is_not_found() {
    let mut h = Harness::start_with(common::Options {
        validate: false,
        ..Default::default()
    })
    .await;
    let id = h
        .controller
        .create_volume(create_request("v"))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let request = |volume_id: &str| csi::ValidateVolumeCapabilitiesRequest {
        volume_id: volume_id.into(),
        volume_capabilities: vec![capability(VolumeMode::Filesystem)],
        ..Default::default()
    };
    let ok = h
        .controller
        .validate_volume_capabilities(request(&id))
        .await;
    assert!(ok.unwrap().get_ref().confirmed.is_some());
    for missing in ["nope", "../victim"] {
        let status = h
            .controller
            .validate_volume_capabilities(request(missing))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{missing}");
    }
    assert!(!h.provisioner.calls().contains(&"validate"));
    h.stop().await;
}

#[tokio::test]
async fn a_created_volume_csi_cannot_carry_is_deleted() {
    let mut h = Harness::start().await;
    let too_long = "h".repeat(129);
    for (name, handle) in [("long", too_long.as_str()), ("escape", "vol\u{1b}[0m")] {
        let mut req = create_request(name);
        req.parameters.insert("handle".into(), handle.into());
        let status = h.controller.create_volume(req).await.unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{name}");
        assert!(status.message().contains("volume_id"), "{status:?}");
        assert!(status.message().contains("it was deleted"), "{status:?}");
    }
    assert!(
        h.provisioner.volumes.lock().unwrap().is_empty(),
        "nothing leaked"
    );
    assert_eq!(h.provisioner.creates.load(Ordering::SeqCst), 2);
    h.stop().await;
}

#[tokio::test]
async fn unserved_rpcs_answer_unimplemented() {
    let mut h = Harness::start().await;
    let publish = h
        .controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(publish.code(), Code::Unimplemented);
    let list = h
        .controller
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(list.code(), Code::Unimplemented);
    let capacity = h
        .controller
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .unwrap_err();
    assert_eq!(capacity.code(), Code::Unimplemented);
    let snapshot = h
        .controller
        .create_snapshot(csi::CreateSnapshotRequest::default())
        .await
        .unwrap_err();
    assert_eq!(snapshot.code(), Code::Unimplemented);
    let expand = h
        .node
        .node_expand_volume(csi::NodeExpandVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(expand.code(), Code::Unimplemented);
    h.stop().await;
}

/// A size CSI cannot carry, or outside what was asked, is refused naming
/// the value, and the volume made is deleted: nothing leaks, nothing is
/// clamped.
#[tokio::test]
async fn created_sizes_outside_int64_or_the_range_are_refused_and_deleted() {
    let mut h = Harness::start().await;
    let too_big = (1u64 << 63).to_string();
    let cases = [
        (
            "huge",
            too_big.as_str(),
            0,
            "capacity_bytes = 9223372036854775808",
        ),
        (
            "over-limit",
            "3145728",
            2 << 20,
            "capacity_bytes 3145728 is outside",
        ),
        (
            "under-required",
            "4096",
            0,
            "capacity_bytes 4096 is outside",
        ),
    ];
    for (name, size, limit_bytes, message) in cases {
        let mut request = create_request(name);
        request.parameters.insert("size".into(), size.into());
        request.capacity_range.as_mut().unwrap().limit_bytes = limit_bytes;
        let status = h.controller.create_volume(request).await.unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{name}: {status:?}");
        assert!(status.message().contains(message), "{name}: {status:?}");
        assert!(
            status.message().contains("it was deleted"),
            "{name}: {status:?}"
        );
    }
    assert!(
        h.provisioner.volumes.lock().unwrap().is_empty(),
        "a volume leaked"
    );
    h.stop().await;
}

/// A provisioner that declares no access modes serves those of one node:
/// a multi-node claim is refused before the provisioner is asked.
#[tokio::test]
async fn multi_node_access_modes_are_refused_unless_declared() {
    use csi::volume_capability::access_mode::Mode;
    let mut h = Harness::start().await;
    for mode in [
        Mode::MultiNodeMultiWriter,
        Mode::MultiNodeReaderOnly,
        Mode::MultiNodeSingleWriter,
    ] {
        let mut request = create_request("shared");
        request.volume_capabilities[0].access_mode =
            Some(csi::volume_capability::AccessMode { mode: mode as i32 });
        let status = h.controller.create_volume(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{mode:?}: {status:?}");
    }
    for mode in [Mode::SingleNodeSingleWriter, Mode::SingleNodeMultiWriter] {
        let mut request = create_request(mode.as_str_name());
        request.volume_capabilities[0].access_mode =
            Some(csi::volume_capability::AccessMode { mode: mode as i32 });
        h.controller.create_volume(request).await.unwrap();
    }
    assert_eq!(h.provisioner.count("create"), 2);
    h.stop().await;
}
