//! What a PaV pod's status and exported files say (its state, the volume
//! or snapshot it made, its stats), and the messages users see about it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use pav_templates::Phase;
use pav_templates::quantity::{Rounding, parse_bytes};

use super::{
    ANNOTATION_CAPACITY, ANNOTATION_COLLECTED, ANNOTATION_ERROR, ANNOTATION_HANDLE,
    ANNOTATION_PUBLISH_CONTEXT, ANNOTATION_SIZE, ANNOTATION_SNAPSHOTS, ANNOTATION_TOPOLOGY,
    CONDITION_COLLECTED,
};

/// Where a PaV pod is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not scheduled or not started yet; `reason` is the most telling
    /// waiting reason of a container (`ErrImagePull`, ...), if any.
    Pending {
        /// Why a container is waiting.
        reason: Option<String>,
    },
    /// Running (not terminated).
    Running,
    /// `status.phase: Succeeded`.
    Succeeded,
    /// `status.phase: Failed`; `message` is the termination message or reason.
    Failed {
        /// What the pod's status says about the failure.
        message: String,
    },
}

impl PodState {
    /// Reads the state from a pod's status.
    pub fn of(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        match status.and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => PodState::Succeeded,
            Some("Failed") => PodState::Failed {
                message: termination_message(pod),
            },
            Some("Running") => PodState::Running,
            _ => PodState::Pending {
                reason: waiting_reason(pod),
            },
        }
    }

    /// True for `Succeeded` and `Failed`.
    pub fn is_terminated(&self) -> bool {
        matches!(self, PodState::Succeeded | PodState::Failed { .. })
    }
}

/// The first waiting reason (with message) of any container, for messages
/// about a pod that does not start.
fn waiting_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for container in statuses {
        if let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref())
            && let Some(reason) = waiting.reason.as_deref()
            && reason != "ContainerCreating"
            && reason != "PodInitializing"
        {
            return Some(match waiting.message.as_deref() {
                Some(message) if !message.is_empty() => format!("{reason}: {message}"),
                _ => reason.to_owned(),
            });
        }
    }
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(format!(
        "{}: {}",
        condition.reason.as_deref().unwrap_or("Unschedulable"),
        condition.message.as_deref().unwrap_or("not scheduled")
    ))
}

/// What the failed containers of a pod say: their termination messages,
/// else their reasons and exit codes, else the pod's status message.
pub fn termination_message(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let mut parts = Vec::new();
    let statuses = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .collect::<Vec<_>>();
    for container in statuses {
        let Some(terminated) = container.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
            continue;
        };
        if terminated.exit_code == 0 {
            continue;
        }
        let text = match terminated.message.as_deref().map(str::trim) {
            Some(message) if !message.is_empty() => message.to_owned(),
            _ => format!(
                "{} (exit code {})",
                terminated.reason.as_deref().unwrap_or("Error"),
                terminated.exit_code
            ),
        };
        parts.push(format!("container {}: {text}", container.name));
    }
    if parts.is_empty() {
        let reason = status.and_then(|s| s.reason.as_deref());
        let message = status.and_then(|s| s.message.as_deref());
        return match (reason, message) {
            (Some(r), Some(m)) => format!("{r}: {m}"),
            (Some(x), None) | (None, Some(x)) => x.to_owned(),
            (None, None) => "the pod failed".to_owned(),
        };
    }
    parts.join("; ")
}

/// Defines [`Collected`] from the one list of the `/pav` files a pod may
/// export: each file's name, its field, and the annotation node plugins
/// before [`CONDITION_COLLECTED`] copied it to (`None`: read from the
/// pod's directory only, never collected).
macro_rules! exported_files {
    ($($(#[$doc:meta])* $field:ident: $file:literal => $annotation:expr,)*) => {
        /// The files a terminated pod exported, as the node plugin on its
        /// node recorded them in the pod's status ([`CONDITION_COLLECTED`]),
        /// or as read from its directory.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Collected {
            $($(#[$doc])* pub $field: Option<String>,)*
        }

        impl Collected {
            /// The collected files, once the node plugin marked the pod
            /// collected.
            pub fn of(pod: &Pod) -> Option<Self> {
                let get = |text: Option<&String>| {
                    text.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
                };
                if let Some(files) = collected_condition(pod) {
                    return Some(Collected {
                        $($field: $annotation.and(get(files.get($file))),)*
                    });
                }
                let annotations = pod.metadata.annotations.as_ref()?;
                if annotations.get(ANNOTATION_COLLECTED).map(String::as_str) != Some("true") {
                    return None;
                }
                Some(Collected {
                    $($field: $annotation.and_then(|key: &str| get(annotations.get(key))),)*
                })
            }

            /// The files a pod exported in its `/pav` directory `dir`, as
            /// the node sees it.
            pub fn read(dir: &std::path::Path) -> Self {
                Collected {
                    $($field: read_exported(dir, $file),)*
                }
            }

            /// The annotations that record these files on the pod, as node
            /// plugins did before [`CONDITION_COLLECTED`] (and still do
            /// under RBAC of their time, without `pods/status`).
            pub fn annotations(&self) -> serde_json::Value {
                let mut annotations = serde_json::Map::new();
                $(if let Some(key) = $annotation {
                    annotations.insert(key.to_owned(), serde_json::json!(self.$field));
                })*
                annotations.insert(ANNOTATION_COLLECTED.to_owned(), "true".into());
                serde_json::Value::Object(annotations)
            }

            /// The pod condition ([`CONDITION_COLLECTED`]) that records
            /// these files on the pod: each collected file that exists,
            /// by its name.
            pub fn condition(&self) -> serde_json::Value {
                let mut files = serde_json::Map::new();
                $(if let (Some(_), Some(text)) = ($annotation, &self.$field) {
                    files.insert($file.to_owned(), serde_json::json!(text));
                })*
                serde_json::json!({
                    "type": CONDITION_COLLECTED,
                    "status": "True",
                    "reason": "Collected",
                    "message": serde_json::Value::Object(files).to_string(),
                })
            }
        }
    };
}

/// The files of a pod's [`CONDITION_COLLECTED`], when it has one.
fn collected_condition(pod: &Pod) -> Option<std::collections::BTreeMap<String, String>> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions
        .iter()
        .find(|c| c.type_ == CONDITION_COLLECTED && c.status == "True")?;
    // A message that is not the object the node plugin writes (someone
    // else's condition of the same name) counts as no files.
    Some(serde_json::from_str(condition.message.as_deref().unwrap_or("{}")).unwrap_or_default())
}

exported_files! {
    /// `/pav/handle`, trimmed.
    handle: "handle" => Some(ANNOTATION_HANDLE),
    /// `/pav/capacity`, trimmed.
    capacity: "capacity" => Some(ANNOTATION_CAPACITY),
    /// `/pav/size`, trimmed (a snapshot's size).
    size: "size" => Some(ANNOTATION_SIZE),
    /// `/pav/topology`, trimmed (the nodes a new volume is accessible from).
    topology: "topology" => Some(ANNOTATION_TOPOLOGY),
    /// `/pav/error`, trimmed.
    error: "error" => Some(ANNOTATION_ERROR),
    /// `/pav/publish-context`, trimmed (what an attach pod tells staging).
    publish_context: "publish-context" => Some(ANNOTATION_PUBLISH_CONTEXT),
    /// `/pav/snapshots`, trimmed (a group snapshot's members).
    snapshots: "snapshots" => Some(ANNOTATION_SNAPSHOTS),
    /// `/pav/condition`, trimmed: read from the pod's directory only (the
    /// health check pods that write it run on the node plugin's node), so
    /// never collected.
    condition: "condition" => None::<&str>,
}

/// Largest file the node plugin collects; longer ones are truncated
/// (the pod's condition holds them all).
pub const MAX_FILE: usize = 16 * 1024;

/// Reads one exported file from a pod's `/pav` directory on the node.
pub fn read_exported(dir: &std::path::Path, file: &str) -> Option<String> {
    let bytes = std::fs::read(dir.join(file)).ok()?;
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_FILE)]).into_owned();
    text = text.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The volume a creation exported, with the guide's precedence applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The volume handle.
    pub handle: String,
    /// The capacity in bytes.
    pub capacity: u64,
    /// The nodes the volume is accessible from; empty: every node.
    pub topology: Vec<String>,
}

/// Why what a creation evaluated or exported is no volume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreatedError {
    /// The handle is empty, too long or not one line.
    #[error("volume handle {0:?} must be 1 to 128 bytes on one line")]
    Handle(String),
    /// `/pav/capacity` is no quantity.
    #[error("/pav/capacity")]
    Capacity(#[source] pav_templates::quantity::QuantityError),
    /// Neither the spec nor the pod gave a capacity.
    #[error(
        "spec.volumeCreation.capacity is not set and the creation pod did not write /pav/capacity"
    )]
    NoCapacity,
    /// `/pav/topology` is no node name or list of node names.
    #[error("/pav/topology: {0}")]
    Topology(String),
}

/// The node names in a `/pav/topology` file: one name, or a YAML list.
pub fn parse_topology(text: &str) -> Result<Vec<String>, String> {
    let value = pav_templates::yaml::yaml_to_json(text)?;
    pav_templates::phase::topology_nodes(&value)
}

/// A size a phase yields, by the guide's precedence: the evaluated key
/// when the spec gives it, else the pod's `/pav` file (a quantity or a
/// number of bytes, rounded by `rounding`); `None` with neither, for the
/// caller's default (or its error when there is none).
pub fn evaluated_else_exported(
    evaluated: Option<u64>,
    exported: Option<&str>,
    rounding: Rounding,
) -> Result<Option<u64>, pav_templates::quantity::QuantityError> {
    match (evaluated, exported) {
        (Some(bytes), _) => Ok(Some(bytes)),
        (None, Some(text)) => parse_bytes(text, rounding).map(Some),
        (None, None) => Ok(None),
    }
}

/// Applies the guide's precedence: handle from the spec, else `/pav/handle`,
/// else `default_handle`; capacity from the spec, else `/pav/capacity`
/// (required then, as a quantity or a number of bytes).
pub fn creation_result(
    creation: &pav_templates::CreationPhase,
    collected: Option<&Collected>,
    default_handle: &str,
) -> Result<Created, CreatedError> {
    let handle = exported_handle(creation.handle.as_deref(), collected, default_handle)
        .map_err(CreatedError::Handle)?;
    let exported = collected.and_then(|c| c.capacity.as_deref());
    let capacity = evaluated_else_exported(creation.capacity, exported, Rounding::Down)
        .map_err(CreatedError::Capacity)?
        .ok_or(CreatedError::NoCapacity)?;
    let topology = match (
        &creation.topology,
        collected.and_then(|c| c.topology.as_deref()),
    ) {
        (Some(nodes), _) => nodes.clone(),
        (None, Some(text)) => parse_topology(text).map_err(CreatedError::Topology)?,
        (None, None) => Vec::new(),
    };
    Ok(Created {
        handle,
        capacity,
        topology,
    })
}

/// A handle from the spec, else from `/pav/handle`, else the default; the
/// offending handle when it is empty, longer than 128 bytes or not one line.
pub fn exported_handle(
    spec: Option<&str>,
    collected: Option<&Collected>,
    default: &str,
) -> Result<String, String> {
    let handle = spec
        .map(str::to_owned)
        .or_else(|| collected.and_then(|c| c.handle.clone()))
        .unwrap_or_else(|| default.to_owned());
    if handle.is_empty() || handle.len() > 128 || handle.contains(['\n', '\r']) {
        return Err(handle);
    }
    Ok(handle)
}

/// A staging pod's `/pav/stats`: a YAML map of `used` and `available`,
/// each a number of bytes or a quantity; the total is their sum.
pub fn parse_stats(text: &str) -> Result<pav_sdk::Usage, String> {
    let value = pav_templates::yaml::yaml_to_json(text)?;
    let Some(map) = value.as_object() else {
        return Err("must be a map of used and available bytes".into());
    };
    if let Some(key) = map
        .keys()
        .find(|k| !["used", "available"].contains(&k.as_str()))
    {
        return Err(format!("unknown key {key:?} (allowed: used, available)"));
    }
    let bytes = |key: &str| -> Result<u64, String> {
        match map.get(key) {
            None => Err(format!("{key} is missing")),
            Some(serde_json::Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| format!("{key}: {n} is not a number of bytes")),
            Some(serde_json::Value::String(text)) => {
                parse_bytes(text, Rounding::Down).map_err(|e| format!("{key}: {e}"))
            }
            Some(other) => Err(format!("{key}: {other} is not a number of bytes")),
        }
    };
    let (used, available) = (bytes("used")?, bytes("available")?);
    Ok(pav_sdk::Usage {
        total: used.saturating_add(available),
        available,
        used,
    })
}

/// An attach pod's `/pav/publish-context`: a YAML map whose values are
/// strings, numbers or booleans (each kept as its text). Its size is the
/// file's, at most [`MAX_FILE`].
pub fn parse_publish_context(text: &str) -> Result<pav_sdk::Parameters, String> {
    let value = pav_templates::yaml::yaml_to_json(text)?;
    let Some(map) = value.as_object() else {
        return Err("must be a map of strings".into());
    };
    map.iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(text) => Ok((key.clone(), text.clone())),
            serde_json::Value::Number(_) | serde_json::Value::Bool(_) => {
                Ok((key.clone(), value.to_string()))
            }
            other => Err(format!("{key}: {other} is not a string")),
        })
        .collect()
}

/// A group snapshot creation pod's `/pav/snapshots`: a YAML map from
/// each source volume's handle to its snapshot's, with exactly the
/// `sources` as keys; the snapshot handles in the order of `sources`.
/// Each snapshot handle is 1 to 128 bytes on one line, and distinct.
pub fn parse_group_members(text: &str, sources: &[&str]) -> Result<Vec<String>, String> {
    let value = pav_templates::yaml::yaml_to_json(text)?;
    let Some(map) = value.as_object() else {
        return Err("must be a map from each source volume handle to its snapshot handle".into());
    };
    let known: std::collections::HashSet<&str> = sources.iter().copied().collect();
    if let Some(key) = map.keys().find(|k| !known.contains(k.as_str())) {
        return Err(format!("{key:?} is not a source volume of this group"));
    }
    let mut members: Vec<String> = Vec::with_capacity(sources.len());
    let mut seen = std::collections::HashSet::with_capacity(sources.len());
    for source in sources {
        let handle = match map.get(*source) {
            None => return Err(format!("source volume {source:?} has no snapshot")),
            Some(serde_json::Value::String(handle)) => handle,
            Some(other) => return Err(format!("{source}: {other} is not a snapshot handle")),
        };
        if handle.is_empty() || handle.len() > 128 || handle.contains(['\n', '\r']) {
            return Err(format!(
                "{source}: snapshot handle {handle:?} must be 1 to 128 bytes on one line"
            ));
        }
        if !seen.insert(handle.as_str()) {
            return Err(format!("snapshot handle {handle:?} is given twice"));
        }
        members.push(handle.clone());
    }
    Ok(members)
}

/// A `/pav/condition`: a YAML map of `abnormal` (a boolean), an optional
/// `message`, and for an abnormal volume an optional `problem`
/// (`Inaccessible`, the default, `Degraded` or `DataLoss`) and `reason`
/// (CamelCase, `VolumeAbnormal` without it), as CSI's volume health.
pub fn parse_condition(text: &str) -> Result<pav_sdk::VolumeCondition, String> {
    const KEYS: [&str; 4] = ["abnormal", "message", "problem", "reason"];
    let value = pav_templates::yaml::yaml_to_json(text)?;
    let Some(map) = value.as_object() else {
        return Err("must be a map of abnormal (true or false) and message".into());
    };
    if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown key {key:?} (allowed: {})",
            KEYS.join(", ")
        ));
    }
    let abnormal = match map.get("abnormal") {
        Some(serde_json::Value::Bool(abnormal)) => *abnormal,
        Some(other) => return Err(format!("abnormal: {other} is not true or false")),
        None => return Err("abnormal is missing".into()),
    };
    let text_of = |key: &str| match map.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(format!("{key}: {other} is not a string")),
    };
    let message = text_of("message")?.unwrap_or_default();
    let mut condition = match abnormal {
        true => pav_sdk::VolumeCondition::abnormal(message),
        false => pav_sdk::VolumeCondition {
            message,
            ..pav_sdk::VolumeCondition::healthy()
        },
    };
    let problem = match text_of("problem")?.as_deref() {
        None => condition.problem,
        Some("Inaccessible") => pav_sdk::HealthProblem::Inaccessible,
        Some("Degraded") => pav_sdk::HealthProblem::Degraded,
        Some("DataLoss") => pav_sdk::HealthProblem::DataLoss,
        Some(other) => {
            return Err(format!(
                "problem: {other:?} is not Inaccessible, Degraded or DataLoss"
            ));
        }
    };
    let reason = match text_of("reason")? {
        None => condition.reason.clone(),
        Some(reason) if is_camel_case(&reason) => reason,
        Some(reason) => {
            return Err(format!(
                "reason: {reason:?} is not 1 to 256 bytes of CamelCase (letters and digits, first a capital)"
            ));
        }
    };
    if abnormal {
        condition = condition.because(problem, reason);
    }
    Ok(condition)
}

/// CSI's and Kubernetes' reason: 1 to 256 ASCII letters and digits, the
/// first a capital.
fn is_camel_case(reason: &str) -> bool {
    (1..=256).contains(&reason.len())
        && reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The message a user sees when a phase's pod fails: phase, pod, and what
/// the pod said (`/pav/error` first, then the termination message).
pub fn pod_failure(
    phase: Phase,
    namespace: &str,
    name: &str,
    exported_error: Option<&str>,
    termination: &str,
) -> String {
    let why = match exported_error {
        Some(error) => error.to_owned(),
        None => termination.to_owned(),
    };
    truncate(format!("{phase} pod {namespace}/{name} failed: {why}"))
}

/// The message of a phase that did not finish in time.
pub fn pod_timeout(
    phase: Phase,
    namespace: &str,
    name: &str,
    timeout: Duration,
    last: Option<&PodState>,
) -> String {
    let state = match last {
        None => "it does not exist".to_owned(),
        Some(PodState::Pending {
            reason: Some(reason),
        }) => format!("it is pending ({reason})"),
        Some(PodState::Pending { reason: None }) => "it is pending".to_owned(),
        Some(PodState::Running) => "it is still running".to_owned(),
        Some(PodState::Succeeded) | Some(PodState::Failed { .. }) => {
            "it terminated but its /pav files were not collected (is the node plugin running on its node?)".to_owned()
        }
    };
    truncate(format!(
        "{phase} pod {namespace}/{name} did not finish within {}s: {state}",
        timeout.as_secs()
    ))
}

pub use crate::telemetry::truncate;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodStatus,
    };

    fn pod(phase: &str, containers: Vec<ContainerStatus>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.to_owned()),
                container_statuses: Some(containers),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn terminated(name: &str, code: i32, message: Option<&str>) -> ContainerStatus {
        ContainerStatus {
            name: name.to_owned(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    message: message.map(str::to_owned),
                    reason: Some("Error".to_owned()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    #[test]
    fn states_from_status() {
        assert_eq!(PodState::of(&pod("Succeeded", vec![])), PodState::Succeeded);
        assert_eq!(PodState::of(&pod("Running", vec![])), PodState::Running);
        assert_eq!(
            PodState::of(&pod(
                "Failed",
                vec![terminated("c", 3, Some("disk full\n"))]
            )),
            PodState::Failed {
                message: "container c: disk full".to_owned()
            }
        );
        assert_eq!(
            termination_message(&pod("Failed", vec![terminated("c", 2, None)])),
            "container c: Error (exit code 2)"
        );
        let waiting = ContainerStatus {
            name: "c".to_owned(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ErrImagePull".to_owned()),
                    message: Some("no such image".to_owned()),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        };
        assert_eq!(
            PodState::of(&pod("Pending", vec![waiting])),
            PodState::Pending {
                reason: Some("ErrImagePull: no such image".to_owned())
            }
        );
        assert!(PodState::Succeeded.is_terminated());
        assert!(!PodState::Running.is_terminated());
    }

    #[test]
    fn collected_only_when_marked() {
        let mut p = Pod::default();
        assert_eq!(Collected::of(&p), None);
        let files = Collected {
            handle: Some("vol-1".into()),
            capacity: Some("1Gi".into()),
            // Never collected: read on the pod's own node only.
            condition: Some("abnormal".into()),
            ..Collected::default()
        };
        let condition = files.condition();
        let message: serde_json::Value =
            serde_json::from_str(condition["message"].as_str().unwrap()).unwrap();
        assert_eq!(
            message,
            serde_json::json!({"handle": "vol-1", "capacity": "1Gi"})
        );
        assert_eq!(condition["type"], CONDITION_COLLECTED);
        let collected = Collected {
            condition: None,
            ..files.clone()
        };
        p.status =
            Some(serde_json::from_value(serde_json::json!({"conditions": [condition]})).unwrap());
        assert_eq!(Collected::of(&p), Some(collected.clone()));

        // As a node plugin before the condition recorded them.
        let mut old = Pod::default();
        let mut annotations = std::collections::BTreeMap::new();
        annotations.insert(ANNOTATION_HANDLE.to_owned(), " vol-1\n".to_owned());
        annotations.insert(ANNOTATION_CAPACITY.to_owned(), "1Gi".to_owned());
        old.metadata.annotations = Some(annotations.clone());
        assert_eq!(Collected::of(&old), None, "not marked collected");
        annotations.insert(ANNOTATION_COLLECTED.to_owned(), "true".to_owned());
        old.metadata.annotations = Some(annotations);
        assert_eq!(Collected::of(&old), Some(collected.clone()));
        // And as one under such RBAC writes them (a null removes the
        // annotation).
        let written = files.annotations();
        let written = written.as_object().unwrap().iter();
        old.metadata.annotations = Some(
            written
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect(),
        );
        assert_eq!(Collected::of(&old), Some(collected));
    }

    fn creation(
        handle: Option<&str>,
        capacity: Option<u64>,
        topology: Option<&[&str]>,
    ) -> pav_templates::CreationPhase {
        pav_templates::CreationPhase {
            handle: handle.map(str::to_owned),
            capacity,
            topology: topology.map(|nodes| nodes.iter().map(|n| (*n).to_owned()).collect()),
            pod_template: None,
            timeout: None,
        }
    }

    #[test]
    fn creation_precedence() {
        let files = Collected {
            handle: Some("from-pod".into()),
            capacity: Some("2Ki".into()),
            topology: Some("[node-b, node-c]".into()),
            ..Collected::default()
        };
        assert_eq!(
            creation_result(
                &creation(Some("spec"), Some(5), Some(&["node-a"])),
                Some(&files),
                "pvc-1"
            ),
            Ok(Created {
                handle: "spec".into(),
                capacity: 5,
                topology: vec!["node-a".into()],
            })
        );
        assert_eq!(
            creation_result(&creation(None, None, None), Some(&files), "pvc-1"),
            Ok(Created {
                handle: "from-pod".into(),
                capacity: 2048,
                topology: vec!["node-b".into(), "node-c".into()],
            })
        );
        let created = creation_result(&creation(None, Some(7), None), None, "pvc-1").unwrap();
        assert_eq!(
            (created.handle.as_str(), created.topology),
            ("pvc-1", vec![])
        );
        assert_eq!(
            creation_result(&creation(None, None, None), None, "pvc-1"),
            Err(CreatedError::NoCapacity)
        );
        let bad = Collected {
            capacity: Some("lots".into()),
            ..Collected::default()
        };
        assert!(matches!(
            creation_result(&creation(None, None, None), Some(&bad), "pvc-1"),
            Err(CreatedError::Capacity(_))
        ));
        let bad = Collected {
            topology: Some("[Node_A]".into()),
            ..Collected::default()
        };
        assert!(matches!(
            creation_result(&creation(None, Some(1), None), Some(&bad), "pvc-1"),
            Err(CreatedError::Topology(_))
        ));
        assert_eq!(
            creation_result(&creation(Some(&"x".repeat(129)), Some(1), None), None, "p"),
            Err(CreatedError::Handle("x".repeat(129)))
        );
    }

    #[test]
    fn stats_files() {
        assert_eq!(
            parse_stats("used: 1Ki\navailable: 3072\n"),
            Ok(pav_sdk::Usage {
                total: 4096,
                available: 3072,
                used: 1024
            })
        );
        assert!(
            parse_stats("used: 1")
                .unwrap_err()
                .contains("available is missing")
        );
        assert!(parse_stats("used: 1\navailable: -2").is_err());
        assert!(
            parse_stats("used: 1\navailable: 2\nfree: 3")
                .unwrap_err()
                .contains("free")
        );
        assert!(parse_stats("[1, 2]").is_err());
    }

    #[test]
    fn publish_context_files() {
        let context = parse_publish_context("devicePath: /dev/loop3\nlun: 7\nro: false").unwrap();
        assert_eq!(context["devicePath"], "/dev/loop3");
        assert_eq!(context["lun"], "7");
        assert_eq!(context["ro"], "false");
        assert!(
            parse_publish_context("[a]")
                .unwrap_err()
                .contains("must be a map")
        );
        let nested = parse_publish_context("target: {portal: x}").unwrap_err();
        assert!(nested.contains("target:"), "{nested}");
    }

    #[test]
    fn group_member_files() {
        let members = parse_group_members("v2: s2\nv1: s1", &["v1", "v2"]).unwrap();
        assert_eq!(members, ["s1", "s2"], "in the order of the sources");
        for (text, wrong) in [
            ("[s1, s2]", "must be a map"),
            ("v1: s1", "source volume \"v2\" has no snapshot"),
            ("v1: s1\nv2: s2\nv3: s3", "\"v3\" is not a source volume"),
            ("v1: s1\nv2: s1", "\"s1\" is given twice"),
            ("v1: s1\nv2: ''", "must be 1 to 128 bytes"),
            ("v1: s1\nv2: [s2]", "is not a snapshot handle"),
        ] {
            let error = parse_group_members(text, &["v1", "v2"]).unwrap_err();
            assert!(error.contains(wrong), "{text:?}: {error}");
        }
        let long = format!("v1: {}\nv2: s2", "s".repeat(129));
        assert!(parse_group_members(&long, &["v1", "v2"]).is_err());
    }

    #[test]
    fn condition_files() {
        let abnormal = parse_condition("abnormal: true\nmessage: 'e2fsck: 3 errors'").unwrap();
        assert!(abnormal.abnormal);
        assert_eq!(abnormal.message, "e2fsck: 3 errors");
        assert_eq!(
            (abnormal.problem, abnormal.reason.as_str()),
            (pav_sdk::HealthProblem::Inaccessible, "VolumeAbnormal")
        );
        let lost = "abnormal: true\nproblem: DataLoss\nreason: SuperblockGone\nmessage: m";
        let lost = parse_condition(lost).unwrap();
        assert_eq!(
            (lost.problem, lost.reason.as_str(), lost.message.as_str()),
            (pav_sdk::HealthProblem::DataLoss, "SuperblockGone", "m")
        );
        assert_eq!(
            parse_condition("abnormal: false"),
            Ok(pav_sdk::VolumeCondition::healthy())
        );
        for (text, wrong) in [
            ("abnormal: yes please", "is not true or false"),
            ("message: gone", "abnormal is missing"),
            ("abnormal: true\nmessage: [1]", "is not a string"),
            ("abnormal: true\nseverity: x", "unknown key \"severity\""),
            (
                "abnormal: true\nproblem: Broken",
                "is not Inaccessible, Degraded or DataLoss",
            ),
            (
                "abnormal: true\nreason: not camel",
                "is not 1 to 256 bytes of CamelCase",
            ),
            ("true", "must be a map"),
        ] {
            let error = parse_condition(text).unwrap_err();
            assert!(error.contains(wrong), "{text}: {error}");
        }
    }

    #[test]
    fn messages_name_phase_and_pod() {
        assert_eq!(
            pod_failure(
                Phase::Creation,
                "pav",
                "pav-creation-1",
                Some("quota"),
                "exit 1"
            ),
            "creation pod pav/pav-creation-1 failed: quota"
        );
        assert_eq!(
            pod_failure(
                Phase::Staging,
                "ns",
                "p",
                None,
                "container c: Error (exit code 1)"
            ),
            "staging pod ns/p failed: container c: Error (exit code 1)"
        );
        let timeout = pod_timeout(
            Phase::Deletion,
            "pav",
            "p",
            Duration::from_secs(300),
            Some(&PodState::Pending {
                reason: Some("ImagePullBackOff".into()),
            }),
        );
        assert_eq!(
            timeout,
            "deletion pod pav/p did not finish within 300s: it is pending (ImagePullBackOff)"
        );
        assert!(truncate("é".repeat(2000)).len() <= 1004);
    }

    #[test]
    fn durations_and_annotations() {
        // `--phase-timeout` is parsed as a phase's `timeout` is.
        use pav_templates::duration::parse_timeout;
        assert_eq!(parse_timeout("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_timeout("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_timeout("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("5d").is_err());
        // The parser it replaced multiplied hours without a check.
        assert!(parse_timeout("5124095576030432h").is_err());
    }
}
