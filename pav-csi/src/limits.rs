//! Required-field and size-limit checks from the CSI spec ("Size Limits").

use std::collections::HashMap;

use tonic::Code;

/// Strings (names, ids) may be at most 128 bytes.
pub(crate) const MAX_STRING: usize = 128;
/// A string map may hold at most 4 KiB of keys and values.
pub(crate) const MAX_MAP: usize = 4096;
/// Paths override the string limit; we accept what Linux accepts.
pub(crate) const MAX_PATH: usize = 4096;
/// Repeated fields (capabilities, mount flags, topologies) may hold at
/// most this many entries. CSI sets no limit; kubelet and the sidecars send
/// a handful, and every entry is kept in the `CreateVolume` answer cache.
pub(crate) const MAX_REPEATED: usize = 64;

/// A field that breaks a size limit or a rule of the spec, named as the
/// request (or the answer) spells it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LimitError {
    /// A required field is empty.
    #[error("{field} is required")]
    Required { field: String },
    /// A string longer than [`MAX_STRING`].
    #[error("{field} is {len} bytes, more than the {MAX_STRING} bytes CSI allows")]
    TooLong { field: String, len: usize },
    /// A path longer than [`MAX_PATH`].
    #[error("{field} is longer than {MAX_PATH} bytes")]
    PathTooLong { field: String },
    /// A repeated field with more than [`MAX_REPEATED`] entries.
    #[error("{field} has {len} entries, more than the {MAX_REPEATED} this driver accepts")]
    TooMany { field: String, len: usize },
    /// A name with a control character the spec bans.
    #[error("{field} contains the control character U+{code_point:04X}, which CSI bans")]
    ControlCharacter { field: String, code_point: u32 },
    /// A string map larger than [`MAX_MAP`].
    #[error("{field} holds {size} bytes, more than the {MAX_MAP} bytes CSI allows")]
    MapTooBig { field: String, size: usize },
    /// A topology key that is not `[prefix/]name`.
    #[error("{field}: key {key:?} must be [prefix/]name with each part at most 63 characters")]
    TopologyKey { field: String, key: String },
    /// A topology value that is empty, too long or holds a `/`.
    #[error("{field}: the value of {key:?} must be 1 to 63 characters without '/'")]
    TopologyValue { field: String, key: String },
}

impl LimitError {
    /// The code of a request refused for it: `INVALID_ARGUMENT`. (An
    /// answer of the provisioner that breaks a limit is `INTERNAL`: the
    /// RPC that checks one says so.)
    pub(crate) fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

/// A size or count the provisioner answered that CSI's int64 cannot carry.
#[derive(Debug, thiserror::Error)]
#[error("the provisioner answered {field} = {value}, more than CSI's int64 carries")]
pub(crate) struct Int64Error {
    field: String,
    value: u64,
}

/// A repeated field of at most [`MAX_REPEATED`] entries.
pub(crate) fn repeated(field: &str, len: usize) -> Result<(), LimitError> {
    if len > MAX_REPEATED {
        return Err(LimitError::TooMany {
            field: field.to_owned(),
            len,
        });
    }
    Ok(())
}

/// A size or count the provisioner answered, as CSI's int64: one that does
/// not fit is an error naming the field and the value (`INTERNAL`), never
/// clamped.
pub(crate) fn int64(field: &str, value: u64) -> Result<i64, Int64Error> {
    i64::try_from(value).map_err(|_| Int64Error {
        field: field.to_owned(),
        value,
    })
}

/// A required string field: non-empty and within the string size limit.
pub(crate) fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, LimitError> {
    if value.is_empty() {
        return Err(LimitError::Required {
            field: field.to_owned(),
        });
    }
    limited(field, value)
}

/// An optional string field within the string size limit.
pub(crate) fn limited<'a>(field: &str, value: &'a str) -> Result<&'a str, LimitError> {
    if value.len() > MAX_STRING {
        return Err(LimitError::TooLong {
            field: field.to_owned(),
            len: value.len(),
        });
    }
    Ok(value)
}

/// A required path field: non-empty and at most [`MAX_PATH`] bytes.
pub(crate) fn required_path<'a>(field: &str, value: &'a str) -> Result<&'a str, LimitError> {
    if value.is_empty() {
        return Err(LimitError::Required {
            field: field.to_owned(),
        });
    }
    path(field, value)
}

/// An optional path field: at most [`MAX_PATH`] bytes.
pub(crate) fn path<'a>(field: &str, value: &'a str) -> Result<&'a str, LimitError> {
    if value.len() > MAX_PATH {
        return Err(LimitError::PathTooLong {
            field: field.to_owned(),
        });
    }
    Ok(value)
}

/// `CreateVolumeRequest.name`: required, within the string limit, and free
/// of the control characters the spec bans (U+0000-U+0008, U+000B, U+000C,
/// U+000E-U+001F, U+007F-U+009F).
pub(crate) fn name<'a>(field: &str, value: &'a str) -> Result<&'a str, LimitError> {
    let value = required(field, value)?;
    let banned = |c: char| matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}');
    if let Some(c) = value.chars().find(|c| banned(*c)) {
        return Err(LimitError::ControlCharacter {
            field: field.to_owned(),
            code_point: u32::from(c),
        });
    }
    Ok(value)
}

/// A string map within the 4 KiB map size limit.
pub(crate) fn map(field: &str, value: &HashMap<String, String>) -> Result<(), LimitError> {
    let size: usize = value.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_MAP {
        return Err(LimitError::MapTooBig {
            field: field.to_owned(),
            size,
        });
    }
    Ok(())
}

/// Topology segments: a string map whose keys are `[prefix/]name` with
/// each part at most 63 characters (name required), and whose values are 1
/// to 63 characters, as the spec's `Topology` message requires.
pub(crate) fn topology(field: &str, segments: &HashMap<String, String>) -> Result<(), LimitError> {
    map(field, segments)?;
    let part = |s: &str, required: bool| {
        s.chars().count() <= 63 && !s.contains('/') && (!required || !s.is_empty())
    };
    for (key, value) in segments {
        let (prefix, name) = key.split_once('/').unwrap_or(("", key));
        if !part(prefix, false) || !part(name, true) {
            return Err(LimitError::TopologyKey {
                field: field.to_owned(),
                key: key.clone(),
            });
        }
        if !part(value, true) {
            return Err(LimitError::TopologyValue {
                field: field.to_owned(),
                key: key.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field() {
        assert!(
            required("name", "")
                .unwrap_err()
                .to_string()
                .contains("name")
        );
        assert!(required("volume_id", &"x".repeat(129)).is_err());
        assert!(required("volume_id", &"x".repeat(128)).is_ok());
        assert!(name("name", "pvc-1\tx").is_ok(), "tab is allowed");
        assert!(name("name", "pvc-1\u{85}").is_err());
        assert!(name("name", "pvc\u{1b}[0m").is_err());
        assert!(path("staging_target_path", &"/".repeat(4097)).is_err());
        let big = HashMap::from([("k".to_owned(), "v".repeat(4096))]);
        assert!(
            map("parameters", &big)
                .unwrap_err()
                .to_string()
                .contains("parameters")
        );
    }
}
