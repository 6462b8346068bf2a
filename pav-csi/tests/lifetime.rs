//! Calls and connections over time: a client that gives up, a connection
//! kept for days, more connections than the driver serves at once.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Harness, Options, capability, create_request};
use hyper_util::rt::TokioIo;
use pav_csi::csi;
use pav_csi::csi::identity_client::IdentityClient;
use pav_sdk::VolumeMode;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request};

/// The deadline kubelet or a sidecar might give a call, far shorter than
/// the slow provisioner calls below.
const SHORT_DEADLINE: Duration = Duration::from_millis(20);

/// `request` with [`SHORT_DEADLINE`].
fn hurried<T>(request: T) -> Request<T> {
    let mut request = Request::new(request);
    request.set_timeout(SHORT_DEADLINE);
    request
}

/// A client that gave up: its deadline passed (tonic's server answers
/// `CANCELLED` once it does).
fn assert_gave_up(status: &tonic::Status) {
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{status:?}"
    );
}

#[tokio::test]
async fn a_create_whose_client_gives_up_runs_to_completion_and_holds_its_name() {
    let mut h = Harness::start().await;
    let mut slow = create_request("patient");
    slow.parameters.insert("slow".into(), "yes".into());

    let status = (h.controller.create_volume(hurried(slow.clone())).await).unwrap_err();
    assert_gave_up(&status);
    // The repeat kubelet's retry would send finds the first call running.
    let repeat = h.controller.create_volume(slow.clone()).await.unwrap_err();
    assert_eq!(repeat.code(), Code::Aborted, "{repeat:?}");

    // Once it ends, its volume is the answer, and the provisioner was asked once.
    let mut answer = None;
    for _ in 0..500 {
        match h.controller.create_volume(slow.clone()).await {
            Ok(created) => {
                answer = created.into_inner().volume;
                break;
            }
            Err(status) if status.code() == Code::Aborted => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    let volume = answer.expect("the first call never ended");
    assert_eq!(h.provisioner.count("create"), 1);
    assert_eq!(
        h.provisioner.volumes.lock().unwrap()["patient"].handle,
        volume.volume_id
    );
    h.stop().await;
}

fn stage_request(h: &Harness, id: &str) -> csi::NodeStageVolumeRequest {
    let staging = h.path(&format!("staging-{id}"));
    std::fs::create_dir_all(&staging).unwrap(); // kubelet creates it
    csi::NodeStageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.to_string_lossy().into(),
        volume_capability: Some(capability(VolumeMode::Filesystem)),
        ..Default::default()
    }
}

fn unstage_request(stage: &csi::NodeStageVolumeRequest) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: stage.volume_id.clone(),
        staging_target_path: stage.staging_target_path.clone(),
    }
}

#[tokio::test]
async fn a_stage_whose_client_gives_up_runs_to_completion_and_holds_its_volume() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "slow-in-place");
    let unstage = unstage_request(&stage);

    let status = h.node.node_stage_volume(hurried(stage.clone())).await;
    assert_gave_up(&status.unwrap_err());
    // An Unstage right after it must not run alongside the Stage.
    let refused = h.node.node_unstage_volume(unstage.clone()).await;
    assert_eq!(refused.unwrap_err().code(), Code::Aborted);

    h.provisioner.wait_for_calls("stage finished", 1).await;
    // The volume stays busy until pav-csi has recorded the stage, so the
    // Unstage that follows undoes it.
    let mut unstaged = false;
    for _ in 0..500 {
        match h.node.node_unstage_volume(unstage.clone()).await {
            Ok(_) => {
                unstaged = true;
                break;
            }
            Err(status) if status.code() == Code::Aborted => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    assert!(unstaged, "the stage never released its volume");
    assert_eq!(
        h.provisioner.calls(),
        ["stage", "stage finished", "unstage"],
        "the completed stage was unstaged"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_failed_stage_is_unstaged() {
    let mut h = Harness::start().await;
    // Stage fails, or answers a path pav-csi cannot bind: either way
    // whatever it did is undone at once, and the volume can be staged
    // elsewhere (its record is gone).
    for id in ["missing", "vanishing"] {
        let stage = stage_request(&h, id);
        h.node.node_stage_volume(stage.clone()).await.unwrap_err();
        let calls = h.provisioner.calls();
        assert_eq!(calls[calls.len() - 2..], ["stage", "unstage"], "{id}");
        let mut elsewhere = stage.clone();
        elsewhere.staging_target_path = h.path("elsewhere").to_string_lossy().into();
        std::fs::create_dir_all(h.path("elsewhere")).unwrap();
        let status = h.node.node_stage_volume(elsewhere).await.unwrap_err();
        assert_ne!(status.code(), Code::FailedPrecondition, "{id}: {status:?}");
    }
    h.stop().await;
}

/// An answer kubelet takes as "maybe still in progress" (UNAVAILABLE,
/// ABORTED, ...) is followed by a retry or by NodeUnstageVolume: the stage
/// stays recorded for either, and nothing is undone behind kubelet's back.
#[tokio::test]
async fn a_stage_answered_as_in_progress_is_kept_for_kubelet() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "busy");
    let status = h.node.node_stage_volume(stage.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(h.provisioner.calls(), ["stage"], "nothing undone");
    let mut elsewhere = stage.clone();
    elsewhere.staging_target_path = h.path("elsewhere").to_string_lossy().into();
    std::fs::create_dir_all(h.path("elsewhere")).unwrap();
    let status = h.node.node_stage_volume(elsewhere).await.unwrap_err();
    assert_eq!(
        status.code(),
        Code::FailedPrecondition,
        "still recorded: {status:?}"
    );

    (h.node.node_unstage_volume(unstage_request(&stage)).await).unwrap();
    assert_eq!(h.provisioner.calls(), ["stage", "unstage"]);
    h.stop().await;
}

/// Kubelet repeats NodeStageVolume for a volume it has staged (after its
/// own restart, or for each new pod): a repeat that fails for good must
/// leave the stage alone, since pods may be using it.
#[tokio::test]
async fn a_failed_repeat_stage_keeps_the_volume_staged() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "kept-in-place");
    (h.node.node_stage_volume(stage.clone()).await).unwrap();
    h.provisioner
        .failing_stages
        .lock()
        .unwrap()
        .push("kept-in-place".into());

    let status = h.node.node_stage_volume(stage.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(h.provisioner.calls(), ["stage", "stage"], "nothing undone");
    // Still recorded at its path: staging it elsewhere is refused.
    let mut elsewhere = stage.clone();
    elsewhere.staging_target_path = h.path("elsewhere").to_string_lossy().into();
    std::fs::create_dir_all(h.path("elsewhere")).unwrap();
    let refused = h.node.node_stage_volume(elsewhere).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    // And kubelet's NodeUnstageVolume still reaches the provisioner.
    (h.node.node_unstage_volume(unstage_request(&stage)).await).unwrap();
    assert_eq!(h.provisioner.calls(), ["stage", "stage", "unstage"]);
    h.stop().await;
}

#[tokio::test]
async fn a_failed_stage_whose_undo_fails_is_unstaged_by_the_next_unstage() {
    let mut h = Harness::start().await;
    let stage = stage_request(&h, "missing");
    h.provisioner
        .failing_unstages
        .lock()
        .unwrap()
        .push("missing".into());
    h.node.node_stage_volume(stage.clone()).await.unwrap_err();
    assert_eq!(h.provisioner.count("unstage"), 1);

    // Kubelet unstages a volume whose stage failed; this time it works.
    h.provisioner.failing_unstages.lock().unwrap().clear();
    (h.node.node_unstage_volume(unstage_request(&stage)).await).unwrap();
    assert_eq!(h.provisioner.count("unstage"), 2, "the undo was retried");
    // And then it is gone: unstaging again calls nothing.
    (h.node.node_unstage_volume(unstage_request(&stage)).await).unwrap();
    assert_eq!(h.provisioner.count("unstage"), 2);
    h.stop().await;
}

/// A channel to `socket` that counts the connections it opens.
async fn counting_channel(socket: &Path) -> (Channel, Arc<AtomicUsize>) {
    let opened = Arc::new(AtomicUsize::new(0));
    let (socket, count) = (socket.to_owned(), opened.clone());
    let channel = Endpoint::from_static("http://[::1]:50051")
        .connect_with_connector(tower::service_fn(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .unwrap();
    (channel, opened)
}

/// The CSI sidecars exit when their connection is lost, so the driver must
/// keep an idle one open however long it lives. The clock is paused: the
/// week passes at once, and any timer of the server's fires in it.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_stays_open_for_a_week() {
    let h = Harness::start_with(Options::default()).await;
    let (channel, opened) = counting_channel(&h.socket).await;
    let mut identity = IdentityClient::new(channel);
    identity.probe(csi::ProbeRequest {}).await.unwrap();
    for _ in 0..7 * 24 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    identity.probe(csi::ProbeRequest {}).await.unwrap();
    assert_eq!(
        opened.load(Ordering::SeqCst),
        1,
        "the driver closed the connection: a sidecar would have exited"
    );
    h.stop().await;
}

/// Connections the driver serves at once (pav-csi's `MAX_CONNECTIONS`).
const MAX_CONNECTIONS: usize = 256;

/// Past the limit, a connection waits in the socket's backlog until one
/// closes; it is then served. The clock is paused: a minute of waiting
/// passes at once when nothing else can happen.
#[tokio::test(start_paused = true)]
async fn connections_past_the_limit_wait_for_a_free_slot() {
    let h = Harness::start_with(Options::default()).await;
    let mut served = Vec::new();
    // The harness's own clients hold one slot.
    for _ in 1..MAX_CONNECTIONS {
        let (channel, _) = counting_channel(&h.socket).await;
        let mut identity = IdentityClient::new(channel);
        identity.probe(csi::ProbeRequest {}).await.unwrap();
        served.push(identity);
    }
    let socket = h.socket.clone();
    let one_more = async move {
        let (channel, _) = counting_channel(&socket).await;
        IdentityClient::new(channel)
            .probe(csi::ProbeRequest {})
            .await
            .unwrap()
    };
    let mut one_more = std::pin::pin!(one_more);
    let waited = tokio::time::timeout(Duration::from_secs(60), &mut one_more).await;
    assert!(waited.is_err(), "a connection past the limit was served");
    served.pop();
    tokio::time::timeout(Duration::from_secs(60), one_more)
        .await
        .expect("a freed slot was not given to the waiting connection");
    drop(served);
    h.stop().await;
}

/// A DaemonSet pod deleted with no grace period is replaced at once: the
/// new instance binds the socket while the old one still stops. The old
/// one must leave the new socket in place, else kubelet and the sidecars
/// lose the driver.
#[tokio::test]
async fn a_stopping_instance_leaves_its_successors_socket() {
    let old = Harness::start().await;
    let socket = old.socket.clone();
    let inode = |path: &Path| std::fs::symlink_metadata(path).map(|m| m.ino()).ok();
    let old_socket = inode(&socket);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let successor = tokio::spawn(
        pav_csi::Driver::builder("test.pav.example.com")
            .provisioner(
                pav_sdk::Provisioner::new(common::Memory::new(old.path("successor"))).with_create(),
            )
            .serve_controller(&socket)
            .run_until(async {
                let _ = stopped.await;
            }),
    );
    let mut identity = None;
    for _ in 0..1000 {
        if inode(&socket).is_some_and(|i| Some(i) != old_socket)
            && let Ok(channel) = pav_csi::client::connect(&socket).await
        {
            identity = Some(IdentityClient::new(channel));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut identity = identity.expect("the successor never bound the socket");
    identity.probe(csi::ProbeRequest {}).await.unwrap();
    let _dir = old.stop_server().await;
    assert!(socket.exists(), "the successor's socket was removed");
    identity.probe(csi::ProbeRequest {}).await.unwrap();
    stop.send(()).unwrap();
    successor.await.unwrap().unwrap();
    assert!(!socket.exists(), "the successor removes its own socket");
}
