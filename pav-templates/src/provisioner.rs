//! Compile a PavProvisioner once; render its phases for every volume.
//!
//! Each module uses only the ones listed before it:
//!
//! | module | concern | uses (of these) |
//! |---|---|---|
//! | `node` | a spec subtree with its templates compiled (`Node`), template-free subtrees folded | |
//! | `message` | the engine's errors as messages, without its locations | |
//! | `check` | `pav check`: the spec as written against the guide's rules (the keys' table is [`crate::phase`]'s) | |
//! | `compile` | templates compiled once, each into a `Node` | `check`, `node`, `message` |
//! | `render` | a phase evaluated, its output bounded, `yaml` outputs parsed | `node`, `message` |
//!
//! This module puts them together: [`CompiledProvisioner::from_json`]
//! checks each phase, then compiles it; [`CompiledProvisioner::render`]
//! renders one, and the phase's own module (in [`crate::phase`]) decodes
//! what it rendered.

use std::cell::Cell;

use minijinja::Environment;
use minijinja::value::Value;
use serde_json::{Map, Value as Json};

use crate::context::{GET_PVC_NAMESPACES_GLOBAL, PhaseContext as _};
use crate::engine::{self, MAX_PHASE_OUTPUT_BYTES};
use crate::error::{Error, Location, Result};
use crate::model::{
    LifecycleMode, PavProvisioner, PopulatedKind, ProvisioningMode, SPEC_FIELDS, StagingPer,
};
use crate::phase::fields::{Fields, describe_json};
use crate::phase::{Phase, Section};
use crate::volume::DataSourceKind;
use crate::yaml::yaml_to_json;

mod check;
mod compile;
mod message;
mod node;
mod render;

use self::check::Checker;
use self::node::Node;

/// A PavProvisioner checked against the guide's rules, with every template
/// compiled once, ready to render any phase for any volume.
///
/// ```
/// use pav_templates::phase::Creation;
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
/// let creation = provisioner.render::<Creation>(&samples::creation_context()).unwrap();
/// assert_eq!(creation.capacity, Some(1 << 30));
/// ```
#[derive(Debug)]
pub struct CompiledProvisioner {
    name: String,
    provisioning_modes: Vec<ProvisioningMode>,
    get_pvc_namespaces: Vec<String>,
    env: Environment<'static>,
    data_sources: Vec<DataSourceKind>,
    lifecycle_modes: Vec<LifecycleMode>,
    staging_per: StagingPer,
    populated_from: Vec<PopulatedKind>,
    phases: [Option<Node>; Phase::ALL.len()],
    /// Per phase: the pod template's fields were all checked at compile
    /// time (no template in it can set `yaml`), so rendering needs only a
    /// plain conversion.
    pod_shape_checked: [bool; Phase::ALL.len()],
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
        let data_sources = checker.check_data_sources(spec_map.get("dataSources"));
        let lifecycle_modes = checker.check_lifecycle_modes(spec_map.get("volumeLifecycleModes"));
        let staging_per = checker.check_staging_per(spec_map.get("stagingPer"));
        checker.check_token_requests(spec_map.get("tokenRequests"), staging_per);
        let populated_from = checker.check_populated_from(
            spec_map.get("populatedFrom"),
            spec_map.contains_key(Phase::Population.field()),
        );
        for key in spec_map.keys() {
            if !SPEC_FIELDS.contains(&key.as_str()) {
                checker.problem_schema(&format!("spec.{key}"), "unknown field");
            }
        }
        let mut phases: [Option<Node>; Phase::ALL.len()] = Default::default();
        let mut pod_shape_checked = [false; Phase::ALL.len()];
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
                Some(value) => {
                    checker.check_phase(phase, &path, value);
                    Some(checker.compile(&path, value))
                }
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
        checker.check_needs(spec_map, modes.as_deref(), &data_sources);
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
            data_sources,
            lifecycle_modes,
            staging_per,
            populated_from,
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

    /// `spec.populatedFrom`: the kinds of object it fills new volumes from
    /// (none without `volumePopulation`).
    pub fn populated_from(&self) -> &[PopulatedKind] {
        &self.populated_from
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

    /// `spec.volumeLifecycleModes`: the kinds of volume served
    /// (`[Persistent]` without the field).
    pub fn lifecycle_modes(&self) -> &[LifecycleMode] {
        &self.lifecycle_modes
    }

    /// `spec.stagingPer`: one staging pod per client pod (`Pod`, without
    /// the field) or per node.
    pub fn staging_per(&self) -> StagingPer {
        self.staging_per
    }

    /// `spec.dataSources`: what claims may create volumes from; empty
    /// when not given (a claim with a data source is refused).
    pub fn data_sources(&self) -> &[DataSourceKind] {
        &self.data_sources
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

    /// Renders the phase `S` ([`phase::Staging`](crate::phase::Staging),
    /// ...) for one volume and decodes what its templates produced into
    /// what it evaluates to, with the guide's defaults applied and its
    /// rules checked; a key the phase does not have is refused.
    ///
    /// ```
    /// use pav_templates::phase::{Deletion, Staging};
    /// use pav_templates::{CompiledProvisioner, samples};
    /// let provisioner = CompiledProvisioner::from_yaml(r#"
    /// apiVersion: pav.albertofaria.github.io/v1alpha1
    /// kind: PavProvisioner
    /// metadata: { name: hello }
    /// spec:
    ///   provisioningModes: [Dynamic]
    ///   volumeCreation: { capacity: 1Gi }
    ///   volumeStaging: { podTemplate: { spec: { containers: [] } }, timeout: 2m }
    /// "#).unwrap();
    /// let staging = provisioner.render::<Staging>(&samples::staging_context()).unwrap();
    /// assert_eq!(staging.timeout, Some(std::time::Duration::from_secs(120)));
    /// // A phase the spec lacks evaluates to its defaults: here, no pod.
    /// let deletion = provisioner.render::<Deletion>(&samples::creation_context()).unwrap();
    /// assert_eq!(deletion.pod_template, None);
    /// ```
    pub fn render<S: Section>(&self, context: &S::Context) -> Result<S::Evaluated> {
        let mut fields = self.rendered_fields(S::DEFINITION.phase, context.value())?;
        let evaluated = S::decode(&mut fields)?;
        fields.finish()?;
        Ok(evaluated)
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
            provisioner: &self.name,
            phase,
            path,
            map,
            pod_shape_checked: self.pod_shape_checked[phase.index()],
            dynamic: self.provisioning_modes.contains(&ProvisioningMode::Dynamic),
        })
    }

    fn location(&self, path: &str, line: Option<usize>) -> Location {
        Location {
            provisioner: self.name.clone(),
            path: path.to_owned(),
            line,
        }
    }
}

#[cfg(test)]
mod tests;
