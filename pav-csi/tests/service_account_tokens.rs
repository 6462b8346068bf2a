//! The client pod's service-account tokens (the CSIDriver's
//! `tokenRequests`) in NodePublishVolume, through a real tonic client:
//! taken from `secrets` or the volume context into
//! `StageRequest::service_account_tokens` and out of both, never printed,
//! refused naming the key (never the value) when malformed; a republish
//! with renewed tokens runs Stage again without binding again.
//!
//! The test provisioner records each Stage's request before it answers,
//! and its Stage of `missing` (or of a handle in `failing_stages`) is
//! `NOT_FOUND`, of `busy` `UNAVAILABLE`: a publish that fails there
//! shows what Stage got without mounting. The republish tests mount:
//! root, in the sandbox.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{Harness, Options, capability};
use pav_csi::csi;
use pav_sdk::{StageRequest, VolumeMode};
use tonic::Code;

/// kubelet's key for the tokens.
const TOKENS: &str = "csi.storage.k8s.io/serviceAccount.tokens";
/// The one audience of the test CSIDriver's `tokenRequests`.
const AUDIENCE: &str = "storage.example.com";

/// kubelet's value for a token `token` of [`AUDIENCE`].
fn kubelet_tokens(token: &str) -> String {
    format!(
        r#"{{"{AUDIENCE}":{{"token":"{token}","expirationTimestamp":"2026-05-01T10:00:00Z"}}}}"#
    )
}

/// Where the tokens are: `secrets` (the CSIDriver's
/// `serviceAccountTokenInSecrets: true`) or the volume context.
#[derive(Debug, Clone, Copy)]
enum Field {
    Secrets,
    VolumeContext,
}

/// A driver that stages per client pod.
async fn on_publish() -> Harness {
    Harness::start_with(Options {
        stage_on_publish: true,
        ..Options::default()
    })
    .await
}

/// A driver that serves ephemeral inline volumes.
async fn ephemeral() -> Harness {
    Harness::start_with(Options {
        ephemeral: true,
        ..Options::default()
    })
    .await
}

fn target(h: &Harness, pod: &str) -> PathBuf {
    h.target_path(pod, "v")
}

/// kubelet's publish of volume `id` for pod `pod`: the pod info, a
/// volume attribute and a secret, and `tokens` in `field`.
fn publish(
    h: &Harness,
    id: &str,
    pod: &str,
    field: Field,
    tokens: Option<&str>,
) -> csi::NodePublishVolumeRequest {
    let pairs = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut req = csi::NodePublishVolumeRequest {
        volume_id: id.into(),
        target_path: target(h, pod).to_string_lossy().into(),
        volume_capability: Some(capability(VolumeMode::Filesystem)),
        volume_context: pairs(&[
            ("origin", "pv"),
            ("csi.storage.k8s.io/pod.name", pod),
            ("csi.storage.k8s.io/pod.namespace", "apps"),
            ("csi.storage.k8s.io/pod.uid", "uid-1"),
        ]),
        secrets: pairs(&[("password", "pw")]),
        ..Default::default()
    };
    if let Some(tokens) = tokens {
        let map = match field {
            Field::Secrets => &mut req.secrets,
            Field::VolumeContext => &mut req.volume_context,
        };
        map.insert(TOKENS.into(), kubelet_tokens(tokens));
    }
    req
}

/// kubelet's publish of inline volume `id`, whose Create answers the
/// handle `handle`.
fn inline_publish(
    h: &Harness,
    id: &str,
    handle: &str,
    field: Field,
    tokens: &str,
) -> csi::NodePublishVolumeRequest {
    let mut req = publish(h, id, "p", field, Some(tokens));
    let context = &mut req.volume_context;
    context.insert("csi.storage.k8s.io/ephemeral".into(), "true".into());
    context.insert("handle".into(), handle.into());
    req
}

/// The request of the last Stage.
fn last_stage(h: &Harness) -> StageRequest {
    let requests = h.provisioner.stage_requests.lock().unwrap();
    requests.last().expect("a Stage").clone()
}

/// `stage` has `token` for [`AUDIENCE`], typed, and nowhere else: not in
/// its secrets, its context or its `Debug`.
fn assert_only_typed(stage: &StageRequest, token: &str) {
    let tokens = &stage.service_account_tokens;
    let typed = tokens.get(AUDIENCE).expect("the audience's token");
    assert_eq!(typed.token(), token);
    assert_eq!(typed.expiration_timestamp(), "2026-05-01T10:00:00Z");
    assert_eq!(stage.secrets.keys().collect::<Vec<_>>(), ["password"]);
    assert!(!stage.context.contains_key(TOKENS), "{:?}", stage.context);
    let printed = format!("{stage:?}");
    assert!(!printed.contains(token), "{printed}");
    assert!(printed.contains(AUDIENCE), "{printed}");
}

/// Every file under `dir` (the driver's records among them), but sockets.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        if kind.is_dir() {
            files.extend(files_below(&path));
        } else if kind.is_file() {
            files.push(path);
        }
    }
    files
}

/// Unpublishes volume `volume_id` from `target`, which must succeed.
async fn unpublish(h: &mut Harness, volume_id: &str, target: &Path) {
    let unpublish = csi::NodeUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        target_path: target.to_string_lossy().into(),
    };
    h.node.node_unpublish_volume(unpublish).await.unwrap();
}

/// How many mounts there are at `path`.
async fn mounts_at(path: &Path) -> usize {
    let table = pav_csi::mount::mount_table().await.unwrap();
    (table.iter()).filter(|m| m.mount_point == path).count()
}

#[tokio::test]
async fn tokens_reach_stage_typed_and_out_of_secrets_and_context() {
    for field in [Field::Secrets, Field::VolumeContext] {
        let mut h = on_publish().await;
        let req = publish(&h, "missing", "p", field, Some("eyJ-pod-token"));
        let refused = h.node.node_publish_volume(req).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Code::NotFound,
            "Stage's answer: {refused:?}"
        );
        assert_only_typed(&last_stage(&h), "eyJ-pod-token");
        assert_eq!(last_stage(&h).context["origin"], "pv", "{field:?}");
        h.stop().await;
    }
}

#[tokio::test]
async fn without_token_requests_stage_gets_none() {
    let mut h = on_publish().await;
    let req = publish(&h, "missing", "p", Field::Secrets, None);
    h.node.node_publish_volume(req).await.unwrap_err();
    assert!(last_stage(&h).service_account_tokens.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn malformed_tokens_are_invalid_argument_naming_the_key_not_the_value() {
    // A token where kubelet writes the token and its expiration: the
    // parser's own message would quote it.
    let malformed = format!(r#"{{"{AUDIENCE}": "eyJ-leaked-token"}}"#);
    for field in [Field::Secrets, Field::VolumeContext] {
        let mut h = on_publish().await;
        let mut req = publish(&h, "v", "p", field, None);
        match field {
            Field::Secrets => req.secrets.insert(TOKENS.into(), malformed.clone()),
            Field::VolumeContext => req.volume_context.insert(TOKENS.into(), malformed.clone()),
        };
        let refused = h.node.node_publish_volume(req).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        let message = refused.message();
        assert!(message.contains(TOKENS), "{message}");
        assert!(message.contains("line 1, column"), "{message}");
        for part in ["eyJ", "leaked"] {
            assert!(!message.contains(part), "{field:?}: {message}");
        }
        assert_eq!(h.provisioner.count("stage"), 0);
        h.stop().await;
    }
}

#[tokio::test]
async fn ephemeral_volumes_stage_with_the_tokens_and_record_none() {
    for field in [Field::Secrets, Field::VolumeContext] {
        let mut h = ephemeral().await;
        // Stage of `busy` is UNAVAILABLE: the volume stays recorded for
        // the retry, unmounted.
        let req = inline_publish(&h, "csi-1", "busy", field, "eyJ-pod-token");
        let refused = h.node.node_publish_volume(req).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        assert_only_typed(&last_stage(&h), "eyJ-pod-token");
        let records = files_below(h.dir());
        assert!(!records.is_empty());
        for file in records {
            let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
            assert!(!text.contains("eyJ-pod-token"), "{}", file.display());
        }
        h.stop().await;
    }
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_republish_with_renewed_tokens_stages_again_without_binding_again() {
    let mut h = on_publish().await;
    let target = target(&h, "p");
    let first = publish(&h, "v1", "p", Field::Secrets, Some("eyJ-first"));
    h.node.node_publish_volume(first).await.unwrap();
    assert_eq!(mounts_at(&target).await, 1);

    let renewed = publish(&h, "v1", "p", Field::Secrets, Some("eyJ-renewed"));
    h.node.node_publish_volume(renewed).await.unwrap();
    assert_eq!(h.provisioner.count("stage"), 2);
    assert_only_typed(&last_stage(&h), "eyJ-renewed");
    assert_eq!(last_stage(&h).target_path, target);
    assert_eq!(mounts_at(&target).await, 1, "bound once");

    // A Stage that fails at a republish is the answer; the bind stays.
    (h.provisioner.failing_stages.lock().unwrap()).push("v1".into());
    let failing = publish(&h, "v1", "p", Field::Secrets, Some("eyJ-third"));
    let refused = h.node.node_publish_volume(failing).await.unwrap_err();
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    assert!(refused.message().contains("renewed"), "{refused:?}");
    assert_eq!(mounts_at(&target).await, 1);

    unpublish(&mut h, "v1", &target).await;
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn a_repeat_without_tokens_does_not_stage_again() {
    let mut h = on_publish().await;
    let target = target(&h, "p");
    for _ in 0..2 {
        let req = publish(&h, "v1", "p", Field::Secrets, None);
        h.node.node_publish_volume(req).await.unwrap();
    }
    assert_eq!(h.provisioner.count("stage"), 1);
    assert_eq!(mounts_at(&target).await, 1);
    unpublish(&mut h, "v1", &target).await;
    h.stop().await;
}

#[tokio::test]
#[ignore = "needs root (mounts): .ci/run runs it as root"]
async fn an_ephemeral_republish_with_renewed_tokens_stages_again() {
    let mut h = ephemeral().await;
    let target = target(&h, "p");
    let first = inline_publish(&h, "csi-1", "vol-a", Field::Secrets, "eyJ-first");
    h.node.node_publish_volume(first).await.unwrap();
    let renewed = inline_publish(&h, "csi-1", "vol-a", Field::Secrets, "eyJ-renewed");
    h.node.node_publish_volume(renewed).await.unwrap();
    assert_eq!(h.provisioner.count("stage"), 2);
    assert_only_typed(&last_stage(&h), "eyJ-renewed");
    assert_eq!(
        h.provisioner.count("create"),
        2,
        "Create asked again, idempotent"
    );
    assert_eq!(mounts_at(&target).await, 1, "bound once");
    unpublish(&mut h, "csi-1", &target).await;
    h.stop().await;
}
