//! The point of this example: with records kept by pav-sdk and mounts by
//! pav-csi, a provisioner is its storage logic, under 120 lines (the guide
//! and pav-sdk's front page say so).

#[test]
fn the_storage_logic_stays_under_120_lines() {
    let source = include_str!("../src/provisioner.rs");
    let code = source
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count();
    assert!(code <= 120, "src/provisioner.rs has {code} lines of code");
}
