//! Criterion benchmarks of `pav-templates` on the PaV examples.
//!
//! For each example: `compile/<example>` (`CompiledProvisioner::from_yaml`),
//! and for each phase it has, `render/<example>/<phase>` (the typed
//! `render_*` method, context pre-built), `render_raw/<example>/<phase>`
//! (templates only, no conversion to Kubernetes types) and
//! `context/<example>/<phase>` (building the context from parsed objects).
//!
//! ```text
//! cargo bench -p pav-benches                 # everything
//! cargo bench -p pav-benches -- render/      # one group
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use pav_benches::Example;
use pav_templates::CompiledProvisioner;

fn templates(c: &mut Criterion) {
    let examples = Example::all();

    let mut group = c.benchmark_group("compile");
    for example in &examples {
        group.bench_function(example.name, |b| {
            b.iter(|| {
                CompiledProvisioner::from_yaml(black_box(&example.provisioner_yaml))
                    .expect("example compiles")
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("render");
    for example in &examples {
        for case in example.cases.iter().filter(|case| case.timed) {
            let context = case.context.build().expect("context builds");
            group.bench_function(format!("{}/{}", example.name, case.label), |b| {
                b.iter(|| {
                    case.render(&example.provisioner, black_box(&context))
                        .expect("renders")
                })
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("render_raw");
    for example in &examples {
        for case in example.cases.iter().filter(|case| case.timed) {
            let context = case.context.build().expect("context builds");
            group.bench_function(format!("{}/{}", example.name, case.label), |b| {
                b.iter(|| {
                    case.render_raw(&example.provisioner, black_box(&context))
                        .expect("renders")
                })
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("context");
    for example in &examples {
        for case in example.cases.iter().filter(|case| case.timed) {
            group.bench_function(format!("{}/{}", example.name, case.label), |b| {
                b.iter(|| black_box(&case.context).build().expect("context builds"))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = templates
}
// criterion_main!, on a thread with pav's stack (pav_benches::on_pav_thread).
fn main() {
    pav_benches::on_pav_thread(|| {
        benches();
        Criterion::default().configure_from_args().final_summary();
    });
}
