//! Kubernetes resource quantities (`10Gi`, `1.5G`, `100e3`) as exact byte counts.
//!
//! Quantities are parsed exactly (no floating point), then rounded in the
//! direction the caller asks for: PaV rounds a minimum capacity down and a
//! maximum capacity up, so rounding never rejects a request that fits.

use std::fmt;

/// Which way to round a quantity that is not a whole number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Towards zero (`1.5` becomes `1`).
    Down,
    /// Away from zero (`1.5` becomes `2`).
    Up,
}

/// Why a string is not a usable quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a valid quantity: {}",
            self.input, self.reason
        )
    }
}

impl std::error::Error for QuantityError {}

/// Parses a Kubernetes quantity into bytes.
///
/// ```
/// use pav_templates::quantity::{parse_bytes, Rounding};
/// assert_eq!(parse_bytes("1Gi", Rounding::Up).unwrap(), 1 << 30);
/// assert_eq!(parse_bytes("1.5k", Rounding::Up).unwrap(), 1500);
/// assert_eq!(parse_bytes("1500m", Rounding::Down).unwrap(), 1);
/// assert_eq!(parse_bytes("1500m", Rounding::Up).unwrap(), 2);
/// assert!(parse_bytes("-1", Rounding::Up).is_err());
/// ```
pub fn parse_bytes(input: &str, rounding: Rounding) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err(err("negative quantities are not capacities"));
    }
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err("no digits"));
    }
    if frac_part.contains('.') {
        return Err(err("more than one decimal point"));
    }

    let (binary_exp, mut decimal_exp): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        other => match other.strip_prefix(['e', 'E']) {
            Some(exp) if !exp.is_empty() => (
                0,
                exp.parse::<i32>()
                    .map_err(|_| err("exponent is not an integer"))?,
            ),
            _ => return Err(err("unknown suffix")),
        },
    };

    // value = mantissa * 10^decimal_exp * 2^binary_exp, all in integers.
    let mut mantissa: u128 = 0;
    for digit in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(digit - b'0')))
            .ok_or_else(|| err("too large"))?;
    }
    decimal_exp -= i32::try_from(frac_part.len()).map_err(|_| err("too many digits"))?;
    mantissa = mantissa
        .checked_mul(1u128 << binary_exp)
        .ok_or_else(|| err("too large"))?;

    let bytes = if decimal_exp >= 0 {
        10u128
            .checked_pow(decimal_exp.unsigned_abs())
            .and_then(|scale| mantissa.checked_mul(scale))
            .ok_or_else(|| err("too large"))?
    } else {
        match 10u128.checked_pow(decimal_exp.unsigned_abs()) {
            // A divisor beyond u128 leaves only a fraction of a byte.
            None => u128::from(mantissa != 0 && rounding == Rounding::Up),
            Some(scale) => {
                let whole = mantissa / scale;
                let inexact = !mantissa.is_multiple_of(scale);
                whole + u128::from(inexact && rounding == Rounding::Up)
            }
        }
    };
    u64::try_from(bytes).map_err(|_| err("more bytes than fit in 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_exponents() {
        let cases = [
            ("0", 0),
            ("1", 1),
            ("1Ki", 1024),
            ("1Mi", 1 << 20),
            ("10Gi", 10 << 30),
            ("1Ti", 1 << 40),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("1k", 1000),
            ("1M", 1_000_000),
            ("2G", 2_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1.5Gi", 3 << 29),
            (".5Ki", 512),
            ("+7", 7),
            ("123456789", 123_456_789),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_bytes(input, Rounding::Up), Ok(expected), "{input}");
            assert_eq!(parse_bytes(input, Rounding::Down), Ok(expected), "{input}");
        }
    }

    #[test]
    fn fractions_round_as_asked() {
        assert_eq!(parse_bytes("1500m", Rounding::Down), Ok(1));
        assert_eq!(parse_bytes("1500m", Rounding::Up), Ok(2));
        assert_eq!(parse_bytes("1n", Rounding::Down), Ok(0));
        assert_eq!(parse_bytes("1n", Rounding::Up), Ok(1));
        assert_eq!(parse_bytes("1e-60", Rounding::Up), Ok(1));
        assert_eq!(parse_bytes("1e-60", Rounding::Down), Ok(0));
        assert_eq!(parse_bytes("0.1", Rounding::Up), Ok(1));
    }

    #[test]
    fn invalid_quantities_are_refused() {
        for input in [
            "", "Gi", "-1Gi", "1Xi", "1.2.3", "1e", "1ee3", "abc", "1 Gi", "16Ei", "1e30",
        ] {
            assert!(parse_bytes(input, Rounding::Up).is_err(), "{input:?}");
        }
        let message = parse_bytes("5Q", Rounding::Up).unwrap_err().to_string();
        assert_eq!(message, "\"5Q\" is not a valid quantity: unknown suffix");
    }
}
