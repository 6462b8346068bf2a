//! Phase timeouts written as Go-style durations (`90s`, `5m`, `1h30m`).

use std::time::Duration;

/// Longest timeout a phase may have: a step stuck for a day needs a human.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Parses `90`, `90s`, `5m`, `1h30m`, `1m30s` or `500ms` into a positive
/// duration of at most [`MAX_TIMEOUT`].
///
/// ```
/// use pav_templates::duration::parse_timeout;
/// use std::time::Duration;
/// assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_timeout("45"), Ok(Duration::from_secs(45)));
/// assert!(parse_timeout("0s").is_err());
/// assert!(parse_timeout("soon").is_err());
/// ```
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration such as 90s, 5m or 1h30m");
    let text = text.trim();
    if text.is_empty() {
        return Err(invalid());
    }
    let total = if text.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(text.parse().map_err(|_| invalid())?)
    } else {
        let mut total = Duration::ZERO;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(invalid)?;
            if digits == 0 {
                return Err(invalid());
            }
            let amount: u64 = rest[..digits].parse().map_err(|_| invalid())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = match &rest[..unit_len] {
                "h" => Duration::from_secs(3600),
                "m" => Duration::from_secs(60),
                "s" => Duration::from_secs(1),
                "ms" => Duration::from_millis(1),
                _ => return Err(invalid()),
            };
            rest = &rest[unit_len..];
            let part = unit
                .checked_mul(u32::try_from(amount).map_err(|_| invalid())?)
                .ok_or_else(invalid)?;
            total = total.checked_add(part).ok_or_else(invalid)?;
        }
        total
    };
    if total.is_zero() {
        return Err(format!("{text:?} is not a positive duration"));
    }
    if total > MAX_TIMEOUT {
        return Err(format!("{text:?} is longer than the maximum of 24h"));
    }
    Ok(total)
}

/// Writes a duration as whole seconds (`300s`), or milliseconds when it
/// has a fraction of a second.
pub(crate) fn format_timeout(duration: &Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_go_style_durations() {
        for (text, secs) in [
            ("1s", 1),
            ("90s", 90),
            ("5m", 300),
            ("1h", 3600),
            ("1h30m", 5400),
            ("1m30s", 90),
            ("24h", 86400),
            ("120", 120),
        ] {
            assert_eq!(parse_timeout(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(parse_timeout("1500ms"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn refuses_the_rest() {
        for text in [
            "", "s", "5x", "m5", "1.5m", "-1s", "25h", "0", "0s", "1h 30m", "90000",
        ] {
            assert!(parse_timeout(text).is_err(), "{text:?}");
        }
    }
}
