//! Arbitrary template source as a PavProvisioner's fields, rendered in every
//! phase.
//!
//! The property lives in pav-fuzz-checks (fuzz/checks), whose test replays
//! fuzz/corpus/template_render in the workspace build.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pav_fuzz_checks::template_render(data));
