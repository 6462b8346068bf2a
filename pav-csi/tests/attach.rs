//! Attach and detach (`ControllerPublishVolume`, `ControllerUnpublishVolume`)
//! through a real tonic client: advertised only when implemented, the
//! spec's checks and codes, the records' answers, the volume held while
//! it attaches, and the publish context reaching the node's Stage.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pav_csi::csi;
use pav_csi::testing::Harness;
use pav_sdk::records::Records;
use pav_sdk::{
    AccessMode, Attach, AttachRequest, Attached, Create, CreateRequest, DetachRequest, Error,
    Parameters, Result, Stage, StageRequest, Staged, Volume, async_trait,
};
use tonic::Code;

use csi::controller_service_capability::rpc::Type as Rpc;

/// Disks that attach to the nodes `n1` and `n2`, handing out a device
/// path; Stage keeps the publish context it was given.
#[derive(Clone)]
struct Disks {
    calls: Arc<Mutex<Vec<String>>>,
    staged_with: Arc<Mutex<Vec<Parameters>>>,
    /// What `max_volumes_now` answers: the node's free slots, or why it
    /// cannot tell.
    slots_now: Arc<Mutex<Result<Option<u32>>>>,
}

impl Default for Disks {
    fn default() -> Self {
        Disks {
            calls: Arc::default(),
            staged_with: Arc::default(),
            slots_now: Arc::new(Mutex::new(Ok(None))),
        }
    }
}

impl Disks {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Create for Disks {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(format!("disk-{}", req.name), 1 << 20))
    }
}

#[async_trait]
impl Attach for Disks {
    async fn attach(&self, req: AttachRequest) -> Result<Attached> {
        let call = format!("attach {} {}", req.handle.as_str(), req.node_id);
        self.calls.lock().unwrap().push(call);
        if !["n1", "n2", "testing-node"].contains(&req.node_id.as_str()) {
            return Err(Error::NotFound(format!("no node {:?}", req.node_id)));
        }
        if req.handle.ends_with("slow") {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if req.handle.ends_with("lying") {
            let context = Parameters::from([("devicePath".into(), "a\nforged line".into())]);
            return Ok(Attached::with_context(context));
        }
        let device = format!("/dev/{}", req.handle.as_str());
        Ok(Attached::with_context(Parameters::from([(
            "devicePath".into(),
            device,
        )])))
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        let node = req.node_id.unwrap_or_default();
        let call = format!("detach {} {node}", req.handle.as_str());
        self.calls.lock().unwrap().push(call);
        Ok(())
    }

    fn attaches_read_only(&self) -> bool {
        true
    }
}

#[async_trait]
impl Stage for Disks {
    async fn stage(&self, req: StageRequest) -> Result<Staged> {
        self.staged_with.lock().unwrap().push(req.publish_context);
        // Mounted at the staging path by the provisioner: nothing for
        // pav-csi to bind, no root needed.
        Ok(Staged::at(req.target_path))
    }

    async fn max_volumes_now(&self) -> Result<Option<u32>> {
        self.slots_now.lock().unwrap().clone()
    }
}

/// Only Create and Stage: nothing to attach.
struct Plain;

#[async_trait]
impl Create for Plain {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(req.name, 1 << 20))
    }
}

async fn controller_rpcs(h: &mut Harness) -> Vec<i32> {
    use csi::controller_service_capability::Type;
    let caps = (h.controller)
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    caps.iter()
        .filter_map(|c| c.r#type.as_ref().map(|Type::Rpc(r)| r.r#type))
        .collect()
}

fn capability(mode: csi::volume_capability::access_mode::Mode) -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume::default(),
        )),
        access_mode: Some(csi::volume_capability::AccessMode { mode: mode as i32 }),
    }
}

fn publish(volume_id: &str, node_id: &str) -> csi::ControllerPublishVolumeRequest {
    use csi::volume_capability::access_mode::Mode;
    csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(capability(Mode::SingleNodeWriter)),
        ..Default::default()
    }
}

fn unpublish(volume_id: &str, node_id: &str) -> csi::ControllerUnpublishVolumeRequest {
    csi::ControllerUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        ..Default::default()
    }
}

async fn create(h: &mut Harness, name: &str) -> String {
    let request = csi::CreateVolumeRequest {
        name: name.into(),
        volume_capabilities: vec![capability(
            csi::volume_capability::access_mode::Mode::SingleNodeWriter,
        )],
        ..Default::default()
    };
    let created = h.controller.create_volume(request).await.unwrap();
    created.into_inner().volume.unwrap().volume_id
}

/// A disk driver keeping records in its storage directory, at most two
/// volumes per node; and the disks, to look at what they were asked.
async fn disks() -> (Harness, Disks) {
    let disks = Disks::default();
    let served = disks.clone();
    let h = Harness::builder()
        .unwrap()
        .start_with(move |dir| {
            pav_sdk::provisioner!(served.clone())
                .keep_records(Records::in_dir(dir.join("records")))
                .access_modes([
                    AccessMode::SingleNodeWriter,
                    AccessMode::MultiNodeReaderOnly,
                ])
                .max_volumes_per_node(2)
        })
        .await
        .unwrap();
    (h, disks)
}

fn stage(volume_id: &str, staging: &std::path::Path) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.to_string_lossy().into_owned(),
        volume_capability: Some(capability(
            csi::volume_capability::access_mode::Mode::SingleNodeWriter,
        )),
        ..Default::default()
    }
}

#[tokio::test]
async fn attach_is_advertised_only_when_implemented() {
    let mut plain = Harness::start(pav_sdk::provisioner!(Plain)).await.unwrap();
    let rpcs = controller_rpcs(&mut plain).await;
    assert!(!rpcs.contains(&(Rpc::PublishUnpublishVolume as i32)));
    assert!(!rpcs.contains(&(Rpc::PublishReadonly as i32)));
    for refused in [
        (plain
            .controller
            .controller_publish_volume(publish("v", "n1"))
            .await)
            .unwrap_err(),
        (plain
            .controller
            .controller_unpublish_volume(unpublish("v", "n1"))
            .await)
            .unwrap_err(),
    ] {
        assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
        assert!(refused.message().contains("PUBLISH_UNPUBLISH_VOLUME"));
    }

    let (mut h, _) = disks().await;
    let rpcs = controller_rpcs(&mut h).await;
    assert!(rpcs.contains(&(Rpc::PublishUnpublishVolume as i32)));
    assert!(rpcs.contains(&(Rpc::PublishReadonly as i32)));
    let info = h.node.node_get_info(csi::NodeGetInfoRequest {}).await;
    assert_eq!(info.unwrap().into_inner().max_volumes_per_node, 2);
}

/// NodeGetInfo asks the provisioner each time: a limit that changes is
/// reported as it is now, `None` falls back to the fixed one, and a failure
/// is the provisioner's code.
#[tokio::test]
async fn node_info_reports_the_limit_as_it_is_now() {
    let (mut h, disks) = disks().await;
    let mut limit = async || {
        let info = h.node.node_get_info(csi::NodeGetInfoRequest {}).await;
        info.map(|i| i.into_inner().max_volumes_per_node)
    };
    *disks.slots_now.lock().unwrap() = Ok(Some(5));
    assert_eq!(limit().await.unwrap(), 5);
    *disks.slots_now.lock().unwrap() = Ok(Some(3));
    assert_eq!(limit().await.unwrap(), 3);
    *disks.slots_now.lock().unwrap() = Ok(None);
    assert_eq!(limit().await.unwrap(), 2, "the fixed max_volumes_per_node");
    *disks.slots_now.lock().unwrap() = Err(Error::Unavailable("the hypervisor is away".into()));
    let failed = limit().await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable);
    assert_eq!(
        failed.message(),
        "the node's volume limit: the hypervisor is away"
    );
}

#[tokio::test]
async fn publish_checks_its_request() {
    let (mut h, _) = disks().await;
    let id = create(&mut h, "pvc-checks").await;
    let c = &mut h.controller;
    let mut no_capability = publish(&id, "n1");
    no_capability.volume_capability = None;
    let mut block = publish(&id, "n1");
    block.volume_capability.as_mut().unwrap().access_type = Some(
        csi::volume_capability::AccessType::Block(csi::volume_capability::BlockVolume {}),
    );
    let mut big_secret = publish(&id, "n1");
    big_secret.secrets.insert("token".into(), "x".repeat(5000));
    for (request, field) in [
        (publish("", "n1"), "volume_id"),
        (publish(&id, ""), "node_id"),
        (publish(&id, &"n".repeat(129)), "node_id"),
        (no_capability, "volume_capability"),
        (block, "volume mode"),
        (big_secret, "secrets"),
    ] {
        let refused = c.controller_publish_volume(request).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{field}: {refused:?}"
        );
        assert!(refused.message().contains(field), "{field}: {refused:?}");
    }
    let unknown = c
        .controller_publish_volume(publish("disk-never", "n1"))
        .await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
    let no_node = c.controller_publish_volume(publish(&id, "n9")).await;
    assert_eq!(no_node.unwrap_err().code(), Code::NotFound);
    let no_id = c.controller_unpublish_volume(unpublish("", "n1")).await;
    assert_eq!(no_id.unwrap_err().code(), Code::InvalidArgument);
}

/// The spec's answers, from the records: a repeat the same context
/// (the provisioner asked once), another flag ALREADY_EXISTS, another
/// node FAILED_PRECONDITION, a full node RESOURCE_EXHAUSTED, a volume
/// attached cannot be deleted, a detach of what is not attached is OK.
#[tokio::test]
async fn publish_and_unpublish_answer_as_the_spec_says() {
    let (mut h, disks) = disks().await;
    let a = create(&mut h, "pvc-a").await;
    let b = create(&mut h, "pvc-b").await;
    let c3 = create(&mut h, "pvc-c").await;
    let c = &mut h.controller;
    let first = c
        .controller_publish_volume(publish(&a, "n1"))
        .await
        .unwrap();
    let first = first.into_inner().publish_context;
    assert_eq!(first["devicePath"], "/dev/disk-pvc-a");
    let again = c
        .controller_publish_volume(publish(&a, "n1"))
        .await
        .unwrap();
    assert_eq!(again.into_inner().publish_context, first);
    let mut read_only = publish(&a, "n1");
    read_only.readonly = true;
    let other = c.controller_publish_volume(read_only).await.unwrap_err();
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    let elsewhere = c
        .controller_publish_volume(publish(&a, "n2"))
        .await
        .unwrap_err();
    assert_eq!(elsewhere.code(), Code::FailedPrecondition, "{elsewhere:?}");
    c.controller_publish_volume(publish(&b, "n1"))
        .await
        .unwrap();
    let full = c
        .controller_publish_volume(publish(&c3, "n1"))
        .await
        .unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");

    let in_use = c
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: a.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(in_use.code(), Code::FailedPrecondition, "{in_use:?}");
    c.controller_unpublish_volume(unpublish(&a, "n2"))
        .await
        .unwrap();
    c.controller_unpublish_volume(unpublish("disk-never", "n1"))
        .await
        .unwrap();
    c.controller_unpublish_volume(unpublish(&a, ""))
        .await
        .unwrap();
    c.controller_unpublish_volume(unpublish(&a, "n1"))
        .await
        .unwrap();
    c.controller_publish_volume(publish(&c3, "n1"))
        .await
        .unwrap();
    assert_eq!(
        disks.calls(),
        [
            "attach disk-pvc-a n1",
            "attach disk-pvc-b n1",
            "detach disk-pvc-a n1",
            "attach disk-pvc-c n1"
        ]
    );
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: a.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// A context CSI cannot carry is INTERNAL; one call per volume: a second
/// while the first attaches is ABORTED.
#[tokio::test]
async fn a_bad_context_is_internal_and_one_call_runs_per_volume() {
    let (mut h, disks) = disks().await;
    let lying = create(&mut h, "lying").await;
    let bad = h
        .controller
        .controller_publish_volume(publish(&lying, "n1"))
        .await;
    assert_eq!(bad.unwrap_err().code(), Code::Internal);

    let slow = create(&mut h, "slow").await;
    let mut first = h.controller.clone();
    let id = slow.clone();
    let running =
        tokio::spawn(async move { first.controller_publish_volume(publish(&id, "n1")).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let busy = h
        .controller
        .controller_unpublish_volume(unpublish(&slow, "n1"))
        .await;
    assert_eq!(busy.unwrap_err().code(), Code::Aborted);
    running.await.unwrap().unwrap();
    assert_eq!(
        disks.calls(),
        ["attach disk-lying n1", "attach disk-slow n1"]
    );
}

/// NodeStageVolume hands the controller's publish context to Stage.
#[tokio::test]
async fn stage_gets_the_publish_context() {
    let (mut h, disks) = disks().await;
    let id = create(&mut h, "pvc-staged").await;
    let attached = h
        .controller
        .controller_publish_volume(publish(&id, "testing-node"))
        .await;
    let publish_context = attached.unwrap().into_inner().publish_context;
    let staging = h.staging_path("pvc-staged");
    std::fs::create_dir_all(&staging).unwrap();
    let mut too_big = stage(&id, &staging);
    too_big.publish_context.insert("k".into(), "x".repeat(5000));
    let refused = h.node.node_stage_volume(too_big).await.unwrap_err();
    assert!(refused.message().contains("publish_context"), "{refused:?}");
    let mut request = stage(&id, &staging);
    request.publish_context = publish_context.clone();
    h.node.node_stage_volume(request).await.unwrap();
    let staged_with = disks.staged_with.lock().unwrap().clone();
    assert_eq!(staged_with.len(), 1);
    assert_eq!(
        staged_with[0],
        publish_context.into_iter().collect::<Parameters>()
    );
}
