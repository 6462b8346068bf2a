//! Request strings reach the driver's logs escaped: a path or id holding a
//! newline cannot forge a log line.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::Harness;
use pav_csi::csi;

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

#[tokio::test]
async fn request_strings_cannot_forge_log_lines() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
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

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("NodeUnpublishVolume"), "{logs}");
    assert!(logs.contains("DeleteVolume"), "{logs}");
    for line in logs.lines() {
        assert!(!line.starts_with("FORGED"), "forged line in:\n{logs}");
    }
    assert!(logs.contains(r"\nFORGED"), "escaped newline in:\n{logs}");
}
