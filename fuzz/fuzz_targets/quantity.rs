//! Arbitrary text as a Kubernetes quantity.
//!
//! The property lives in pav-fuzz-checks (fuzz/checks), whose test replays
//! fuzz/corpus/quantity in the workspace build.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pav_fuzz_checks::quantity(data));
