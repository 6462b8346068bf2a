//! Compile a PavProvisioner once; render its phases for every volume.
//!
//! Each module uses only the ones listed before it:
//!
//! | module | concern | uses (of these) |
//! |---|---|---|
//! | `node` | a spec subtree with its templates compiled (`Node`), template-free subtrees folded | |
//! | `message` | the engine's errors as messages, without its locations | |
//! | `fields` | evaluated keys decoded into their types; the one table of what each key holds | |
//! | `check` | `pav check`: the spec as written against the guide's rules | `fields` |
//! | `compile` | templates compiled once, each into a `Node` | `check`, `node`, `message` |
//! | `render` | a phase evaluated, its output bounded, `yaml` outputs parsed | `node`, `message` |
//!
//! This module puts them together: [`CompiledProvisioner::from_json`]
//! checks each phase, then compiles it; the `render_*` methods render it.

use std::cell::Cell;

use minijinja::Environment;
use minijinja::value::Value;
use serde_json::{Map, Value as Json};

use crate::context::{
    CapacityContext, CreationContext, ExpansionContext, GET_PVC_NAMESPACES_GLOBAL,
    GroupSnapshotContext, ModificationContext, SnapshotContext, StagingContext, ValidationContext,
};
use crate::engine::{self, MAX_PHASE_OUTPUT_BYTES};
use crate::error::{Error, Location, Result};
use crate::model::{
    AccessMode, DataSourceKind, LifecycleMode, PavProvisioner, ProvisioningMode, VolumeMode,
};
use crate::phase::{
    CapacityPhase, CreationPhase, ExpansionPhase, GroupSnapshotCreationPhase, HealthPhase,
    ModificationPhase, OptionalPodPhase, Phase, SnapshotCreationPhase, StagingPhase,
    ValidationPhase,
};
use crate::yaml::yaml_to_json;

mod check;
mod compile;
mod fields;
mod message;
mod node;
mod render;

use self::check::Checker;
use self::fields::{Fields, describe_json};
use self::node::Node;

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
    data_sources: Vec<DataSourceKind>,
    lifecycle_modes: Vec<LifecycleMode>,
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
        const NOT_PHASES: [&str; 4] = [
            "provisioningModes",
            "getPvcNamespaces",
            "dataSources",
            "volumeLifecycleModes",
        ];
        for key in spec_map.keys() {
            if !NOT_PHASES.contains(&key.as_str()) && !Phase::ALL.iter().any(|p| p.field() == key) {
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

    /// `spec.volumeLifecycleModes`: the kinds of volume served
    /// (`[Persistent]` without the field).
    pub fn lifecycle_modes(&self) -> &[LifecycleMode] {
        &self.lifecycle_modes
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

    /// Renders `spec.volumeValidation` and applies the guide's defaults.
    pub fn render_validation(&self, context: &ValidationContext) -> Result<ValidationPhase> {
        let mut fields = self.rendered_fields(Phase::Validation, context.value())?;
        let volume_modes = match fields.take("volumeModes") {
            None => vec![VolumeMode::Filesystem],
            Some(value) => fields.enum_list("volumeModes", value)?,
        };
        let access_modes = match fields.take("accessModes") {
            None => AccessMode::DEFAULT.to_vec(),
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
        let handle = fields.handle("handle")?;
        let capacity = match fields.take("capacity") {
            None => None,
            Some(value) => Some(fields.capacity("capacity", value)?),
        };
        let topology = fields.topology()?;
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
            topology,
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
        self.render_mandatory_pod(Phase::Staging, context.value())
    }

    fn render_mandatory_pod(&self, phase: Phase, context: &Value) -> Result<StagingPhase> {
        let mut fields = self.rendered_fields(phase, context)?;
        let pod_template = fields.mandatory_pod_template()?;
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

    /// Renders `spec.volumeExpansion`.
    pub fn render_expansion(&self, context: &ExpansionContext) -> Result<ExpansionPhase> {
        let mut fields = self.rendered_fields(Phase::Expansion, context.value())?;
        let capacity = match fields.take("capacity") {
            None => None,
            Some(value) => Some(fields.capacity("capacity", value)?),
        };
        let pod_template = fields.pod_template()?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(ExpansionPhase {
            capacity,
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.volumeNodeExpansion`: its pod is mandatory, as the
    /// staging pod is.
    pub fn render_node_expansion(&self, context: &StagingContext) -> Result<StagingPhase> {
        self.render_mandatory_pod(Phase::NodeExpansion, context.value())
    }

    /// Renders `spec.snapshotCreation`.
    pub fn render_snapshot_creation(
        &self,
        context: &SnapshotContext,
    ) -> Result<SnapshotCreationPhase> {
        let mut fields = self.rendered_fields(Phase::SnapshotCreation, context.value())?;
        let handle = fields.handle("handle")?;
        let size = match fields.take("size") {
            None => None,
            Some(value) => Some(fields.capacity("size", value)?),
        };
        let pod_template = fields.pod_template()?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(SnapshotCreationPhase {
            handle,
            size,
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.snapshotDeletion`.
    pub fn render_snapshot_deletion(&self, context: &SnapshotContext) -> Result<OptionalPodPhase> {
        self.render_optional_pod(Phase::SnapshotDeletion, context.value())
    }

    /// Renders `spec.groupSnapshotCreation`: its pod is mandatory.
    pub fn render_group_snapshot_creation(
        &self,
        context: &GroupSnapshotContext,
    ) -> Result<GroupSnapshotCreationPhase> {
        let mut fields = self.rendered_fields(Phase::GroupSnapshotCreation, context.value())?;
        let handle = fields.handle("handle")?;
        let pod_template = fields.mandatory_pod_template()?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(GroupSnapshotCreationPhase {
            handle,
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.groupSnapshotDeletion`.
    pub fn render_group_snapshot_deletion(
        &self,
        context: &GroupSnapshotContext,
    ) -> Result<OptionalPodPhase> {
        self.render_optional_pod(Phase::GroupSnapshotDeletion, context.value())
    }

    /// Renders `spec.storageCapacity`: `availableCapacity` or a pod (or
    /// both) must be given.
    pub fn render_capacity(&self, context: &CapacityContext) -> Result<CapacityPhase> {
        let mut fields = self.rendered_fields(Phase::Capacity, context.value())?;
        let available_capacity = match fields.take("availableCapacity") {
            None => None,
            Some(value) => Some(fields.bytes("availableCapacity", value)?),
        };
        let maximum_volume_size = match fields.take("maximumVolumeSize") {
            None => None,
            Some(value) => Some(fields.capacity("maximumVolumeSize", value)?),
        };
        let pod_template = fields.pod_template()?;
        if available_capacity.is_none() && pod_template.is_none() {
            return Err(Error::Rule {
                at: fields.location_of_phase(),
                message: "must specify availableCapacity or podTemplate (or both)".into(),
            });
        }
        let timeout = fields.timeout()?;
        let cache_for = fields.duration("cacheFor")?;
        fields.finish()?;
        Ok(CapacityPhase {
            available_capacity,
            maximum_volume_size,
            pod_template,
            timeout,
            cache_for,
        })
    }

    /// Renders `spec.volumeModification`: a `refusal` (or a template
    /// that fails) refuses the new parameters before anything changed.
    pub fn render_modification(&self, context: &ModificationContext) -> Result<ModificationPhase> {
        let mut fields = self.rendered_fields(Phase::Modification, context.value())?;
        let refusal = fields.message("refusal")?;
        let pod_template = fields.pod_template()?;
        let timeout = fields.timeout()?;
        fields.finish()?;
        Ok(ModificationPhase {
            refusal,
            pod_template,
            timeout,
        })
    }

    /// Renders `spec.volumeAttach`, with the staging context of the volume
    /// and the node it is attached to: its pod is mandatory.
    pub fn render_attach(&self, context: &StagingContext) -> Result<StagingPhase> {
        self.render_mandatory_pod(Phase::Attach, context.value())
    }

    /// Renders `spec.volumeDetach`, with the staging context of the volume
    /// and the node it is detached from.
    pub fn render_detach(&self, context: &StagingContext) -> Result<OptionalPodPhase> {
        self.render_optional_pod(Phase::Detach, context.value())
    }

    /// Renders `spec.volumeHealth`, with the staging context of the
    /// volume checked: its pod is mandatory.
    pub fn render_health(&self, context: &StagingContext) -> Result<HealthPhase> {
        let mut fields = self.rendered_fields(Phase::Health, context.value())?;
        let pod_template = fields.mandatory_pod_template()?;
        let timeout = fields.timeout()?;
        let every = fields.duration("every")?;
        fields.finish()?;
        Ok(HealthPhase {
            pod_template,
            timeout,
            every,
        })
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
}

#[cfg(test)]
mod tests;
