//! Arbitrary bytes as PavProvisioner YAML through
//! `CompiledProvisioner::from_yaml`; when it compiles, every phase is
//! rendered with the sample contexts. Must never panic, hang or exhaust
//! memory (YAML aliases are bounded too).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pav_templates::CompiledProvisioner;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match CompiledProvisioner::from_yaml(text) {
        Ok(provisioner) => common::render_every_phase(&provisioner),
        Err(problems) => {
            assert!(!problems.0.is_empty(), "an error without a problem");
            let _ = problems.to_string();
        }
    }
});
