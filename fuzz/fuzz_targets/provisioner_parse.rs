//! Arbitrary bytes as PavProvisioner YAML, compiled and rendered in every
//! phase.
//!
//! The property lives in pav-fuzz-checks (fuzz/checks), whose test replays
//! fuzz/corpus/provisioner_parse in the workspace build.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pav_fuzz_checks::provisioner_parse(data));
