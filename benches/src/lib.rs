//! Shared fixtures for the `pav-templates` benchmarks and the Jinja2
//! comparison.
//!
//! Every [`Case`] is one phase of one PaV example (`examples/<name>/`)
//! together with the objects its context is built from: the example's own
//! claim, StorageClass and PersistentVolume files where it has them, and the
//! built-in [`pav_templates::samples`] otherwise. The same list drives the criterion
//! benchmarks (`benches/templates.rs`), the `render-timing` binary and,
//! through the JSON that binary prints, `jinja2_pav.py`, so Rust and Python
//! always evaluate the same phases with the same objects.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::phase::{Creation, Deletion, Staging, Unstaging, Validation};
use pav_templates::{
    CompiledProvisioner, CreationContext, CreationPhase, OptionalPodPhase, Phase, StagingContext,
    StagingPhase, ValidationContext, ValidationPhase,
};

/// The examples benchmarked, in table order.
pub const EXAMPLES: [&str; 3] = ["hello-world", "cloud-bucket", "block-encryption"];

/// The workspace root (the parent of this crate's directory).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("benches/ lives inside the workspace")
        .to_path_buf()
}

/// `examples/` of the workspace.
pub fn examples_dir() -> PathBuf {
    workspace_dir().join("examples")
}

/// Directory of the built-in sample objects of `pav-templates`.
pub fn samples_dir() -> PathBuf {
    workspace_dir().join("pav-templates/src/samples")
}

/// Reads `examples/<example>/<file>`, panicking with the path on failure
/// (fixtures are part of the repository).
pub fn read_example(example: &str, file: &str) -> String {
    let path = examples_dir().join(example).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Parses a Kubernetes object from YAML, panicking with `what` on failure.
pub fn parse_object<T: k8s_openapi::serde::de::DeserializeOwned>(yaml: &str, what: &str) -> T {
    serde_yaml::from_str(yaml).unwrap_or_else(|err| panic!("{what}: {err}"))
}

/// A Kubernetes object read from a YAML file, with the file's path relative
/// to the workspace root (so the Python side can read the very same file).
#[derive(Debug, Clone)]
pub struct Fixture<T> {
    /// Path relative to the workspace root.
    pub path: String,
    /// The parsed object.
    pub object: T,
}

impl<T: k8s_openapi::serde::de::DeserializeOwned> Fixture<T> {
    /// Reads and parses `relative` (to the workspace root).
    pub fn load(relative: &str) -> Self {
        let full = workspace_dir().join(relative);
        let text = std::fs::read_to_string(&full)
            .unwrap_or_else(|err| panic!("{}: {err}", full.display()));
        Fixture {
            path: relative.to_owned(),
            object: parse_object(&text, relative),
        }
    }
}

fn example_file(example: &str, file: &str) -> String {
    format!("examples/{example}/{file}")
}

fn sample_file(file: &str) -> String {
    format!("pav-templates/src/samples/{file}")
}

/// What a phase's context is built from.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // a handful of fixtures, built once
pub enum ContextSpec {
    /// [`ValidationContext::dynamic`] of a claim and its StorageClass.
    Dynamic {
        /// The claim being provisioned.
        pvc: Fixture<PersistentVolumeClaim>,
        /// Its StorageClass.
        sc: Fixture<StorageClass>,
    },
    /// [`ValidationContext::static_pv`] of a user-created volume.
    Static {
        /// The PersistentVolume.
        pv: Fixture<PersistentVolume>,
    },
    /// [`CreationContext::new`] (creation and deletion).
    Creation {
        /// The claim being provisioned.
        pvc: Fixture<PersistentVolumeClaim>,
        /// Its StorageClass.
        sc: Fixture<StorageClass>,
    },
    /// [`StagingContext::new`] (staging and unstaging).
    Staging {
        /// The claim the volume is used through.
        pvc: Fixture<PersistentVolumeClaim>,
        /// The bound volume.
        pv: Fixture<PersistentVolume>,
        /// The node staging the volume.
        node: Fixture<Node>,
        /// Whether to stage read-only.
        read_only: bool,
    },
}

/// A built context, of the type its phase takes.
#[derive(Debug, Clone)]
pub enum Context {
    /// For validation.
    Validation(ValidationContext),
    /// For creation and deletion.
    Creation(CreationContext),
    /// For staging and unstaging.
    Staging(StagingContext),
}

impl ContextSpec {
    /// Builds the context, as the driver does for every request.
    pub fn build(&self) -> pav_templates::Result<Context> {
        Ok(match self {
            ContextSpec::Dynamic { pvc, sc } => {
                Context::Validation(ValidationContext::dynamic(&pvc.object, &sc.object)?)
            }
            ContextSpec::Static { pv } => {
                Context::Validation(ValidationContext::static_pv(&pv.object)?)
            }
            ContextSpec::Creation { pvc, sc } => {
                Context::Creation(CreationContext::new(&pvc.object, &sc.object)?)
            }
            ContextSpec::Staging {
                pvc,
                pv,
                node,
                read_only,
            } => Context::Staging(StagingContext::new(
                &pvc.object,
                &pv.object,
                &node.object,
                *read_only,
            )?),
        })
    }

    /// Short name of the context kind: `dynamic`, `static`, `creation` or
    /// `staging`.
    pub fn kind(&self) -> &'static str {
        match self {
            ContextSpec::Dynamic { .. } => "dynamic",
            ContextSpec::Static { .. } => "static",
            ContextSpec::Creation { .. } => "creation",
            ContextSpec::Staging { .. } => "staging",
        }
    }

    /// The spec as a JSON object naming the files it reads, for
    /// `jinja2_pav.py`: `{"kind": "staging", "pvc": "examples/...", ...}`.
    pub fn to_json(&self) -> String {
        let mut fields = vec![("kind", json_string(self.kind()))];
        match self {
            ContextSpec::Dynamic { pvc, sc } | ContextSpec::Creation { pvc, sc } => {
                fields.push(("pvc", json_string(&pvc.path)));
                fields.push(("sc", json_string(&sc.path)));
            }
            ContextSpec::Static { pv } => fields.push(("pv", json_string(&pv.path))),
            ContextSpec::Staging {
                pvc,
                pv,
                node,
                read_only,
            } => {
                fields.push(("pvc", json_string(&pvc.path)));
                fields.push(("pv", json_string(&pv.path)));
                fields.push(("node", json_string(&node.path)));
                fields.push(("readOnly", read_only.to_string()));
            }
        }
        json_object(&fields)
    }
}

/// An evaluated phase, as the typed `CompiledProvisioner::render` returns it.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // returned by value, as the driver does
pub enum Rendered {
    /// From `render::<Validation>`.
    Validation(ValidationPhase),
    /// From `render::<Creation>`.
    Creation(CreationPhase),
    /// From `render::<Deletion>` or `render::<Unstaging>`.
    OptionalPod(OptionalPodPhase),
    /// From `render::<Staging>`.
    Staging(StagingPhase),
}

/// One phase of one example, with what its context is built from.
#[derive(Debug, Clone)]
pub struct Case {
    /// Example directory name.
    pub example: &'static str,
    /// The phase rendered.
    pub phase: Phase,
    /// Label in tables: the phase name, plus a variant when the phase is
    /// measured more than once (`validation-static`, `staging-ro`).
    pub label: String,
    /// Objects the context is built from.
    pub context: ContextSpec,
    /// Whether the case is timed (`false`: checked against Jinja2 only).
    pub timed: bool,
}

impl Case {
    fn new(example: &'static str, phase: Phase, context: ContextSpec) -> Self {
        Case {
            example,
            phase,
            label: phase.name().to_owned(),
            context,
            timed: true,
        }
    }

    fn variant(mut self, suffix: &str, timed: bool) -> Self {
        self.label = format!("{}-{suffix}", self.phase.name());
        self.timed = timed;
        self
    }

    /// Renders the phase with the typed method the driver uses
    /// (`render::<Staging>` etc.), from a context built by [`ContextSpec::build`].
    pub fn render(
        &self,
        provisioner: &CompiledProvisioner,
        context: &Context,
    ) -> pav_templates::Result<Rendered> {
        Ok(match (self.phase, context) {
            (Phase::Validation, Context::Validation(c)) => {
                Rendered::Validation(provisioner.render::<Validation>(c)?)
            }
            (Phase::Creation, Context::Creation(c)) => {
                Rendered::Creation(provisioner.render::<Creation>(c)?)
            }
            (Phase::Deletion, Context::Creation(c)) => {
                Rendered::OptionalPod(provisioner.render::<Deletion>(c)?)
            }
            (Phase::Staging, Context::Staging(c)) => {
                Rendered::Staging(provisioner.render::<Staging>(c)?)
            }
            (Phase::Unstaging, Context::Staging(c)) => {
                Rendered::OptionalPod(provisioner.render::<Unstaging>(c)?)
            }
            (phase, context) => panic!("{phase} cannot be rendered with {context:?}"),
        })
    }

    /// Renders the phase's templates without the typed post-processing
    /// (`render_raw`): what Python's `evaluate_templates` returns.
    pub fn render_raw(
        &self,
        provisioner: &CompiledProvisioner,
        context: &Context,
    ) -> pav_templates::Result<k8s_openapi::serde_json::Value> {
        match context {
            Context::Validation(c) => provisioner.render_raw(self.phase, c.value()),
            Context::Creation(c) => provisioner.render_raw(self.phase, c.value()),
            Context::Staging(c) => provisioner.render_raw(self.phase, c.value()),
        }
    }

    /// [`render_raw`](Self::render_raw) as compact JSON, for the cross-check.
    pub fn render_raw_json(
        &self,
        provisioner: &CompiledProvisioner,
        context: &Context,
    ) -> pav_templates::Result<String> {
        Ok(self.render_raw(provisioner, context)?.to_string())
    }
}

/// One example: its provisioner source, compiled provisioner, and cases.
#[derive(Debug)]
pub struct Example {
    /// Directory name under `examples/`.
    pub name: &'static str,
    /// Text of `provisioner.yaml`.
    pub provisioner_yaml: String,
    /// The provisioner, compiled once.
    pub provisioner: CompiledProvisioner,
    /// The phases the example has, each with its context objects.
    pub cases: Vec<Case>,
}

impl Example {
    /// Loads `examples/<name>/`, compiles its provisioner and lists the
    /// phases it has. Panics on an unknown name or invalid example.
    ///
    /// Contexts: `hello-world` has no PersistentVolume file, so its staging
    /// uses the built-in samples (claim, volume and node); `cloud-bucket`
    /// stages its static volume `pv-static.yaml` through its claim; every
    /// staging uses the sample node.
    pub fn load(name: &'static str) -> Self {
        let provisioner_yaml = read_example(name, "provisioner.yaml");
        let provisioner = CompiledProvisioner::from_yaml(&provisioner_yaml)
            .unwrap_or_else(|err| panic!("examples/{name}/provisioner.yaml: {err}"));
        let node = || Fixture::<Node>::load(&sample_file("node.yaml"));
        let pvc = || Fixture::<PersistentVolumeClaim>::load(&example_file(name, "pvc.yaml"));
        let sc = || Fixture::<StorageClass>::load(&example_file(name, "storageclass.yaml"));
        let creation = || ContextSpec::Creation {
            pvc: pvc(),
            sc: sc(),
        };
        let dynamic = || ContextSpec::Dynamic {
            pvc: pvc(),
            sc: sc(),
        };
        let staging = |pvc, pv, read_only| ContextSpec::Staging {
            pvc,
            pv,
            node: node(),
            read_only,
        };
        let cases = match name {
            "hello-world" => {
                let sample_staging = |read_only| {
                    staging(
                        Fixture::load(&sample_file("pvc.yaml")),
                        Fixture::load(&sample_file("pv.yaml")),
                        read_only,
                    )
                };
                vec![
                    Case::new(name, Phase::Creation, creation()),
                    Case::new(name, Phase::Staging, sample_staging(false)),
                ]
            }
            "cloud-bucket" => {
                let pv = || Fixture::load(&example_file(name, "pv-static.yaml"));
                vec![
                    Case::new(name, Phase::Validation, dynamic()),
                    Case::new(name, Phase::Validation, ContextSpec::Static { pv: pv() })
                        .variant("static", false),
                    Case::new(name, Phase::Creation, creation()),
                    Case::new(name, Phase::Deletion, creation()),
                    Case::new(name, Phase::Staging, staging(pvc(), pv(), false)),
                    Case::new(name, Phase::Staging, staging(pvc(), pv(), true))
                        .variant("ro", false),
                ]
            }
            "block-encryption" => {
                let pv = || Fixture::load(&example_file(name, "pv.yaml"));
                vec![
                    Case::new(name, Phase::Validation, dynamic()),
                    Case::new(name, Phase::Creation, creation()),
                    Case::new(name, Phase::Deletion, creation()),
                    Case::new(name, Phase::Staging, staging(pvc(), pv(), false)),
                    Case::new(name, Phase::Staging, staging(pvc(), pv(), true))
                        .variant("ro", false),
                    Case::new(name, Phase::Unstaging, staging(pvc(), pv(), false)),
                ]
            }
            other => panic!("unknown example {other:?}"),
        };
        for case in &cases {
            assert!(
                provisioner.has_phase(case.phase),
                "{name} has no {} phase",
                case.phase
            );
        }
        Example {
            name,
            provisioner_yaml,
            provisioner,
            cases,
        }
    }

    /// All three examples.
    pub fn all() -> Vec<Example> {
        EXAMPLES.into_iter().map(Example::load).collect()
    }
}

/// `text` as a JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON object from keys and already-encoded JSON values.
pub fn json_object(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{}: {value}", json_string(key)))
        .collect();
    format!("{{{}}}", body.join(", "))
}

/// One entry of `benches/fixtures/semantics-probes.yaml`.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The entry's key.
    pub name: String,
    /// The template evaluated.
    pub template: String,
    /// Why pav differs from Jinja2 here on purpose, if it does.
    pub deliberate: Option<String>,
}

/// `benches/fixtures/semantics-probes.yaml`: single templates whose output
/// pav-templates and Jinja2 must agree on, in file order. An entry is
/// `name: template`, or `name: {template, deliberate: reason}`.
pub fn semantics_probes() -> Vec<Probe> {
    use serde_yaml::Value as Y;
    let path = workspace_dir().join("benches/fixtures/semantics-probes.yaml");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let Y::Mapping(map) = parse_object::<Y>(&text, "semantics-probes.yaml") else {
        panic!("semantics-probes.yaml must be a mapping of name to template");
    };
    let text_of = |value: Option<&Y>| value.and_then(Y::as_str).map(str::to_owned);
    map.into_iter()
        .map(|(key, value)| {
            let name = text_of(Some(&key)).unwrap_or_else(|| panic!("probe name {key:?}"));
            let (template, deliberate) = match &value {
                Y::String(template) => (Some(template.clone()), None),
                Y::Mapping(entry) => (
                    text_of(entry.get("template")),
                    text_of(entry.get("deliberate")),
                ),
                _ => (None, None),
            };
            let template = template.unwrap_or_else(|| panic!("probe {name}: no template"));
            Probe {
                name,
                template,
                deliberate,
            }
        })
        .collect()
}

/// The context the semantics probes are evaluated with: the block-encryption
/// example's staging context (its claim and volume, the sample node,
/// `readOnly` false).
pub fn probe_context_spec() -> ContextSpec {
    ContextSpec::Staging {
        pvc: Fixture::load(&example_file("block-encryption", "pvc.yaml")),
        pv: Fixture::load(&example_file("block-encryption", "pv.yaml")),
        node: Fixture::load(&sample_file("node.yaml")),
        read_only: false,
    }
}

/// Evaluates one template as the value of a pod annotation in a staging
/// phase: `Ok(value)` (a string, or anything when the template sets
/// `yaml`), or `Err(message)` from compilation or rendering.
pub fn render_probe(
    template: &str,
    context: &StagingContext,
) -> Result<k8s_openapi::serde_json::Value, String> {
    use k8s_openapi::serde_json::json;
    let object = json!({
        "apiVersion": "pav.albertofaria.github.io/v1alpha1",
        "kind": "PavProvisioner",
        "metadata": {"name": "probe"},
        "spec": {
            "provisioningModes": ["Static"],
            "volumeStaging": {"podTemplate": {"metadata": {"annotations": {"probe": template}}}},
        },
    });
    let provisioner = CompiledProvisioner::from_json(object).map_err(|err| err.to_string())?;
    let rendered = provisioner
        .render_raw(Phase::Staging, context.value())
        .map_err(|err| err.to_string())?;
    Ok(rendered["podTemplate"]["metadata"]["annotations"]["probe"].clone())
}

/// Runs `work` on a thread with the stack pav's own threads have
/// ([`pav_templates::engine::RENDER_STACK_BYTES`] and 2 MiB more, as
/// `pav/src/cli.rs` gives its runtime), so renders are timed as the drivers
/// run them. On a smaller stack every render maps a stack of its own first
/// (see `pav_templates::engine`), which costs more than a small render;
/// docs/performance.md gives both figures.
pub fn on_pav_thread<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new()
        .name("bench".into())
        .stack_size(pav_templates::engine::RENDER_STACK_BYTES + (2 << 20))
        .spawn(work)
        .expect("a thread with pav's stack size")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
