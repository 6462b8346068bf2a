//! Templates cannot make the evaluator allocate much more than fuel pays
//! for (200,000 fuel: about 12 MB of data). minijinja checks its own
//! operators and filters before they allocate; the Python methods from
//! minijinja-contrib and our `tojson` were charged only after building their
//! result, so one expression could allocate gigabytes (`b.replace('x', b)` with a 2 MB
//! `b`: 4 TB). Each row below allocated 300 MB or more before pav-templates
//! checked those methods first; they are sized so that a regression shows
//! here as growth, not as the machine running out of memory.
//!
//! The test is alone in its binary: it compares the process's peak
//! resident memory (`VmHWM`, Linux) before and after.

use pav_templates::{CompiledProvisioner, Phase, samples};

const ROWS: &[&str] = &[
    // 2 MB joined with itself 150 times: 600 MB.
    "{% set a = 'x' * 1000 %}{% set b = a.join([a] * 1000) %}{{ b.join([b] * 150) | length }}",
    // Every `x` of 2 MB replaced by 200 bytes: 400 MB (by `b` itself: 4 TB).
    "{% set a = 'x' * 1000 %}{% set b = a.join([a] * 1000) %}{{ b.replace('x', 'y' * 200) | length }}",
    // Padded to 300 million characters: 300 MB.
    "{{ '{:>300000000}'.format('x') | length }}",
    // Two lines indented by 100 million spaces each: 200 MB.
    "{{ [1] | tojson(indent=100000000) | length }}",
];

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn python_methods_are_stopped_before_they_allocate() {
    // Linux only, as pav: a test that passed without measuring would
    // hold no promise.
    let before = peak_rss_kib().expect("VmHWM in /proc/self/status");
    for template in ROWS {
        let provisioner = CompiledProvisioner::from_json(serde_json::json!({
            "apiVersion": "pav.albertofaria.github.io/v1alpha1",
            "kind": "PavProvisioner",
            "metadata": {"name": "memory"},
            "spec": {
                "provisioningModes": ["Static"],
                "volumeStaging": {"podTemplate": {"metadata": {"name": template}}},
            },
        }))
        .unwrap();
        let err = provisioner
            .render_raw(Phase::Staging, samples::staging_context().value())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "provisioner \"memory\", field spec.volumeStaging.podTemplate.metadata.name, line 1: evaluation budget exhausted (does the template loop without end?)",
            "{template}"
        );
    }
    let grown_mib = (peak_rss_kib().unwrap() - before) / 1024;
    eprintln!("peak resident memory grew by {grown_mib} MiB");
    assert!(
        grown_mib < 100,
        "peak resident memory grew by {grown_mib} MiB: a method or filter allocated before fuel was checked"
    );
}
