//! `pav check`: the spec as written checked against the guide's rules,
//! every problem collected with its field.

use minijinja::Environment;
use serde_json::Value as Json;

use crate::duration::parse_timeout;
pub(super) use crate::engine::has_template_syntax;
use crate::error::{Error, Location};
use crate::model::{
    LifecycleMode, PopulatedKind, ProvisioningMode, StagingPer, TokenRequest, token_file_name,
};
use crate::phase::Phase;
use crate::phase::fields::{
    Kind, PodTemplateError, capacity_rounding, describe_json, kind, pod_template_from_json,
};
use crate::quantity::{Rounding, parse_bytes};
use crate::volume::DataSourceKind;

/// Walks the spec as written, collecting every problem and compiling every
/// template.
pub(super) struct Checker {
    pub(super) name: String,
    pub(super) problems: Vec<Error>,
    pub(super) env: Environment<'static>,
}

impl Checker {
    pub(super) fn at(&self, path: &str, line: Option<usize>) -> Location {
        Location {
            provisioner: self.name.clone(),
            path: path.to_owned(),
            line,
        }
    }

    pub(super) fn problem_schema(&mut self, path: &str, message: &str) {
        self.problems.push(Error::Schema {
            at: self.at(path, None),
            message: message.to_owned(),
        });
    }

    pub(super) fn problem_rule(&mut self, path: &str, message: &str) {
        self.problems.push(Error::Rule {
            at: self.at(path, None),
            message: message.to_owned(),
        });
    }

    pub(super) fn check_header(&mut self, object: &Json) {
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

    pub(super) fn check_modes(&mut self, value: Option<&Json>) -> Option<Vec<ProvisioningMode>> {
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
    pub(super) fn check_get_pvc_namespaces(&mut self, value: Option<&Json>) -> Vec<String> {
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

    /// `spec.dataSources`: absent, or a list of distinct data source kinds.
    /// Not a template: it decides what the CSI driver accepts.
    pub(super) fn check_data_sources(&mut self, value: Option<&Json>) -> Vec<DataSourceKind> {
        let allowed = ["VolumeSnapshot", "PersistentVolumeClaim"];
        self.check_set("spec.dataSources", value, &allowed)
    }

    /// `spec.volumeLifecycleModes`: absent (`Persistent` only), or a list
    /// of distinct modes. Not a template: it is the CSIDriver's.
    pub(super) fn check_lifecycle_modes(&mut self, value: Option<&Json>) -> Vec<LifecycleMode> {
        let modes = self.check_set(
            "spec.volumeLifecycleModes",
            value,
            &["Persistent", "Ephemeral"],
        );
        match value {
            None | Some(Json::Null) => vec![LifecycleMode::Persistent],
            Some(_) => modes,
        }
    }

    /// `spec.stagingPer`: absent (`Pod`), `Pod` or `Node`. Not a template:
    /// it decides the node plugins' CSI capabilities.
    pub(super) fn check_staging_per(&mut self, value: Option<&Json>) -> StagingPer {
        match value {
            None | Some(Json::Null) => StagingPer::default(),
            Some(other) => serde_json::from_value(other.clone()).unwrap_or_else(|_| {
                self.problem_schema(
                    "spec.stagingPer",
                    &format!(
                        "must be Pod or Node (it is not a template), not {}",
                        describe_json(other)
                    ),
                );
                StagingPer::default()
            }),
        }
    }

    /// `spec.tokenRequests`: absent, or a non-empty list of distinct
    /// audiences, each its own file name under `/pav/tokens/`, with an
    /// optional `expirationSeconds` of at least 600 (the CSIDriver's
    /// rules); only with `stagingPer: Pod`, as tokens come with each
    /// client pod's publish. Not a template: it is the CSIDriver's.
    pub(super) fn check_token_requests(&mut self, value: Option<&Json>, staging_per: StagingPer) {
        const PATH: &str = "spec.tokenRequests";
        let requests: Vec<TokenRequest> = match value {
            None | Some(Json::Null) => return,
            Some(value) => match serde_json::from_value(value.clone()) {
                Ok(requests) => requests,
                Err(_) => {
                    let found = describe_json(value);
                    let message = format!(
                        "must be a list of {{audience, expirationSeconds}} (it is not a template), not {found}"
                    );
                    return self.problem_schema(PATH, &message);
                }
            },
        };
        if requests.is_empty() {
            self.problem_schema(PATH, "must list at least one audience when present");
        }
        if staging_per == StagingPer::Node {
            let message = "needs stagingPer: Pod: kubelet gives tokens with each client pod's publish, which a volume staged per node does not stage";
            self.problem_rule(PATH, message);
        }
        let mut files = std::collections::BTreeMap::new();
        for (i, request) in requests.iter().enumerate() {
            let path = format!("{PATH}[{i}]");
            let audience = &request.audience;
            if audience.is_empty() || audience.len() > 253 {
                self.problem_schema(&format!("{path}.audience"), "must be 1 to 253 bytes");
            }
            if let Some(seconds) = request.expiration_seconds
                && !(600..=u32::MAX.into()).contains(&seconds)
            {
                let message = format!("must be at least 600 (10 minutes), not {seconds}");
                self.problem_schema(&format!("{path}.expirationSeconds"), &message);
            }
            if let Some(other) = files.insert(token_file_name(audience), audience) {
                let message = match other == audience {
                    true => format!("repeats audience {audience:?}"),
                    false => format!(
                        "audiences {other:?} and {audience:?} would share the file /pav/tokens/{}",
                        token_file_name(audience)
                    ),
                };
                self.problem_schema(&path, &message);
            }
        }
    }

    /// `spec.populatedFrom`: absent, or a non-empty list of distinct kinds
    /// (`kind` a name Kubernetes accepts for one), each of an API group
    /// other than the core one (where a claim's `dataSourceRef` may name
    /// only a claim) and none a VolumeSnapshot (those are `dataSources`,
    /// which creation restores); present exactly when `volumePopulation`
    /// is. Not a
    /// template: the driver watches claims for these kinds before any
    /// volume exists. What it holds, when absent none.
    pub(super) fn check_populated_from(
        &mut self,
        value: Option<&Json>,
        has_population: bool,
    ) -> Vec<PopulatedKind> {
        const PATH: &str = "spec.populatedFrom";
        let kinds: Vec<PopulatedKind> = match value {
            None | Some(Json::Null) => {
                if has_population {
                    let message = "is required with spec.volumePopulation: it names the kinds of object volumes are filled from";
                    self.problem_rule(PATH, message);
                }
                return Vec::new();
            }
            Some(value) => match serde_json::from_value(value.clone()) {
                Ok(kinds) => kinds,
                Err(_) => {
                    let found = describe_json(value);
                    let message = format!(
                        "must be a list of {{apiGroup, kind}} (it is not a template), not {found}"
                    );
                    self.problem_schema(PATH, &message);
                    return Vec::new();
                }
            },
        };
        if kinds.is_empty() {
            self.problem_schema(PATH, "must list at least one kind when present");
        }
        if !has_population {
            let message = "may only be specified together with spec.volumePopulation";
            self.problem_rule(PATH, message);
        }
        for (i, kind) in kinds.iter().enumerate() {
            let path = format!("{PATH}[{i}]");
            let valid_kind = (1..=63).contains(&kind.kind.len())
                && kind.kind.starts_with(|c: char| c.is_ascii_alphabetic())
                && kind.kind.chars().all(|c| c.is_ascii_alphanumeric());
            if !valid_kind {
                let message = format!(
                    "{:?} is no kind: 1 to 63 ASCII letters and digits, a letter first",
                    kind.kind
                );
                self.problem_schema(&format!("{path}.kind"), &message);
            }
            let valid_group = kind.api_group.len() <= 253
                && (kind.api_group.chars())
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            if !valid_group {
                let message = format!("{:?} is no API group", kind.api_group);
                self.problem_schema(&format!("{path}.apiGroup"), &message);
            }
            if kind.api_group.is_empty() {
                // The API server's validation of a claim's dataSourceRef.
                let message = "must name an API group: a claim's dataSourceRef names no kind of the core group but PersistentVolumeClaim";
                self.problem_rule(&format!("{path}.apiGroup"), message);
            } else if (kind.api_group.as_str(), kind.kind.as_str())
                == ("snapshot.storage.k8s.io", "VolumeSnapshot")
            {
                let message = "VolumeSnapshots are spec.dataSources: volume creation restores them";
                self.problem_rule(&path, message);
            }
            if kinds[..i].contains(kind) {
                self.problem_schema(&path, "repeats a kind");
            }
        }
        kinds
    }

    /// A spec field that is a non-empty list of distinct names out of
    /// `allowed`, each a `T`; what it holds of them, when absent none.
    fn check_set<T: serde::de::DeserializeOwned + PartialEq>(
        &mut self,
        path: &str,
        value: Option<&Json>,
        allowed: &[&str],
    ) -> Vec<T> {
        let items = match value {
            None | Some(Json::Null) => return Vec::new(),
            Some(Json::Array(items)) if !items.is_empty() => items,
            Some(other) => {
                self.problem_schema(
                    path,
                    &format!(
                        "must be a non-empty list of {} (it is not a template), not {}",
                        allowed.join(" and/or "),
                        describe_json(other)
                    ),
                );
                return Vec::new();
            }
        };
        let mut kinds = Vec::new();
        for (index, item) in items.iter().enumerate() {
            match serde_json::from_value::<T>(item.clone()) {
                Ok(kind) if kinds.contains(&kind) => {
                    self.problem_schema(&format!("{path}[{index}]"), "is listed twice");
                }
                Ok(kind) => kinds.push(kind),
                Err(_) => self.problem_schema(
                    &format!("{path}[{index}]"),
                    &format!(
                        "{} is not one of {}",
                        describe_json(item),
                        allowed.join(", ")
                    ),
                ),
            }
        }
        kinds
    }

    /// The sections pav adds that only make sense with another: node
    /// expansion grows what expansion grew, a snapshot is deleted only if
    /// it can be taken, and volumes are created from sources only by a
    /// creation that can see them.
    pub(super) fn check_needs(
        &mut self,
        spec: &serde_json::Map<String, Json>,
        modes: Option<&[ProvisioningMode]>,
        data_sources: &[DataSourceKind],
    ) {
        let has = |phase: Phase| spec.contains_key(phase.field());
        for phase in Phase::ALL {
            if let Some(required) = phase.requires()
                && has(phase)
                && !has(required)
            {
                self.problem_rule(
                    &format!("spec.{}", phase.field()),
                    &format!(
                        "may only be specified together with spec.{}",
                        required.field()
                    ),
                );
            }
        }
        if has(Phase::Capacity)
            && modes.is_some_and(|modes| !modes.contains(&ProvisioningMode::Dynamic))
        {
            self.problem_rule(
                "spec.storageCapacity",
                "may only be specified if spec.provisioningModes contains Dynamic (capacity places new volumes)",
            );
        }
        if data_sources.is_empty() {
            return;
        }
        if modes.is_some_and(|modes| !modes.contains(&ProvisioningMode::Dynamic)) {
            self.problem_rule(
                "spec.dataSources",
                "may only be specified if spec.provisioningModes contains Dynamic",
            );
        }
        if data_sources.contains(&DataSourceKind::VolumeSnapshot) && !has(Phase::SnapshotCreation) {
            self.problem_rule(
                "spec.dataSources",
                "lists VolumeSnapshot, which needs spec.snapshotCreation (the snapshots restored are the ones it takes)",
            );
        }
    }

    /// Checks a phase as written (its keys, its literal fields, what it
    /// needs); compiling it is `compile`'s, after.
    pub(super) fn check_phase(&mut self, phase: Phase, path: &str, value: &Json) {
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
            if phase.needs_pod() && !map.contains_key("podTemplate") {
                self.problem_schema(&format!("{path}.podTemplate"), "is required");
            }
            if phase == Phase::Capacity
                && !map.contains_key("availableCapacity")
                && !map.contains_key("podTemplate")
            {
                self.problem_rule(
                    path,
                    "must specify availableCapacity or podTemplate (or both)",
                );
            }
            if phase == Phase::Validation
                && let (Some(min), Some(max)) = (map.get("minCapacity"), map.get("maxCapacity"))
                && let (Some(min), Some(max)) = (
                    literal_bytes(min, capacity_rounding("minCapacity")),
                    literal_bytes(max, capacity_rounding("maxCapacity")),
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
    }

    /// Checks fields whose value is written literally (no template syntax),
    /// so mistakes surface at `pav check` rather than at the first volume.
    pub(super) fn check_literal(&mut self, key: &str, path: &str, value: &Json) {
        if value.as_str().is_some_and(has_template_syntax) {
            return;
        }
        match kind(key) {
            Some(Kind::EnumList { allowed, valid }) => match value {
                Json::Array(items) => {
                    if items.is_empty() {
                        self.problem_schema(path, "must not be empty");
                    }
                    for (index, item) in items.iter().enumerate() {
                        if item.as_str().is_some_and(has_template_syntax) {
                            continue;
                        }
                        if !valid(item) {
                            self.problem_schema(
                                &format!("{path}[{index}]"),
                                &format!("{} is not one of {allowed}", describe_json(item)),
                            );
                        }
                    }
                }
                other => self.problem_schema(
                    path,
                    &format!("must be a list or a template, not {}", describe_json(other)),
                ),
            },
            Some(Kind::Capacity(rounding)) => {
                // Rounded as rendering rounds it, so `pav check` accepts
                // exactly what renders.
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
            Some(Kind::Bytes) => match value {
                Json::String(text) => {
                    if let Err(err) = parse_bytes(text, Rounding::Down) {
                        self.problem_schema(path, &err.to_string());
                    }
                }
                Json::Number(n) if number_bytes(n, Rounding::Down).is_some() => {}
                other => self.problem_schema(
                    path,
                    &format!("must be a quantity, not {}", describe_json(other)),
                ),
            },
            Some(Kind::Message) if !value.is_string() => self.problem_schema(
                path,
                &format!("must be a string, not {}", describe_json(value)),
            ),
            Some(Kind::Handle) => {
                if value.as_str() == Some("") {
                    self.problem_schema(path, "must not be empty");
                } else if !value.is_string() {
                    self.problem_schema(
                        path,
                        &format!("must be a string, not {}", describe_json(value)),
                    );
                }
            }
            Some(Kind::Topology) => {
                let literal = match value {
                    Json::Array(items) => !items
                        .iter()
                        .any(|i| i.as_str().is_some_and(has_template_syntax)),
                    _ => true,
                };
                if literal && let Err(message) = crate::phase::topology_nodes(value) {
                    self.problem_schema(path, &message);
                }
            }
            Some(Kind::Timeout) => {
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
            Some(Kind::PodTemplate) if !value.is_object() && !value.is_string() => {
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
    pub(super) fn check_pod_shape(&mut self, path: &str, pod_template: &Json) -> bool {
        if !pod_template.is_object() || may_become_yaml(pod_template) {
            return false;
        }
        match pod_template_from_json(blank_templates(pod_template), false) {
            Ok(_) => true,
            Err(error) => {
                let message = match &error {
                    PodTemplateError::UnknownField { .. } => error.to_string(),
                    // Perhaps only because templates yield strings here.
                    PodTemplateError::Invalid { message, .. } => format!(
                        "{message} (a template here yields a string; add `{{% set yaml = true %}}` for other types)"
                    ),
                };
                self.problem_schema(&format!("{path}{}", error.at()), &message);
                false
            }
        }
    }
}

pub(super) fn may_become_yaml(value: &Json) -> bool {
    match value {
        Json::String(s) => has_template_syntax(s) && s.contains("yaml"),
        Json::Array(items) => items.iter().any(may_become_yaml),
        Json::Object(map) => map.values().any(may_become_yaml),
        _ => false,
    }
}

pub(super) fn blank_templates(value: &Json) -> Json {
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

pub(super) fn literal_bytes(value: &Json, rounding: Rounding) -> Option<u64> {
    match value {
        Json::String(text) if !has_template_syntax(text) => parse_bytes(text, rounding).ok(),
        Json::Number(n) => number_bytes(n, rounding),
        _ => None,
    }
}

/// A YAML number as bytes: `1e3` is a float in YAML 1.2 but a quantity to
/// the user, so integral and fractional floats are accepted and rounded.
pub(super) fn number_bytes(n: &serde_json::Number, rounding: Rounding) -> Option<u64> {
    match (n.as_u64(), n.as_f64()) {
        (Some(int), _) => Some(int),
        (None, Some(float)) if float.is_finite() && float >= 0.0 => {
            parse_bytes(&float.to_string(), rounding).ok()
        }
        _ => None,
    }
}

pub(super) fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}
