//! The root tests run in `scripts/sandbox` (`.ci/run` and
//! docs/internals/ci.md): a mount namespace in which the host's system
//! directories are read-only, so that a mistake in a test that mounts or
//! removes directories as root cannot harm the machine. This checks that
//! they ran there, with the other root tests of the stage.

use std::io::ErrorKind;
use std::path::Path;

#[test]
#[ignore = "needs root, run in scripts/sandbox"]
fn system_directories_are_read_only() {
    for dir in ["/etc", "/usr", "/boot", "/var/lib"] {
        if !Path::new(dir).is_dir() {
            continue;
        }
        let probe = Path::new(dir).join(".pav-sandbox-probe");
        match std::fs::write(&probe, "") {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe);
                panic!("{dir} is writable: run the root tests in scripts/sandbox");
            }
            Err(err) => assert_eq!(
                err.kind(),
                ErrorKind::ReadOnlyFilesystem,
                "writing {}: {err}",
                probe.display()
            ),
        }
    }
}
