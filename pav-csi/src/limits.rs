//! Required-field and size-limit checks from the CSI spec ("Size Limits").

use std::collections::HashMap;

use tonic::Status;

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

/// A repeated field of at most [`MAX_REPEATED`] entries.
pub(crate) fn repeated(field: &str, len: usize) -> Result<(), Status> {
    if len > MAX_REPEATED {
        return Err(Status::invalid_argument(format!(
            "{field} has {len} entries, more than the {MAX_REPEATED} this driver accepts"
        )));
    }
    Ok(())
}

/// A size or count the provisioner answered, as CSI's int64: one that does
/// not fit is `INTERNAL` naming the field and the value, never clamped.
pub(crate) fn int64(field: &str, value: u64) -> Result<i64, Status> {
    i64::try_from(value).map_err(|_| {
        Status::internal(format!(
            "the provisioner answered {field} = {value}, more than CSI's int64 carries"
        ))
    })
}

/// A required string field: non-empty and within the string size limit.
pub(crate) fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    limited(field, value)
}

/// An optional string field within the string size limit.
pub(crate) fn limited<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.len() > MAX_STRING {
        return Err(Status::invalid_argument(format!(
            "{field} is {} bytes, more than the {MAX_STRING} bytes CSI allows",
            value.len()
        )));
    }
    Ok(value)
}

/// A required path field: non-empty and at most [`MAX_PATH`] bytes.
pub(crate) fn required_path<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    path(field, value)
}

/// An optional path field: at most [`MAX_PATH`] bytes.
pub(crate) fn path<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.len() > MAX_PATH {
        return Err(Status::invalid_argument(format!(
            "{field} is longer than {MAX_PATH} bytes"
        )));
    }
    Ok(value)
}

/// `CreateVolumeRequest.name`: required, within the string limit, and free
/// of the control characters the spec bans (U+0000-U+0008, U+000B, U+000C,
/// U+000E-U+001F, U+007F-U+009F).
pub(crate) fn name<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    let value = required(field, value)?;
    let banned = |c: char| matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}');
    if let Some(c) = value.chars().find(|c| banned(*c)) {
        return Err(Status::invalid_argument(format!(
            "{field} contains the control character U+{:04X}, which CSI bans",
            u32::from(c)
        )));
    }
    Ok(value)
}

/// A string map within the 4 KiB map size limit.
pub(crate) fn map(field: &str, value: &HashMap<String, String>) -> Result<(), Status> {
    let size: usize = value.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_MAP {
        return Err(Status::invalid_argument(format!(
            "{field} holds {size} bytes, more than the {MAX_MAP} bytes CSI allows"
        )));
    }
    Ok(())
}

/// Topology segments: a string map whose keys are `[prefix/]name` with
/// each part at most 63 characters (name required), and whose values are 1
/// to 63 characters, as the spec's `Topology` message requires.
pub(crate) fn topology(field: &str, segments: &HashMap<String, String>) -> Result<(), Status> {
    map(field, segments)?;
    let part = |s: &str, required: bool| {
        s.chars().count() <= 63 && !s.contains('/') && (!required || !s.is_empty())
    };
    for (key, value) in segments {
        let (prefix, name) = key.split_once('/').unwrap_or(("", key));
        if !part(prefix, false) || !part(name, true) {
            return Err(Status::invalid_argument(format!(
                "{field}: key {key:?} must be [prefix/]name with each part at most 63 characters"
            )));
        }
        if !part(value, true) {
            return Err(Status::invalid_argument(format!(
                "{field}: the value of {key:?} must be 1 to 63 characters without '/'"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field() {
        assert!(required("name", "").unwrap_err().message().contains("name"));
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
                .message()
                .contains("parameters")
        );
    }
}
