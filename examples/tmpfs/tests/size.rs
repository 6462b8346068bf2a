//! The point of this example: with records kept by pav-sdk (each node
//! call given its volume's record, growth recorded), and mounts and node
//! directories by pav-csi, a provisioner is its storage logic, within 60
//! lines (the guide says so).

#[test]
fn the_storage_logic_stays_within_60_lines() {
    let source = include_str!("../src/provisioner.rs");
    let code = source
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count();
    assert!(code <= 60, "src/provisioner.rs has {code} lines of code");
}
