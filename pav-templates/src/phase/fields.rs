//! The evaluated keys of a phase decoded into their types (lists of
//! modes, capacities, handle, pod template, timeout), leftovers refused;
//! and the one table of what each key holds, which `pav check` reads for
//! the keys as written.
//!
//! It knows of the provisioner only what [`Fields`] is given, so that
//! the phases it serves never depend on how a provisioner is compiled.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::Deserialize as _;
use serde_json::{Map, Value as Json};

use crate::duration::parse_timeout;
use crate::error::{Error, Location, Result};
use crate::phase::Phase;
use crate::quantity::{Rounding, parse_bytes};
use crate::volume::{AccessMode, VolumeMode};

/// The rendered keys of one phase, taken out one by one so that leftovers
/// are reported as unknown fields; with what decoding them needs to know
/// of their provisioner.
pub struct Fields<'a> {
    /// `metadata.name` of the provisioner, for the errors' locations.
    pub(crate) provisioner: &'a str,
    pub(crate) phase: Phase,
    /// `spec.<field>` of the phase.
    pub(crate) path: String,
    pub(crate) map: Map<String, Json>,
    /// The phase's pod template's fields were all checked at compile time,
    /// so decoding it needs only a plain conversion.
    pub(crate) pod_shape_checked: bool,
    /// `spec.provisioningModes` contains Dynamic: a creation must then say
    /// how big the volume is, in its `capacity` or through its pod.
    pub(crate) dynamic: bool,
}

impl Fields<'_> {
    pub(super) fn take(&mut self, key: &str) -> Option<Json> {
        // An explicit null means "not specified", as in the original PaV.
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// Where `path` is, in this phase's provisioner.
    fn location_at(&self, path: String) -> Location {
        Location {
            provisioner: self.provisioner.to_owned(),
            path,
            line: None,
        }
    }

    pub(super) fn location(&self, key: &str) -> Location {
        self.location_at(format!("{}.{key}", self.path))
    }

    pub(super) fn location_of_phase(&self) -> Location {
        self.location_at(self.path.clone())
    }

    pub(super) fn evaluated(&self, key: &str, message: String) -> Error {
        Error::Evaluated {
            at: self.location(key),
            message,
        }
    }

    pub(super) fn enum_list<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        value: Json,
    ) -> Result<Vec<T>> {
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
                at: self.location(&format!("{key}[{index}]")),
                message: format!("{text} is not one of {}", allowed_values(key)),
            })?;
            out.push(parsed);
        }
        Ok(out)
    }

    pub(super) fn capacity(&self, key: &str, value: Json) -> Result<u64> {
        let bytes = self.bytes(key, value)?;
        if bytes == 0 {
            return Err(self.evaluated(key, "must be a positive capacity, not 0 bytes".into()));
        }
        Ok(bytes)
    }

    /// The capacity at `key` ([`Fields::capacity`]), if the spec gives one.
    pub(super) fn optional_capacity(&mut self, key: &str) -> Result<Option<u64>> {
        let value = self.take(key);
        value.map(|value| self.capacity(key, value)).transpose()
    }

    /// The bytes at `key` ([`Fields::bytes`]), if the spec gives them.
    pub(super) fn optional_bytes(&mut self, key: &str) -> Result<Option<u64>> {
        let value = self.take(key);
        value.map(|value| self.bytes(key, value)).transpose()
    }

    /// A quantity of bytes, 0 allowed (room that is used up).
    pub(super) fn bytes(&self, key: &str, value: Json) -> Result<u64> {
        let rounding = match kind(key) {
            Some(Kind::Bytes) => Rounding::Down,
            _ => capacity_rounding(key),
        };
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
        Ok(bytes)
    }

    /// A non-empty string key (`handle`), if present.
    pub(super) fn handle(&mut self, key: &str) -> Result<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Json::String(handle)) if !handle.is_empty() => Ok(Some(handle)),
            Some(other) => Err(self.evaluated(
                key,
                format!(
                    "must evaluate to a non-empty string, not {}",
                    describe_json(&other)
                ),
            )),
        }
    }

    /// A message key (`refusal`): `None` when absent or empty.
    pub(super) fn message(&mut self, key: &str) -> Result<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Json::String(text)) => {
                let text = text.trim();
                Ok((!text.is_empty()).then(|| text.to_owned()))
            }
            Some(other) => Err(self.evaluated(
                key,
                format!("must evaluate to a string, not {}", describe_json(&other)),
            )),
        }
    }

    /// The pod template of a phase that cannot do without one: a
    /// whole-phase template may still evaluate to none.
    pub(super) fn mandatory_pod_template(&mut self) -> Result<PodTemplateSpec> {
        self.pod_template()?.ok_or_else(|| Error::Evaluated {
            at: self.location("podTemplate"),
            message: "is required".into(),
        })
    }

    pub(super) fn pod_template(&mut self) -> Result<Option<PodTemplateSpec>> {
        let Some(value) = self.take("podTemplate") else {
            return Ok(None);
        };
        pod_template_from_json(value, self.pod_shape_checked)
            .map(Some)
            .map_err(|error| Error::Evaluated {
                at: self.location(&format!("podTemplate{}", error.at())),
                message: error.to_string(),
            })
    }

    pub(super) fn timeout(&mut self) -> Result<Option<std::time::Duration>> {
        self.duration("timeout")
    }

    /// A duration key (`timeout`, `cacheFor`), if present.
    pub(super) fn duration(&mut self, key: &str) -> Result<Option<std::time::Duration>> {
        match self.take(key) {
            None => Ok(None),
            Some(Json::String(text)) => parse_timeout(&text)
                .map(Some)
                .map_err(|message| self.evaluated(key, message)),
            Some(Json::Number(n)) => parse_timeout(&n.to_string())
                .map(Some)
                .map_err(|message| self.evaluated(key, message)),
            Some(other) => Err(self.evaluated(
                key,
                format!(
                    "must evaluate to a duration such as 5m, not {}",
                    describe_json(&other)
                ),
            )),
        }
    }

    /// Refuses the first key no decoding took: an unknown field.
    pub(crate) fn finish(self) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(Error::Evaluated {
                at: self.location(key),
                message: format!("unknown field (allowed: {})", self.phase.keys().join(", ")),
            }),
        }
    }
}

/// Why a value is no PodTemplateSpec; `at` is the offending field's path
/// below the pod template (empty for the template itself).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodTemplateError {
    /// A field of the wrong type or value: serde's message.
    #[error("{message}")]
    Invalid { at: String, message: String },
    /// A field PodTemplateSpec does not have.
    #[error("unknown field")]
    UnknownField { at: String },
}

impl PodTemplateError {
    /// The offending field's path below the pod template.
    pub(crate) fn at(&self) -> &str {
        match self {
            PodTemplateError::Invalid { at, .. } | PodTemplateError::UnknownField { at } => at,
        }
    }
}

/// Converts an evaluated pod template, naming the first field Kubernetes
/// would not accept: a wrong type, or a field PodTemplateSpec does not have
/// (typos such as `comand` would otherwise vanish silently).
pub(crate) fn pod_template_from_json(
    value: Json,
    shape_checked: bool,
) -> std::result::Result<PodTemplateSpec, PodTemplateError> {
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
        PodTemplateError::Invalid {
            at: sub,
            message: err.into_inner().to_string(),
        }
    })?;
    let round_trip = serde_json::to_value(&template).unwrap_or(Json::Null);
    if let Some(unknown) = first_dropped_field(&value, &round_trip, String::new()) {
        return Err(PodTemplateError::UnknownField { at: unknown });
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

pub(crate) fn describe_json(value: &Json) -> String {
    match value {
        Json::Null => "null".into(),
        Json::Bool(b) => format!("boolean {b}"),
        Json::Number(n) => format!("number {n}"),
        Json::String(s) => format!("{s:?}"),
        Json::Array(_) => "a list".into(),
        Json::Object(_) => "an object".into(),
    }
}

/// What one key of a phase holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A non-empty list of an enum's values: the values allowed, and
    /// whether a JSON value is one of them.
    EnumList {
        allowed: &'static str,
        valid: fn(&Json) -> bool,
    },
    /// A positive capacity; a fraction of a byte rounds this way: a
    /// volume's least and given capacity down, its greatest up, so that
    /// rounding never asks for more than the claim allows.
    Capacity(Rounding),
    /// A quantity of bytes that may be 0 (free room), rounded down.
    Bytes,
    /// A non-empty string.
    Handle,
    /// A message, empty for none.
    Message,
    /// Node names: one, or a non-empty list ([`crate::phase::topology_nodes`]).
    Topology,
    /// A duration such as `5m`.
    Timeout,
    /// A PodTemplateSpec.
    PodTemplate,
}

/// Whether `value` deserializes as a `T`.
fn is<T: serde::de::DeserializeOwned>(value: &Json) -> bool {
    T::deserialize(value).is_ok()
}

/// Every key of every phase and what it holds: the one table `pav check`
/// (a literal value) and rendering (the evaluated one) both read. Which
/// phase has which keys is [`Phase::keys`].
const KEYS: [(&str, Kind); 15] = [
    (
        "volumeModes",
        Kind::EnumList {
            allowed: "Filesystem, Block",
            valid: is::<VolumeMode>,
        },
    ),
    (
        "accessModes",
        Kind::EnumList {
            allowed: "ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod",
            valid: is::<AccessMode>,
        },
    ),
    ("minCapacity", Kind::Capacity(Rounding::Down)),
    ("maxCapacity", Kind::Capacity(Rounding::Up)),
    ("capacity", Kind::Capacity(Rounding::Down)),
    // A snapshot's size is what a restored volume needs: never less.
    ("size", Kind::Capacity(Rounding::Up)),
    ("handle", Kind::Handle),
    ("topology", Kind::Topology),
    ("timeout", Kind::Timeout),
    ("podTemplate", Kind::PodTemplate),
    // Free room may be none; a volume never.
    ("availableCapacity", Kind::Bytes),
    ("maximumVolumeSize", Kind::Capacity(Rounding::Down)),
    ("cacheFor", Kind::Timeout),
    ("every", Kind::Timeout),
    ("refusal", Kind::Message),
];

/// What `key` holds ([`KEYS`]); `None` for a key no phase has.
pub(crate) fn kind(key: &str) -> Option<Kind> {
    KEYS.iter().find(|(k, _)| *k == key).map(|(_, kind)| *kind)
}

/// The values allowed in the enum list `key`.
fn allowed_values(key: &str) -> &'static str {
    match kind(key) {
        Some(Kind::EnumList { allowed, .. }) => allowed,
        _ => unreachable!("{key} is no enum list"),
    }
}

/// How the capacity `key` rounds a fraction of a byte.
pub(crate) fn capacity_rounding(key: &str) -> Rounding {
    match kind(key) {
        Some(Kind::Capacity(rounding)) => rounding,
        _ => unreachable!("{key} is no capacity"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table and the phases' keys agree: every key a phase has says
    /// what it holds, and the table lists no key that no phase has.
    #[test]
    fn every_phase_key_has_one_kind() {
        for phase in Phase::ALL {
            for key in phase.keys() {
                assert!(kind(key).is_some(), "{phase}: {key}");
            }
        }
        for (key, _) in KEYS {
            assert!(
                Phase::ALL.iter().any(|p| p.keys().contains(&key)),
                "{key} belongs to no phase"
            );
            assert_eq!(
                KEYS.iter().filter(|(k, _)| *k == key).count(),
                1,
                "{key} listed twice"
            );
        }
        assert!(matches!(
            kind("maxCapacity"),
            Some(Kind::Capacity(Rounding::Up))
        ));
        assert!(matches!(
            kind("minCapacity"),
            Some(Kind::Capacity(Rounding::Down))
        ));
        let Some(Kind::EnumList { valid, .. }) = kind("volumeModes") else {
            panic!("volumeModes is an enum list");
        };
        assert!(valid(&Json::from("Block")));
        assert!(!valid(&Json::from("ReadWriteOnce")));
    }
}
