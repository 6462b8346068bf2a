//! `spec.volumeCreation`: a volume is created for a claim. Its handle,
//! capacity and topology (the nodes it is accessible from) are fixed by
//! the spec or written by its pod; without Dynamic in
//! `spec.provisioningModes` there is no creation.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::time::Duration;

use serde::Serialize;

use super::fields::Fields;
use super::{Definition, Phase, Section};
use crate::context::CreationContext;
use crate::error::{Error, Result};

/// `spec.volumeCreation` as a [`Section`], rendered with a
/// [`CreationContext`].
#[derive(Debug, Clone, Copy)]
pub struct Creation;

impl Section for Creation {
    const DEFINITION: Definition = Definition {
        phase: Phase::Creation,
        field: "volumeCreation",
        required: false,
        name: "creation",
        keys: &["handle", "capacity", "topology", "podTemplate", "timeout"],
        needs_pod: false,
        requires: None,
        pod_on_volume_node: false,
        event_reason: "CreationFailed",
        description: "How a volume is created (dynamic provisioning only): `handle`,\n\
                      `capacity` and an optional creation `podTemplate`.",
    };
    type Context = CreationContext;
    type Evaluated = CreationPhase;

    /// A dynamic provisioner's creation must say how big the volume is:
    /// in `capacity`, or through its pod's `/pav/capacity`.
    fn decode(fields: &mut Fields<'_>) -> Result<CreationPhase> {
        let handle = fields.handle("handle")?;
        let capacity = fields.optional_capacity("capacity")?;
        let topology = match fields.take("topology") {
            None => None,
            Some(value) => Some(
                topology_nodes(&value).map_err(|message| fields.evaluated("topology", message))?,
            ),
        };
        let pod_template = fields.pod_template()?;
        if capacity.is_none() && pod_template.is_none() && fields.dynamic {
            return Err(Error::Rule {
                at: fields.location_of_phase(),
                message: "must specify capacity or podTemplate (or both) when spec.provisioningModes contains Dynamic".into(),
            });
        }
        Ok(CreationPhase {
            handle,
            capacity,
            topology,
            pod_template,
            timeout: fields.timeout()?,
        })
    }
}

/// Evaluated `spec.volumeCreation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreationPhase {
    /// The volume's handle, if the spec fixes it; otherwise the pod's
    /// `/pav/handle`, else `defaultHandle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The volume's capacity in bytes, if the spec fixes it; otherwise the
    /// pod must write `/pav/capacity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// The nodes the volume is accessible from, if the spec fixes them;
    /// otherwise the pod's `/pav/topology`, else every node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<Vec<String>>,
    /// The creation pod, run to completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// How long this phase's pod may take (the `timeout` field, an
    /// extension of pav); the runner's default when absent.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serialize_timeout"
    )]
    pub timeout: Option<Duration>,
}

/// Most nodes a volume may be accessible from: a PersistentVolume's node
/// affinity lists them, and the API server bounds an object's size.
pub const MAX_TOPOLOGY_NODES: usize = 64;

/// The nodes a volume is accessible from, as `volumeCreation.topology` or a
/// creation pod's `/pav/topology` gives them: one node name, or a
/// non-empty list of distinct node names (each a DNS subdomain).
///
/// ```
/// use pav_templates::phase::topology_nodes;
/// assert_eq!(topology_nodes(&"node-1".into()).unwrap(), ["node-1"]);
/// assert_eq!(topology_nodes(&serde_json::json!(["a", "b"])).unwrap(), ["a", "b"]);
/// assert!(topology_nodes(&serde_json::json!([])).is_err());
/// assert!(topology_nodes(&"Node_1".into()).is_err());
/// ```
pub fn topology_nodes(value: &serde_json::Value) -> Result<Vec<String>, String> {
    use serde_json::Value as Json;
    let items: Vec<&Json> = match value {
        Json::Array(items) if items.is_empty() => {
            return Err("must name at least one node".into());
        }
        Json::Array(items) if items.len() > MAX_TOPOLOGY_NODES => {
            return Err(format!(
                "names {} nodes, more than the {MAX_TOPOLOGY_NODES} allowed",
                items.len()
            ));
        }
        Json::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    let mut nodes: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Json::String(name) = item else {
            return Err(format!(
                "must be a node name or a list of node names, not {}",
                match item {
                    Json::Null => "null".to_owned(),
                    Json::Array(_) => "a nested list".to_owned(),
                    Json::Object(_) => "an object".to_owned(),
                    other => other.to_string(),
                }
            ));
        };
        if !is_node_name(name) {
            return Err(format!(
                "{name:?} is not a node name (a DNS subdomain: at most 253 lowercase alphanumerics, '-' or '.')"
            ));
        }
        if nodes.contains(name) {
            return Err(format!("names node {name:?} twice"));
        }
        nodes.push(name.clone());
    }
    Ok(nodes)
}

fn is_node_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes[0] != b'-'
                && bytes[bytes.len() - 1] != b'-'
        })
}
