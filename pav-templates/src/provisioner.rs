//! Compile a PavProvisioner once; render its phases for every volume.

use std::cell::Cell;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind};
use serde::Deserialize as _;
use serde_json::{Map, Value as Json};

use crate::context::{
    CreationContext, GET_PVC_NAMESPACES_GLOBAL, StagingContext, ValidationContext,
};
use crate::duration::parse_timeout;
use crate::engine::{self, MAX_OUTPUT_BYTES, MAX_PHASE_OUTPUT_BYTES};
use crate::error::{Error, Location, Result};
use crate::model::{AccessMode, PavProvisioner, ProvisioningMode, VolumeMode};
use crate::phase::{CreationPhase, OptionalPodPhase, Phase, StagingPhase, ValidationPhase};
use crate::quantity::{Rounding, parse_bytes};
use crate::yaml::{MAX_YAML_ALIAS_EXPANSION_BYTES, yaml_to_json, yaml_to_json_within};

/// A spec subtree with its templates compiled.
#[derive(Debug)]
enum Node {
    /// No template inside: used as is.
    Constant(Json),
    /// A string field holding template syntax; the template's name in the
    /// environment is its field path.
    Template {
        path: Arc<str>,
        /// Whether the source mentions `yaml`: only then can it set the
        /// variable, so only then is the evaluation state kept and read.
        may_set_yaml: bool,
    },
    List(Vec<Node>),
    Map(Vec<(String, Node)>),
}

/// A PavProvisioner checked against the guide's rules, with every template
/// compiled once, ready to render any phase for any volume.
///
/// ```
/// use pav_templates::{CompiledProvisioner, samples};
/// let yaml = r#"
/// apiVersion: pav.albertofaria.github.io/v1alpha1
/// kind: PavProvisioner
/// metadata: { name: hello }
/// spec:
///   provisioningModes: [Dynamic]
///   volumeCreation:
///     capacity: "{{ requestedMinCapacity }}"
///   volumeStaging:
///     podTemplate:
///       spec:
///         restartPolicy: Never
///         containers:
///           - name: c
///             image: busybox
///             command: [sh, -c, "echo {{ handle | tobash }} > /pav/volume/id"]
/// "#;
/// let provisioner = CompiledProvisioner::from_yaml(yaml).unwrap();
/// let creation = provisioner.render_creation(&samples::creation_context()).unwrap();
/// assert_eq!(creation.capacity, Some(1 << 30));
/// ```
#[derive(Debug)]
pub struct CompiledProvisioner {
    name: String,
    provisioning_modes: Vec<ProvisioningMode>,
    get_pvc_namespaces: Vec<String>,
    env: Environment<'static>,
    phases: [Option<Node>; 5],
    /// Per phase: the pod template's fields were all checked at compile
    /// time (no template in it can set `yaml`), so rendering needs only a
    /// plain conversion.
    pod_shape_checked: [bool; 5],
}

/// Problems found in one PavProvisioner, all of them, in field order.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct Problems(pub Vec<Error>);

impl CompiledProvisioner {
    /// Parses a PavProvisioner from YAML (anchors and `<<` merge keys
    /// allowed, as in the original PaV examples), checks it and compiles it.
    pub fn from_yaml(text: &str) -> Result<Self, Problems> {
        let json = yaml_to_json(text).map_err(|message| {
            Problems(vec![Error::Schema {
                at: Location {
                    provisioner: "<unparsed>".into(),
                    path: "<document>".into(),
                    line: None,
                },
                message,
            }])
        })?;
        Self::from_json(json)
    }

    /// Checks and compiles an object already parsed into JSON values.
    pub fn from_json(object: Json) -> Result<Self, Problems> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Json::as_str)
            .unwrap_or("<unnamed>")
            .to_owned();
        let mut checker = Checker {
            name: name.clone(),
            problems: Vec::new(),
            env: engine::environment(),
        };
        checker.check_header(&object);
        let Some(spec) = object.get("spec") else {
            checker.problem_schema("spec", "is required");
            return Err(Problems(checker.problems));
        };
        let Some(spec_map) = spec.as_object() else {
            checker.problem_schema("spec", "must be an object");
            return Err(Problems(checker.problems));
        };
        let modes = checker.check_modes(spec_map.get("provisioningModes"));
        let get_pvc_namespaces = checker.check_get_pvc_namespaces(spec_map.get("getPvcNamespaces"));
        for key in spec_map.keys() {
            if !["provisioningModes", "getPvcNamespaces"].contains(&key.as_str())
                && !Phase::ALL.iter().any(|p| p.field() == key)
            {
                checker.problem_schema(&format!("spec.{key}"), "unknown field");
            }
        }
        let mut phases: [Option<Node>; 5] = Default::default();
        let mut pod_shape_checked = [false; 5];
        for phase in Phase::ALL {
            let path = format!("spec.{}", phase.field());
            let value = spec_map.get(phase.field());
            if let Some(modes) = &modes
                && value.is_some()
                && matches!(phase, Phase::Creation | Phase::Deletion)
                && !modes.contains(&ProvisioningMode::Dynamic)
            {
                checker.problem_rule(
                    &path,
                    "may only be specified if spec.provisioningModes contains Dynamic",
                );
            }
            if let Some(pod_template) = value.and_then(|v| v.get("podTemplate")) {
                pod_shape_checked[phase.index()] =
                    checker.check_pod_shape(&format!("{path}.podTemplate"), pod_template);
            }
            phases[phase.index()] = match value {
                Some(value) => Some(checker.check_phase(phase, &path, value)),
                None if phase == Phase::Staging => {
                    checker.problem_schema(
                        &path,
                        "is required (volumeStaging.podTemplate is mandatory)",
                    );
                    None
                }
                None => None,
            };
        }
        if let Some(modes) = &modes
            && modes.contains(&ProvisioningMode::Dynamic)
        {
            let creation = spec_map.get("volumeCreation");
            let fixed_lacks_both = match creation {
                None => true,
                Some(Json::Object(map)) => {
                    !map.contains_key("capacity") && !map.contains_key("podTemplate")
                }
                Some(_) => false,
            };
            if fixed_lacks_both {
                checker.problem_rule(
                    "spec.volumeCreation",
                    "must specify capacity or podTemplate (or both) when spec.provisioningModes contains Dynamic",
                );
            }
        }
        if !checker.problems.is_empty() {
            return Err(Problems(checker.problems));
        }
        let mut env = checker.env;
        env.add_global(
            GET_PVC_NAMESPACES_GLOBAL,
            Value::from(
                get_pvc_namespaces
                    .iter()
                    .map(|ns| Value::from(ns.as_str()))
                    .collect::<Vec<_>>(),
            ),
        );
        Ok(CompiledProvisioner {
            name,
            provisioning_modes: modes.unwrap_or_default(),
            get_pvc_namespaces,
            env,
            phases,
            pod_shape_checked,
        })
    }

    /// Checks and compiles a typed object.
    pub fn new(provisioner: &PavProvisioner) -> Result<Self, Problems> {
        let json = serde_json::to_value(provisioner).map_err(|err| {
            Problems(vec![Error::Schema {
                at: Location {
                    provisioner: provisioner.metadata.name.clone().unwrap_or_default(),
                    path: "<object>".into(),
                    line: None,
                },
                message: err.to_string(),
            }])
        })?;
        Self::from_json(json)
    }

    /// `metadata.name` of the provisioner.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `spec.provisioningModes`.
    pub fn provisioning_modes(&self) -> &[ProvisioningMode] {
        &self.provisioning_modes
    }

    /// `spec.getPvcNamespaces`: namespaces besides the claim's own in which
    /// `get_pvc` may read claims (`"*"`: any); empty when not given.
    pub fn get_pvc_namespaces(&self) -> &[String] {
        &self.get_pvc_namespaces
    }

    /// Whether the spec has the given phase at all.
    pub fn has_phase(&self, phase: Phase) -> bool {
        self.phases[phase.index()].is_some()
    }

    /// Renders a phase to plain JSON, without checking its shape: what the
    /// templates produced, for inspection and debugging.
    pub fn render_raw(&self, phase: Phase, context: &Value) -> Result<Json> {
        match &self.phases[phase.index()] {
            None => Ok(Json::Object(Map::new())),
            // Everything a template makes is made and dropped in here.
            Some(node) => engine::on_render_stack(|| {
                self.render_node(node, context, &Cell::new(MAX_PHASE_OUTPUT_BYTES))
            }),
        }
    }

    /// Renders `spec.volumeValidation` and applies the guide's defaults.
    pub fn render_validation(&self, context: &ValidationContext) -> Result<ValidationPhase> {
        let mut fields = self.rendered_fields(Phase::Validation, context.value())?;
        let volume_modes = match fields.take("volumeModes") {
            None => vec![VolumeMode::Filesystem],
            Some(value) => fields.enum_list("volumeModes", value)?,
        };
        let access_modes = match fields.take("accessModes") {
            None => AccessMode::ALL.to_vec(),
            Some(value) => fields.enum_list("accessModes", value)?,
        };
        let min_capacity = match fields.take("minCapacity") {
            None => 1,
            Some(value) => fields.capacity("minCapacity", value)?,
        };
        let max_capacity = match fields.take("maxCapacity") {
            None => None,
            Some(value) => Some(fields.capacity("maxCapacity", value)?),
        };
        if let Some(max) = max_capacity
            && min_capacity > max
        {
            return Err(Error::Rule {
                at: fields.location("maxCapacity"),
                message: format!(
                    "evaluates to {max} bytes, less than minCapacity ({min_capacity} bytes)"
                ),
            });
        }
        let pod_template = fields.pod_template()?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(ValidationPhase {
            volume_modes,
            access_modes,
            min_capacity,
            max_capacity,
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.volumeCreation`.
    pub fn render_creation(&self, context: &CreationContext) -> Result<CreationPhase> {
        let mut fields = self.rendered_fields(Phase::Creation, context.value())?;
        let handle = match fields.take("handle") {
            None => None,
            Some(Json::String(handle)) if !handle.is_empty() => Some(handle),
            Some(other) => {
                return Err(fields.evaluated(
                    "handle",
                    format!(
                        "must evaluate to a non-empty string, not {}",
                        describe_json(&other)
                    ),
                ));
            }
        };
        let capacity = match fields.take("capacity") {
            None => None,
            Some(value) => Some(fields.capacity("capacity", value)?),
        };
        let pod_template = fields.pod_template()?;
        if capacity.is_none()
            && pod_template.is_none()
            && self.provisioning_modes.contains(&ProvisioningMode::Dynamic)
        {
            return Err(Error::Rule {
                at: fields.location_of_phase(),
                message: "must specify capacity or podTemplate (or both) when spec.provisioningModes contains Dynamic".into(),
            });
        }
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(CreationPhase {
            handle,
            capacity,
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.volumeDeletion`.
    pub fn render_deletion(&self, context: &CreationContext) -> Result<OptionalPodPhase> {
        self.render_optional_pod(Phase::Deletion, context.value())
    }

    /// Renders `spec.volumeStaging`.
    pub fn render_staging(&self, context: &StagingContext) -> Result<StagingPhase> {
        let mut fields = self.rendered_fields(Phase::Staging, context.value())?;
        let pod_template = fields.pod_template()?.ok_or_else(|| Error::Evaluated {
            at: fields.location("podTemplate"),
            message: "is required".into(),
        })?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(StagingPhase {
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.volumeUnstaging`.
    pub fn render_unstaging(&self, context: &StagingContext) -> Result<OptionalPodPhase> {
        self.render_optional_pod(Phase::Unstaging, context.value())
    }

    fn render_optional_pod(&self, phase: Phase, context: &Value) -> Result<OptionalPodPhase> {
        let mut fields = self.rendered_fields(phase, context)?;
        let pod_template = fields.pod_template()?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(OptionalPodPhase {
            pod_template,
            timeout,
        })
    }

    fn rendered_fields(&self, phase: Phase, context: &Value) -> Result<Fields<'_>> {
        let path = format!("spec.{}", phase.field());
        let map = match self.render_raw(phase, context)? {
            Json::Object(map) => map,
            // A whole-phase template may evaluate to nothing.
            Json::Null => Map::new(),
            other => {
                return Err(Error::Evaluated {
                    at: self.location(&path, None),
                    message: format!("must evaluate to an object, not {}", describe_json(&other)),
                });
            }
        };
        Ok(Fields {
            provisioner: self,
            phase,
            path,
            map,
        })
    }

    fn location(&self, path: &str, line: Option<usize>) -> Location {
        Location {
            provisioner: self.name.clone(),
            path: path.to_owned(),
            line,
        }
    }

    /// `left`: what the phase's templates may still output, all together.
    fn render_node(&self, node: &Node, context: &Value, left: &Cell<usize>) -> Result<Json> {
        Ok(match node {
            Node::Constant(value) => value.clone(),
            Node::List(items) => Json::Array(
                items
                    .iter()
                    .map(|item| self.render_node(item, context, left))
                    .collect::<Result<_>>()?,
            ),
            Node::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(key, item)| Ok((key.clone(), self.render_node(item, context, left)?)))
                    .collect::<Result<_>>()?,
            ),
            Node::Template { path, may_set_yaml } => {
                self.render_template(path, *may_set_yaml, context, left)?
            }
        })
    }

    fn render_template(
        &self,
        path: &str,
        may_set_yaml: bool,
        context: &Value,
        left: &Cell<usize>,
    ) -> Result<Json> {
        // Dropped last, once nothing of the render is used any more.
        let _namespaces = engine::NamespaceTracking::start();
        let template = self
            .env
            .get_template(path)
            .map_err(|err| self.render_error(path, &err))?;
        // Output goes to a buffer that refuses to grow past the limit, so a
        // runaway loop stops at 1 MiB instead of when memory runs out; and
        // past what the phase's other templates left, so many fields cannot
        // add up to gigabytes either.
        let phase_left = left.get();
        let mut output = BoundedOutput {
            bytes: Vec::new(),
            limit: MAX_OUTPUT_BYTES.min(phase_left),
            overflowed: false,
        };
        let captured = template
            .render_captured_to(context, &mut output)
            .map_err(|err| {
                if !output.overflowed {
                    self.render_error(path, &err)
                } else if phase_left < MAX_OUTPUT_BYTES {
                    Error::Render {
                        at: self.location(path, err.line()),
                        message: format!(
                            "the templates of spec.{} output more than {MAX_PHASE_OUTPUT_BYTES} bytes in all",
                            path.split('.').nth(1).unwrap_or_default()
                        ),
                    }
                } else {
                    Error::Render {
                        at: self.location(path, err.line()),
                        message: format!(
                            "output is more than the limit of {MAX_OUTPUT_BYTES} bytes"
                        ),
                    }
                }
            })?;
        left.set(phase_left - output.bytes.len());
        // Written from `&str` pieces only, so always UTF-8.
        let output = String::from_utf8(output.bytes).map_err(|err| Error::Render {
            at: self.location(path, None),
            message: format!("output is not UTF-8: {err}"),
        })?;
        if !may_set_yaml {
            return Ok(Json::String(output));
        }
        let yaml = match captured.state().lookup("yaml") {
            None => false,
            Some(value) => match value.kind() {
                ValueKind::Bool => value.is_true(),
                other => {
                    return Err(Error::Render {
                        at: self.location(path, None),
                        message: format!("variable `yaml` must be true or false, not {other}"),
                    });
                }
            },
        };
        if !yaml {
            return Ok(Json::String(output));
        }
        // Aliases share the phase's budget too, so many small `yaml = true`
        // fields cannot each expand by the whole allowance.
        let left_now = left.get();
        let (json, expanded) =
            yaml_to_json_within(&output, MAX_YAML_ALIAS_EXPANSION_BYTES.min(left_now)).map_err(
                |message| Error::Yaml {
                    at: self.location(path, None),
                    message,
                },
            )?;
        left.set(left_now - expanded);
        Ok(json)
    }

    fn render_error(&self, path: &str, err: &minijinja::Error) -> Error {
        Error::Render {
            at: self.location(path, err.line()),
            message: jinja_message(err),
        }
    }
}

/// A template's output, refused past `limit` bytes.
struct BoundedOutput {
    bytes: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + data.len() > self.limit {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit reached"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The rendered keys of one phase, taken out one by one so that leftovers
/// are reported as unknown fields.
struct Fields<'a> {
    provisioner: &'a CompiledProvisioner,
    phase: Phase,
    path: String,
    map: Map<String, Json>,
}

impl Fields<'_> {
    fn take(&mut self, key: &str) -> Option<Json> {
        // An explicit null means "not specified", as in the original PaV.
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn location(&self, key: &str) -> Location {
        self.provisioner
            .location(&format!("{}.{key}", self.path), None)
    }

    fn location_of_phase(&self) -> Location {
        self.provisioner.location(&self.path, None)
    }

    fn evaluated(&self, key: &str, message: String) -> Error {
        Error::Evaluated {
            at: self.location(key),
            message,
        }
    }

    fn enum_list<T: serde::de::DeserializeOwned>(&self, key: &str, value: Json) -> Result<Vec<T>> {
        let Json::Array(items) = value else {
            return Err(self.evaluated(
                key,
                format!("must evaluate to a list, not {}", describe_json(&value)),
            ));
        };
        if items.is_empty() {
            return Err(self.evaluated(key, "must not be empty".into()));
        }
        let mut out: Vec<T> = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let text = describe_json(&item);
            let parsed = serde_json::from_value(item).map_err(|_| Error::Evaluated {
                at: self
                    .provisioner
                    .location(&format!("{}.{key}[{index}]", self.path), None),
                message: format!("{text} is not one of {}", allowed_values(key)),
            })?;
            out.push(parsed);
        }
        Ok(out)
    }

    fn capacity(&self, key: &str, value: Json) -> Result<u64> {
        let rounding = capacity_rounding(key);
        let bytes = match &value {
            Json::String(text) => {
                parse_bytes(text, rounding).map_err(|err| self.evaluated(key, err.to_string()))?
            }
            Json::Number(n) => match (n.as_u64(), n.as_f64()) {
                (Some(int), _) => int,
                (None, Some(float)) if float >= 0.0 => parse_bytes(&n.to_string(), rounding)
                    .map_err(|err| self.evaluated(key, err.to_string()))?,
                _ => {
                    return Err(
                        self.evaluated(key, format!("must be a positive capacity, not {n}"))
                    );
                }
            },
            other => {
                return Err(self.evaluated(
                    key,
                    format!("must evaluate to a quantity, not {}", describe_json(other)),
                ));
            }
        };
        if bytes == 0 {
            return Err(self.evaluated(key, "must be a positive capacity, not 0 bytes".into()));
        }
        Ok(bytes)
    }

    fn pod_template(&mut self) -> Result<Option<PodTemplateSpec>> {
        let Some(value) = self.take("podTemplate") else {
            return Ok(None);
        };
        let path = format!("{}.podTemplate", self.path);
        let shape_checked = self.provisioner.pod_shape_checked[self.phase.index()];
        pod_template_from_json(value, shape_checked)
            .map(Some)
            .map_err(|(sub, message)| Error::Evaluated {
                at: self.provisioner.location(&format!("{path}{sub}"), None),
                message,
            })
    }

    fn timeout(&mut self) -> Result<Option<std::time::Duration>> {
        match self.take("timeout") {
            None => Ok(None),
            Some(Json::String(text)) => parse_timeout(&text)
                .map(Some)
                .map_err(|message| self.evaluated("timeout", message)),
            Some(Json::Number(n)) => parse_timeout(&n.to_string())
                .map(Some)
                .map_err(|message| self.evaluated("timeout", message)),
            Some(other) => Err(self.evaluated(
                "timeout",
                format!(
                    "must evaluate to a duration such as 5m, not {}",
                    describe_json(&other)
                ),
            )),
        }
    }

    fn finish(self) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(Error::Evaluated {
                at: self.location(key),
                message: format!("unknown field (allowed: {})", self.phase.keys().join(", ")),
            }),
        }
    }
}

fn allowed_values(key: &str) -> &'static str {
    match key {
        "volumeModes" => "Filesystem, Block",
        _ => "ReadWriteOnce, ReadOnlyMany, ReadWriteMany",
    }
}

/// Converts an evaluated pod template, naming the first field Kubernetes
/// would not accept: a wrong type, or a field PodTemplateSpec does not have
/// (typos such as `comand` would otherwise vanish silently).
fn pod_template_from_json(
    value: Json,
    shape_checked: bool,
) -> std::result::Result<PodTemplateSpec, (String, String)> {
    // The common case: a template whose keys were checked at compile time.
    if shape_checked && let Ok(template) = PodTemplateSpec::deserialize(&value) {
        return Ok(template);
    }
    let template: PodTemplateSpec = serde_path_to_error::deserialize(&value).map_err(|err| {
        let path = err.path().to_string();
        let sub = if path == "." {
            String::new()
        } else {
            format!(".{path}")
        };
        (sub, err.into_inner().to_string())
    })?;
    let round_trip = serde_json::to_value(&template).unwrap_or(Json::Null);
    if let Some(unknown) = first_dropped_field(&value, &round_trip, String::new()) {
        return Err((unknown, "unknown field".to_owned()));
    }
    Ok(template)
}

fn first_dropped_field(input: &Json, kept: &Json, path: String) -> Option<String> {
    match (input, kept) {
        (Json::Object(input), Json::Object(kept)) => {
            input.iter().find_map(|(key, value)| match kept.get(key) {
                None if !value.is_null() && !is_empty_container(value) => {
                    Some(format!("{path}.{key}"))
                }
                None => None,
                Some(kept_value) => first_dropped_field(value, kept_value, format!("{path}.{key}")),
            })
        }
        (Json::Array(input), Json::Array(kept)) => input
            .iter()
            .zip(kept)
            .enumerate()
            .find_map(|(index, (a, b))| first_dropped_field(a, b, format!("{path}[{index}]"))),
        _ => None,
    }
}

fn is_empty_container(value: &Json) -> bool {
    matches!(value, Json::Object(m) if m.is_empty())
        || matches!(value, Json::Array(a) if a.is_empty())
}

/// Walks the spec as written, collecting every problem and compiling every
/// template.
struct Checker {
    name: String,
    problems: Vec<Error>,
    env: Environment<'static>,
}

impl Checker {
    fn at(&self, path: &str, line: Option<usize>) -> Location {
        Location {
            provisioner: self.name.clone(),
            path: path.to_owned(),
            line,
        }
    }

    fn problem_schema(&mut self, path: &str, message: &str) {
        self.problems.push(Error::Schema {
            at: self.at(path, None),
            message: message.to_owned(),
        });
    }

    fn problem_rule(&mut self, path: &str, message: &str) {
        self.problems.push(Error::Rule {
            at: self.at(path, None),
            message: message.to_owned(),
        });
    }

    fn check_header(&mut self, object: &Json) {
        let Some(map) = object.as_object() else {
            self.problem_schema("<document>", "must be an object");
            return;
        };
        let api_version = format!("{}/{}", crate::model::GROUP, crate::model::VERSION);
        match map.get("apiVersion").and_then(Json::as_str) {
            Some(v) if v == api_version => {}
            Some(other) => self.problem_schema(
                "apiVersion",
                &format!("is {other:?}, expected {api_version:?}"),
            ),
            None => self.problem_schema("apiVersion", &format!("is required ({api_version})")),
        }
        match map.get("kind").and_then(Json::as_str) {
            Some("PavProvisioner") => {}
            Some(other) => self.problem_schema(
                "kind",
                &format!("is {other:?}, expected \"PavProvisioner\""),
            ),
            None => self.problem_schema("kind", "is required (PavProvisioner)"),
        }
        match object.pointer("/metadata/name").and_then(Json::as_str) {
            None => self.problem_schema("metadata.name", "is required"),
            Some(name) if !is_dns_label(name) => self.problem_schema(
                "metadata.name",
                "must be a DNS label: at most 63 lowercase alphanumerics or '-', starting and ending with an alphanumeric",
            ),
            Some(_) => {}
        }
        for key in map.keys() {
            if !["apiVersion", "kind", "metadata", "spec", "status"].contains(&key.as_str()) {
                self.problem_schema(key, "unknown field");
            }
        }
    }

    fn check_modes(&mut self, value: Option<&Json>) -> Option<Vec<ProvisioningMode>> {
        const PATH: &str = "spec.provisioningModes";
        let Some(value) = value else {
            self.problem_schema(PATH, "is required (a list of Dynamic and/or Static)");
            return None;
        };
        let Some(items) = value.as_array() else {
            self.problem_schema(
                PATH,
                "must be a list of Dynamic and/or Static (it is not a template)",
            );
            return None;
        };
        if items.is_empty() {
            self.problem_schema(PATH, "must not be empty");
        }
        let mut modes = Vec::new();
        for (index, item) in items.iter().enumerate() {
            match serde_json::from_value::<ProvisioningMode>(item.clone()) {
                Ok(mode) if modes.contains(&mode) => {
                    self.problem_schema(&format!("{PATH}[{index}]"), "is listed twice");
                }
                Ok(mode) => modes.push(mode),
                Err(_) => self.problem_schema(
                    &format!("{PATH}[{index}]"),
                    &format!("{} is not one of Dynamic, Static", describe_json(item)),
                ),
            }
        }
        Some(modes)
    }

    /// `spec.getPvcNamespaces`: absent, or a list of distinct namespace
    /// names (DNS labels) and `"*"`. Not a template: it bounds what
    /// templates may read.
    fn check_get_pvc_namespaces(&mut self, value: Option<&Json>) -> Vec<String> {
        const PATH: &str = "spec.getPvcNamespaces";
        let items = match value {
            None | Some(Json::Null) => return Vec::new(),
            Some(Json::Array(items)) => items,
            Some(other) => {
                self.problem_schema(
                    PATH,
                    &format!(
                        "must be a list of namespace names or \"*\" (it is not a template), not {}",
                        describe_json(other)
                    ),
                );
                return Vec::new();
            }
        };
        let mut namespaces: Vec<String> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_path = format!("{PATH}[{index}]");
            match item.as_str() {
                Some(ns) if namespaces.iter().any(|seen| seen == ns) => {
                    self.problem_schema(&item_path, "is listed twice");
                }
                Some(ns) if ns == "*" || is_dns_label(ns) => namespaces.push(ns.to_owned()),
                _ => self.problem_schema(
                    &item_path,
                    &format!(
                        "{} is not a namespace name (a DNS label) or \"*\"",
                        describe_json(item)
                    ),
                ),
            }
        }
        namespaces
    }

    fn check_phase(&mut self, phase: Phase, path: &str, value: &Json) -> Node {
        if let Json::Object(map) = value {
            for (key, item) in map {
                let item_path = format!("{path}.{key}");
                if !phase.keys().contains(&key.as_str()) {
                    self.problem_schema(
                        &item_path,
                        &format!("unknown field (allowed: {})", phase.keys().join(", ")),
                    );
                    continue;
                }
                self.check_literal(key, &item_path, item);
            }
            if phase == Phase::Staging && !map.contains_key("podTemplate") {
                self.problem_schema(&format!("{path}.podTemplate"), "is required");
            }
            if phase == Phase::Validation
                && let (Some(min), Some(max)) = (map.get("minCapacity"), map.get("maxCapacity"))
                && let (Some(min), Some(max)) = (
                    literal_bytes(min, Rounding::Down),
                    literal_bytes(max, Rounding::Up),
                )
                && min > max
            {
                self.problem_rule(
                    &format!("{path}.maxCapacity"),
                    &format!("is {max} bytes, less than minCapacity ({min} bytes)"),
                );
            }
        } else if !value.is_string() {
            self.problem_schema(
                path,
                &format!(
                    "must be an object or a template, not {}",
                    describe_json(value)
                ),
            );
        }
        self.compile(path, value)
    }

    /// Checks fields whose value is written literally (no template syntax),
    /// so mistakes surface at `pav check` rather than at the first volume.
    fn check_literal(&mut self, key: &str, path: &str, value: &Json) {
        if value.as_str().is_some_and(has_template_syntax) {
            return;
        }
        match key {
            "volumeModes" | "accessModes" => match value {
                Json::Array(items) => {
                    if items.is_empty() {
                        self.problem_schema(path, "must not be empty");
                    }
                    for (index, item) in items.iter().enumerate() {
                        if item.as_str().is_some_and(has_template_syntax) {
                            continue;
                        }
                        let valid = if key == "volumeModes" {
                            serde_json::from_value::<VolumeMode>(item.clone()).is_ok()
                        } else {
                            serde_json::from_value::<AccessMode>(item.clone()).is_ok()
                        };
                        if !valid {
                            self.problem_schema(
                                &format!("{path}[{index}]"),
                                &format!(
                                    "{} is not one of {}",
                                    describe_json(item),
                                    allowed_values(key)
                                ),
                            );
                        }
                    }
                }
                other => self.problem_schema(
                    path,
                    &format!("must be a list or a template, not {}", describe_json(other)),
                ),
            },
            "minCapacity" | "maxCapacity" | "capacity" => {
                // Rounded as rendering rounds it, so `pav check` accepts
                // exactly what renders.
                let rounding = capacity_rounding(key);
                match value {
                    Json::String(text) => {
                        if let Err(err) = parse_bytes(text, rounding) {
                            self.problem_schema(path, &err.to_string());
                        } else if literal_bytes(value, rounding) == Some(0) {
                            self.problem_schema(
                                path,
                                "must be a positive capacity (at least 1 byte once rounded)",
                            );
                        }
                    }
                    Json::Number(n) if number_bytes(n, rounding).is_some_and(|n| n > 0) => {}
                    other => self.problem_schema(
                        path,
                        &format!("must be a positive quantity, not {}", describe_json(other)),
                    ),
                }
            }
            "handle" => {
                if value.as_str() == Some("") {
                    self.problem_schema(path, "must not be empty");
                } else if !value.is_string() {
                    self.problem_schema(
                        path,
                        &format!("must be a string, not {}", describe_json(value)),
                    );
                }
            }
            "timeout" => {
                let text = match value {
                    Json::String(text) => Some(text.clone()),
                    Json::Number(n) => Some(n.to_string()),
                    _ => None,
                };
                match text.map(|t| parse_timeout(&t)) {
                    Some(Ok(_)) => {}
                    Some(Err(message)) => self.problem_schema(path, &message),
                    None => self.problem_schema(
                        path,
                        &format!(
                            "must be a duration such as 5m, not {}",
                            describe_json(value)
                        ),
                    ),
                }
            }
            "podTemplate" if !value.is_object() && !value.is_string() => {
                self.problem_schema(
                    path,
                    &format!(
                        "must be a PodTemplateSpec object or a template, not {}",
                        describe_json(value)
                    ),
                );
            }
            _ => {}
        }
    }

    /// Checks a pod template's fields before any volume exists. Possible
    /// unless a template in it may set `yaml` (then its shape is known only
    /// after evaluation): templates evaluate to strings, so the tree with
    /// each template replaced by `""` has the evaluated shape. Returns
    /// whether the shape was checked and found valid.
    fn check_pod_shape(&mut self, path: &str, pod_template: &Json) -> bool {
        if !pod_template.is_object() || may_become_yaml(pod_template) {
            return false;
        }
        match pod_template_from_json(blank_templates(pod_template), false) {
            Ok(_) => true,
            Err((sub, message)) => {
                let message = if message == "unknown field" {
                    message
                } else {
                    format!(
                        "{message} (a template here yields a string; add `{{% set yaml = true %}}` for other types)"
                    )
                };
                self.problem_schema(&format!("{path}{sub}"), &message);
                false
            }
        }
    }

    fn compile(&mut self, path: &str, value: &Json) -> Node {
        match value {
            Json::String(source) => {
                if !has_template_syntax(source) {
                    // Still evaluated, so whitespace rules apply exactly as
                    // for templates (a single trailing newline is dropped).
                    return match self.env.render_str(&engine::normalize_newlines(source), ()) {
                        Ok(text) => Node::Constant(Json::String(text)),
                        Err(err) => {
                            self.problems.push(Error::Syntax {
                                at: self.at(path, err.line()),
                                message: jinja_message(&err),
                            });
                            Node::Constant(Json::Null)
                        }
                    };
                }
                // Before minijinja parses it: its parser and compiler recurse
                // once per level of an operator chain.
                if let Err(too_deep) = engine::nesting::check_expression_depth(source) {
                    self.problems.push(Error::Syntax {
                        at: self.at(path, Some(too_deep.line)),
                        message: too_deep.to_string(),
                    });
                    return Node::Constant(Json::Null);
                }
                match self
                    .env
                    .add_template_owned(path.to_owned(), engine::normalize_newlines(source))
                {
                    Ok(()) => Node::Template {
                        path: Arc::from(path),
                        may_set_yaml: source.contains("yaml"),
                    },
                    Err(err) => {
                        self.problems.push(Error::Syntax {
                            at: self.at(path, err.line()),
                            message: jinja_message(&err),
                        });
                        Node::Constant(Json::Null)
                    }
                }
            }
            Json::Array(items) => {
                let nodes: Vec<Node> = items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| self.compile(&format!("{path}[{index}]"), item))
                    .collect();
                collapse(nodes.into_iter().map(|n| (None, n)).collect(), false)
            }
            Json::Object(map) => {
                let nodes: Vec<(Option<String>, Node)> = map
                    .iter()
                    .map(|(key, item)| {
                        (
                            Some(key.clone()),
                            self.compile(&format!("{path}.{key}"), item),
                        )
                    })
                    .collect();
                collapse(nodes, true)
            }
            scalar => Node::Constant(scalar.clone()),
        }
    }
}

/// Folds a list or map whose children are all constant into one constant,
/// so rendering copies template-free subtrees in one step.
fn collapse(children: Vec<(Option<String>, Node)>, is_map: bool) -> Node {
    if children.iter().all(|(_, n)| matches!(n, Node::Constant(_))) {
        let constants = children.into_iter().map(|(key, node)| match node {
            Node::Constant(value) => (key, value),
            _ => unreachable!("checked above"),
        });
        return Node::Constant(if is_map {
            Json::Object(constants.map(|(k, v)| (k.unwrap_or_default(), v)).collect())
        } else {
            Json::Array(constants.map(|(_, v)| v).collect())
        });
    }
    if is_map {
        Node::Map(
            children
                .into_iter()
                .map(|(k, n)| (k.unwrap_or_default(), n))
                .collect(),
        )
    } else {
        Node::List(children.into_iter().map(|(_, n)| n).collect())
    }
}

fn may_become_yaml(value: &Json) -> bool {
    match value {
        Json::String(s) => has_template_syntax(s) && s.contains("yaml"),
        Json::Array(items) => items.iter().any(may_become_yaml),
        Json::Object(map) => map.values().any(may_become_yaml),
        _ => false,
    }
}

fn blank_templates(value: &Json) -> Json {
    match value {
        Json::String(s) if has_template_syntax(s) => Json::String(String::new()),
        Json::Array(items) => Json::Array(items.iter().map(blank_templates).collect()),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), blank_templates(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn has_template_syntax(source: &str) -> bool {
    source.contains("{{") || source.contains("{%") || source.contains("{#")
}

fn literal_bytes(value: &Json, rounding: Rounding) -> Option<u64> {
    match value {
        Json::String(text) if !has_template_syntax(text) => parse_bytes(text, rounding).ok(),
        Json::Number(n) => number_bytes(n, rounding),
        _ => None,
    }
}

/// A YAML number as bytes: `1e3` is a float in YAML 1.2 but a quantity to
/// the user, so integral and fractional floats are accepted and rounded.
fn number_bytes(n: &serde_json::Number, rounding: Rounding) -> Option<u64> {
    match (n.as_u64(), n.as_f64()) {
        (Some(int), _) => Some(int),
        (None, Some(float)) if float.is_finite() && float >= 0.0 => {
            parse_bytes(&float.to_string(), rounding).ok()
        }
        _ => None,
    }
}

fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn describe_json(value: &Json) -> String {
    match value {
        Json::Null => "null".into(),
        Json::Bool(b) => format!("boolean {b}"),
        Json::Number(n) => format!("number {n}"),
        Json::String(s) => format!("{s:?}"),
        Json::Array(_) => "a list".into(),
        Json::Object(_) => "an object".into(),
    }
}

/// The engine's message without its own location (we print ours).
fn jinja_message(err: &minijinja::Error) -> String {
    let mut message = match (err.kind(), err.detail()) {
        (ErrorKind::OutOfFuel, _) => {
            "evaluation budget exhausted (does the template loop without end?)".to_owned()
        }
        (ErrorKind::UndefinedError, None) => {
            "undefined value (something undefined was indexed or called; test it with `is defined` or give it a `default`)".to_owned()
        }
        (_, Some(detail)) => detail.to_owned(),
        (kind, None) => kind.to_string(),
    };
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    message
}

/// How the capacity field `key` rounds a fraction of a byte: a volume's
/// least and given capacity down, its greatest up, so that rounding never
/// asks for more than the claim allows. `pav check` and rendering share it.
fn capacity_rounding(key: &str) -> Rounding {
    if key == "maxCapacity" {
        Rounding::Up
    } else {
        Rounding::Down
    }
}

#[cfg(test)]
mod tests;
