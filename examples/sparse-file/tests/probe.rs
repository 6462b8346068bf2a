//! `sparse-file --probe`, the driver containers' liveness probe: it
//! succeeds while a driver serves the socket and fails once none does.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_sparse-file");

/// Runs `sparse-file --probe` against `socket`: whether it exited 0.
fn probe(socket: &Path) -> bool {
    Command::new(BINARY)
        .arg(format!("--endpoint={}", socket.display()))
        .arg("--probe")
        .status()
        .unwrap()
        .success()
}

/// Kills the driver when the test ends, also on a panic.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn probe_follows_whether_the_driver_serves() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    assert!(!probe(&socket), "no driver, yet the probe passed");

    // Controller only (no node id): serves without root.
    let mut driver = Driver(
        Command::new(BINARY)
            .arg(format!("--endpoint={}", socket.display()))
            .arg(format!("--dir={}", dir.path().join("volumes").display()))
            .spawn()
            .unwrap(),
    );
    let mut served = false;
    for _ in 0..500 {
        if socket.exists() && probe(&socket) {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(served, "the probe never passed against a serving driver");

    driver.0.kill().unwrap();
    driver.0.wait().unwrap();
    assert!(!probe(&socket), "the driver is gone, yet the probe passed");
}
