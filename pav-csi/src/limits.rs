//! Required-field and size-limit checks from the CSI spec ("Size Limits").

use std::collections::HashMap;

use tonic::Status;

/// Strings (names, ids) may be at most 128 bytes.
pub(crate) const MAX_STRING: usize = 128;
/// A string map may hold at most 4 KiB of keys and values.
pub(crate) const MAX_MAP: usize = 4096;
/// Paths override the string limit; we accept what Linux accepts.
pub(crate) const MAX_PATH: usize = 4096;

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
    if value.len() > MAX_PATH {
        return Err(Status::invalid_argument(format!(
            "{field} is longer than {MAX_PATH} bytes"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field() {
        assert!(required("name", "").unwrap_err().message().contains("name"));
        assert!(required("volume_id", &"x".repeat(129)).is_err());
        assert!(required("volume_id", &"x".repeat(128)).is_ok());
        let big = HashMap::from([("k".to_owned(), "v".repeat(4096))]);
        assert!(
            map("parameters", &big)
                .unwrap_err()
                .message()
                .contains("parameters")
        );
    }
}
