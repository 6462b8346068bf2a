//! The Jinja2 filters and Python methods pav-templates writes itself
//! (`center`, `indent`, `zfill`, `ljust`, `rjust`, `str.center`) build text
//! of a size the template chooses: each is refused with the fuel error
//! before it allocates, and the error names provisioner, field and line.
//! Alone in its binary: it compares the process's peak resident memory
//! (`VmHWM`, Linux) before and after.

use pav_templates::{CompiledProvisioner, Phase, samples};

const ROWS: &[&str] = &[
    "{{ 'x' | center(300000000) | length }}",
    "{{ 'a\nb\nc' | indent(100000000) | length }}",
    "{{ '1'.zfill(300000000) | length }}",
    "{{ 'x'.ljust(300000000) | length }}",
    "{{ 'x'.rjust(300000000, '*') | length }}",
    "{{ 'x'.center(300000000) | length }}",
];

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn render(template: &str) -> Result<serde_json::Value, pav_templates::Error> {
    let provisioner = CompiledProvisioner::from_json(serde_json::json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": "bounds"},
        "spec": {
            "provisioningModes": ["Static"],
            "volumeStaging": {"podTemplate": {"metadata": {"name": template}}},
        },
    }))
    .unwrap();
    provisioner
        .render_raw(Phase::Staging, samples::staging_context().value())
        .map(|rendered| rendered["podTemplate"]["metadata"]["name"].clone())
}

#[test]
fn padding_is_refused_before_it_allocates() {
    let before = peak_rss_kib();
    for template in ROWS {
        let err = render(template).unwrap_err();
        let line = if template.contains("indent(100") {
            3
        } else {
            1
        };
        assert_eq!(
            err.to_string(),
            format!(
                "provisioner \"bounds\", field spec.volumeStaging.podTemplate.metadata.name, line {line}: evaluation budget exhausted (does the template loop without end?)"
            ),
            "{template}"
        );
    }
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        let grown_mib = (after - before) / 1024;
        assert!(
            grown_mib < 100,
            "peak resident memory grew by {grown_mib} MiB"
        );
    }
    // Within the budget the same filters work.
    assert_eq!(render("[{{ 'ab' | center(6) }}]").unwrap(), "[  ab  ]");
    assert_eq!(render("{{ '-4'.zfill(5) }}").unwrap(), "-0004");
    assert_eq!(render("{{ 'a\nb\n' | indent(2) }}|").unwrap(), "a\n  b\n|");
}

#[test]
fn integers_are_exact_to_128_bits_and_an_error_beyond() {
    assert_eq!(
        render("{{ 2**64 }} {{ 10**20 // 3 }} {{ [2**70] | tojson }} {{ 1e20 | int }}").unwrap(),
        "18446744073709551616 33333333333333333333 [1180591620717411303424] 100000000000000000000"
    );
    let err = render("{{ 2**128 }}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "provisioner \"bounds\", field spec.volumeStaging.podTemplate.metadata.name, line 1: unable to calculate 2 ** 128"
    );
}
