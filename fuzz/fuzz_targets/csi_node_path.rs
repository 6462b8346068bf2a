//! Arbitrary text as a staging/target path and as a volume id through
//! pav-csi's checks.
//!
//! The property lives in pav-fuzz-checks (fuzz/checks), whose test replays
//! fuzz/corpus/csi_node_path in the workspace build.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pav_fuzz_checks::csi_node_path(data));
