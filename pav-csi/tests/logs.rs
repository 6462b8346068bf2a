//! What the driver logs: request strings escaped (a path or id holding a
//! newline cannot forge a log line), and every failed mutating call.
//!
//! One subscriber serves the whole test binary (a process has one global
//! subscriber); each test looks for the ids it used.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use common::Harness;
use pav_csi::csi;
use tonic::Code;

/// Everything the driver logs, in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything logged in this process so far, once the subscriber that
/// captures it is installed (on first use).
fn logs() -> String {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    let captured = CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    });
    String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
}

#[tokio::test]
async fn request_strings_cannot_forge_log_lines() {
    logs();
    let mut h = Harness::start().await;
    let forged = "\nFORGED ERROR volume deleted";
    let target = format!("{}/pods/uid/target{forged}", h.kubelet_dir().display());
    h.node
        .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: format!("vol{forged}"),
            target_path: target,
        })
        .await
        .unwrap();
    h.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: format!("gone{forged}"),
            ..Default::default()
        })
        .await
        .unwrap();
    h.stop().await;

    let logs = logs();
    assert!(logs.contains("NodeUnpublishVolume"), "{logs}");
    assert!(logs.contains("DeleteVolume"), "{logs}");
    for line in logs.lines() {
        assert!(!line.starts_with("FORGED"), "forged line in:\n{logs}");
    }
    assert!(logs.contains(r"\nFORGED"), "escaped newline in:\n{logs}");
}

/// A NodeUnstageVolume that failed with INTERNAL (its staging records
/// unreadable) logged nothing: the failure came before the call's own log
/// line. Every mutating call's failure is one line, `WARN` when final.
#[tokio::test]
async fn a_failed_mutating_call_is_logged_whatever_step_failed() {
    logs();
    let mut h = Harness::start().await;
    // The records directory is a file: reading a record fails (ENOTDIR).
    let state = h.path("plugins/test.pav.example.com");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("staged"), "not a directory").unwrap();
    let failed = h
        .node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: "unstage-internal".into(),
            staging_target_path: h.path("staging").to_string_lossy().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(failed.code(), Code::Internal, "{failed:?}");

    // A check that refuses is logged too, and a repeat the caller retries
    // (ABORTED) at INFO.
    let refused = h
        .controller
        .delete_volume(csi::DeleteVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    h.stop().await;

    let logs = logs();
    let line = |id: &str| {
        logs.lines()
            .find(|line| line.contains(id))
            .unwrap_or_else(|| panic!("no line about {id} in:\n{logs}"))
            .to_owned()
    };
    let unstage = line("\"unstage-internal\"");
    assert!(unstage.contains(" WARN "), "{unstage}");
    assert!(unstage.contains("NodeUnstageVolume failed"), "{unstage}");
    assert!(unstage.contains("code=Internal"), "{unstage}");
    assert!(unstage.contains("reading staging records"), "{unstage}");
    let delete = line("DeleteVolume failed");
    assert!(
        delete.contains(" WARN ") && delete.contains("InvalidArgument"),
        "{delete}"
    );
}
