//! Times `pav-templates` on the PaV examples and prints, as one JSON
//! document on stdout, every case's context objects and rendered output
//! (for `jinja2_pav.py` to reproduce and compare) and the timings.
//!
//! ```text
//! render-timing [--sample-ms N] [--samples N] [--no-timing]
//! render-timing --profile EXAMPLE/LABEL ITERATIONS [--raw]  # e.g. under callgrind
//! ```
//!
//! `--profile` only renders that case (`render_*`, or `render_raw` with
//! `--raw`; context pre-built) ITERATIONS times and prints nothing, for
//! `valgrind --tool=callgrind`.
//!
//! Each measurement reports the median and the minimum of `--samples` batches (default 9) of
//! about `--sample-ms` milliseconds each (default 40), single-threaded.

use std::hint::black_box;
use std::time::{Duration, Instant};

use pav_benches::{Example, json_object, json_string};
use pav_templates::CompiledProvisioner;

struct Options {
    raw: bool,
    profile: Option<(String, u64)>,
    sample: Duration,
    samples: usize,
    timing: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        raw: false,
        profile: None,
        sample: Duration::from_millis(40),
        samples: 9,
        timing: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        fn number(args: &mut impl Iterator<Item = String>, name: &str) -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a positive integer"))
        }
        match arg.as_str() {
            "--sample-ms" => {
                options.sample = Duration::from_millis(number(&mut args, "--sample-ms")?.max(1))
            }
            "--samples" => options.samples = number(&mut args, "--samples")?.max(1) as usize,
            "--no-timing" => options.timing = false,
            "--raw" => options.raw = true,
            "--profile" => {
                let case = args.next().ok_or("--profile needs EXAMPLE/LABEL")?;
                options.profile = Some((case, number(&mut args, "--profile")?));
            }
            "-h" | "--help" => {
                return Err(
                    "usage: render-timing [--sample-ms N] [--samples N] [--no-timing] \
                     | --profile EXAMPLE/LABEL ITERATIONS [--raw]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// Median and minimum nanoseconds per call of `f`.
fn measure(options: &Options, mut f: impl FnMut()) -> (f64, f64) {
    // Warm up and calibrate: double the batch until it takes 10 ms.
    let mut iterations: u64 = 1;
    let per_call = loop {
        let start = Instant::now();
        for _ in 0..iterations {
            f();
        }
        let elapsed = start.elapsed();
        if elapsed >= Duration::from_millis(10) {
            break elapsed.as_secs_f64() / iterations as f64;
        }
        iterations *= 2;
    };
    let batch = ((options.sample.as_secs_f64() / per_call) as u64).max(1);
    let mut samples: Vec<f64> = (0..options.samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed().as_secs_f64() * 1e9 / batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    (samples[samples.len() / 2], samples[0])
}

fn timing_json(name: &str, (median, min): (f64, f64)) -> String {
    json_object(&[
        ("what", json_string(name)),
        ("median_ns", format!("{median:.1}")),
        ("min_ns", format!("{min:.1}")),
    ])
}

fn main() {
    // Timed as the drivers render: on a thread with pav's stack.
    pav_benches::on_pav_thread(timed_main);
}

fn timed_main() {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let examples = Example::all();
    if let Some((name, iterations)) = &options.profile {
        let (example, case) = examples
            .iter()
            .flat_map(|e| e.cases.iter().map(move |c| (e, c)))
            .find(|(e, c)| format!("{}/{}", e.name, c.label) == *name)
            .unwrap_or_else(|| panic!("no case {name}"));
        let context = case.context.build().expect("context builds");
        for _ in 0..*iterations {
            if options.raw {
                black_box(
                    case.render_raw(&example.provisioner, black_box(&context))
                        .expect("renders"),
                );
                continue;
            }
            black_box(
                case.render(&example.provisioner, black_box(&context))
                    .expect("renders"),
            );
        }
        return;
    }
    let mut cases = Vec::new();
    for example in &examples {
        let mut compile = String::from("null");
        if options.timing {
            compile = timing_json(
                "compile",
                measure(&options, || {
                    black_box(
                        CompiledProvisioner::from_yaml(black_box(&example.provisioner_yaml))
                            .expect("example compiles"),
                    );
                }),
            );
        }
        for case in &example.cases {
            let context = case.context.build().expect("context builds");
            case.render(&example.provisioner, &context)
                .unwrap_or_else(|err| panic!("{} {}: {err}", case.example, case.label));
            let output = case
                .render_raw_json(&example.provisioner, &context)
                .unwrap_or_else(|err| panic!("{} {}: {err}", case.example, case.label));
            let mut timings = Vec::new();
            if options.timing && case.timed {
                timings.push(timing_json(
                    "render",
                    measure(&options, || {
                        black_box(
                            case.render(&example.provisioner, black_box(&context))
                                .expect("renders"),
                        );
                    }),
                ));
                timings.push(timing_json(
                    "render_raw",
                    measure(&options, || {
                        black_box(
                            case.render_raw(&example.provisioner, black_box(&context))
                                .expect("renders"),
                        );
                    }),
                ));
                timings.push(timing_json(
                    "context",
                    measure(&options, || {
                        black_box(case.context.build().expect("context builds"));
                    }),
                ));
            }
            eprintln!("rust: {} {} done", case.example, case.label);
            cases.push(json_object(&[
                ("example", json_string(case.example)),
                ("phase", json_string(case.phase.name())),
                ("label", json_string(&case.label)),
                ("timed", case.timed.to_string()),
                ("context", case.context.to_json()),
                ("output", output),
                ("compile", compile.clone()),
                ("timings", format!("[{}]", timings.join(", "))),
            ]));
        }
    }
    let context = match pav_benches::probe_context_spec().build() {
        Ok(pav_benches::Context::Staging(context)) => context,
        other => panic!("probe context: {other:?}"),
    };
    let probes: Vec<String> = pav_benches::semantics_probes()
        .into_iter()
        .map(|probe| {
            let result = match pav_benches::render_probe(&probe.template, &context) {
                Ok(value) => ("output", value.to_string()),
                Err(message) => ("error", json_string(&message)),
            };
            json_object(&[
                ("name", json_string(&probe.name)),
                ("template", json_string(&probe.template)),
                (
                    "deliberate",
                    probe
                        .deliberate
                        .as_deref()
                        .map_or("null".into(), json_string),
                ),
                result,
            ])
        })
        .collect();
    println!(
        "{{\"probe_context\": {},\n\"probes\": [\n{}\n],\n\"cases\": [\n{}\n]}}",
        pav_benches::probe_context_spec().to_json(),
        probes.join(",\n"),
        cases.join(",\n")
    );
}
