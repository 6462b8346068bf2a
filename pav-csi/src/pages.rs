//! Pagination of `ListVolumes` and `ListSnapshots`.
//!
//! A token names the last entry of the page before it (`after:` and its
//! key in hex), not a position: an entry deleted or added between pages
//! neither shifts nor repeats the ones after it, and the token stays valid
//! when the entry it names is gone.

use tonic::Code;

const PREFIX: &str = "after:";

/// The longest token this driver issues: the prefix and a 128-byte key in hex.
const MAX_TOKEN: usize = PREFIX.len() + 2 * crate::limits::MAX_STRING;

/// Why a page was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PageError {
    /// A negative `max_entries` (`INVALID_ARGUMENT`).
    #[error("max_entries {max_entries} must not be negative")]
    Negative { max_entries: i32 },
    /// A token this driver did not issue (`ABORTED`, as the spec says),
    /// cut to the longest one it issues.
    #[error("starting_token {token:?} was not issued by this driver")]
    Foreign { token: String },
}

impl PageError {
    /// The code of a request refused for it.
    pub(crate) fn code(&self) -> Code {
        match self {
            PageError::Negative { .. } => Code::InvalidArgument,
            PageError::Foreign { .. } => Code::Aborted,
        }
    }
}

/// One page of `entries` (key, entry): those whose key sorts after the
/// `starting_token`'s, at most `max_entries` of them (0: all), and the token
/// of the next page (empty when this is the last). A token this driver did
/// not issue is `ABORTED`, as the spec says; a negative `max_entries` is
/// `INVALID_ARGUMENT`.
pub(crate) fn page<T>(
    mut entries: Vec<(String, T)>,
    starting_token: &str,
    max_entries: i32,
) -> Result<(Vec<T>, String), PageError> {
    let max_entries =
        usize::try_from(max_entries).map_err(|_| PageError::Negative { max_entries })?;
    let after = match starting_token {
        "" => None,
        token => Some(decode(token).ok_or_else(|| PageError::Foreign {
            token: token.chars().take(MAX_TOKEN).collect(),
        })?),
    };
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.retain(|(key, _)| after.as_ref().is_none_or(|after| key > after));
    let more = max_entries != 0 && entries.len() > max_entries;
    if more {
        entries.truncate(max_entries);
    }
    let next_token = match (more, entries.last()) {
        (true, Some((key, _))) => encode(key),
        _ => String::new(),
    };
    Ok((
        entries.into_iter().map(|(_, entry)| entry).collect(),
        next_token,
    ))
}

fn encode(key: &str) -> String {
    let mut token = String::from(PREFIX);
    for byte in key.bytes() {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}

fn decode(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN {
        return None;
    }
    let hex = token.strip_prefix(PREFIX)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(keys: &[&str]) -> Vec<(String, String)> {
        keys.iter()
            .map(|k| (k.to_string(), k.to_string()))
            .collect()
    }

    #[test]
    fn pages_follow_the_last_key_not_a_position() {
        let all = keys(&["c", "a", "e", "b", "d"]);
        let (first, token) = page(all.clone(), "", 2).unwrap();
        assert_eq!(first, ["a", "b"]);
        // "b" (the page's last) deleted and "a2" added before it: the next
        // page still starts after "b".
        let changed = keys(&["a", "a2", "c", "d", "e"]);
        let (second, token) = page(changed.clone(), &token, 2).unwrap();
        assert_eq!(second, ["c", "d"]);
        let (last, token) = page(changed, &token, 2).unwrap();
        assert_eq!((last, token.as_str()), (vec!["e".to_owned()], ""));
        let (everything, token) = page(all, "", 0).unwrap();
        assert_eq!((everything.len(), token.as_str()), (5, ""));
    }

    #[test]
    fn foreign_tokens_are_aborted_and_negative_sizes_invalid() {
        for token in [
            "invalid-token",
            "after:zz",
            "after:6",
            "after:ff",
            &"a".repeat(5000),
        ] {
            let error = page(keys(&["a"]), token, 0).unwrap_err();
            assert_eq!(error.code(), tonic::Code::Aborted, "{token}");
        }
        let error = page(keys(&["a"]), "", -1).unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        let long = "v".repeat(128);
        let (_, token) = page(keys(&[&long, "w"]), "", 1).unwrap();
        assert_eq!(page(keys(&["w"]), &token, 0).unwrap().0, ["w"]);
    }
}
