//! Kubernetes resource quantities (`10Gi`, `1.5G`, `100e3`) as exact byte counts.
//!
//! Quantities are parsed exactly (no floating point), then rounded in the
//! direction the caller asks for: PaV rounds a minimum capacity down and a
//! maximum capacity up, so rounding never rejects a request that fits.
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery/pkg/api/resource`):
//! an optional sign, digits with at most one decimal point, and one binary
//! suffix, decimal suffix or `e`/`E` exponent. It has no whitespace, so
//! `"1Gi "` is refused rather than trimmed: a quantity the API server would
//! reject must not pass here.

/// The largest capacity a quantity may name: CSI carries capacities as
/// `int64` (`CapacityRange.required_bytes`, `Volume.capacity_bytes`), so a
/// byte count above `i64::MAX` could not be sent to a driver.
pub const MAX_BYTES: u64 = i64::MAX.unsigned_abs();

/// Significant digits a quantity may have: enough for any byte count up to
/// [`MAX_BYTES`] with 19 digits after the point, few enough that the digits
/// fit a `u128` exactly.
const MAX_SIGNIFICANT_DIGITS: usize = 38;

/// Which way to round a quantity that is not a whole number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Towards zero (`1.5` becomes `1`).
    Down,
    /// Away from zero (`1.5` becomes `2`).
    Up,
}

/// Why a string is not a usable quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid quantity: {problem}")]
pub struct QuantityError {
    input: String,
    problem: QuantityProblem,
}

impl QuantityError {
    /// What is wrong with the quantity.
    pub fn problem(&self) -> &QuantityProblem {
        &self.problem
    }
}

/// What is wrong with a quantity, one variant per step of parsing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantityProblem {
    /// Spaces, tabs or line breaks anywhere in the text.
    #[error("it contains whitespace, which Kubernetes' quantity grammar does not allow")]
    Whitespace,
    /// A leading `-`.
    #[error("negative quantities are not capacities")]
    Negative,
    /// Neither integer nor fractional digits.
    #[error("no digits")]
    NoDigits,
    /// `1.2.3`.
    #[error("more than one decimal point")]
    SecondDecimalPoint,
    /// More digits than are kept exactly.
    #[error("more than {MAX_SIGNIFICANT_DIGITS} significant digits")]
    TooManyDigits,
    /// Not one of `Ki`…`Ei`, `n`…`E`, or an exponent.
    #[error("unknown suffix {0:?}")]
    UnknownSuffix(String),
    /// `1e`, `1e3.5`, `1ex`.
    #[error("exponent {0:?} is not an integer")]
    ExponentNotAnInteger(String),
    /// An exponent beyond 64 bits.
    #[error("exponent {0:?} is out of range")]
    ExponentOutOfRange(String),
    /// More bytes than CSI can carry.
    #[error("more than {MAX_BYTES} bytes (2^63 - 1, the largest capacity CSI's int64 can carry)")]
    TooLarge,
}

/// Parses a Kubernetes quantity into bytes, at most [`MAX_BYTES`].
///
/// ```
/// use pav_templates::quantity::{parse_bytes, Rounding};
/// assert_eq!(parse_bytes("1Gi", Rounding::Up).unwrap(), 1 << 30);
/// assert_eq!(parse_bytes("1.5k", Rounding::Up).unwrap(), 1500);
/// assert_eq!(parse_bytes("1500m", Rounding::Down).unwrap(), 1);
/// assert_eq!(parse_bytes("1500m", Rounding::Up).unwrap(), 2);
/// assert!(parse_bytes("-1", Rounding::Up).is_err());
/// assert!(parse_bytes("1Gi ", Rounding::Up).is_err());
/// ```
pub fn parse_bytes(input: &str, rounding: Rounding) -> Result<u64, QuantityError> {
    parse(input, rounding).map_err(|problem| QuantityError {
        input: input.to_owned(),
        problem,
    })
}

fn parse(input: &str, rounding: Rounding) -> Result<u64, QuantityProblem> {
    if input.chars().any(char::is_whitespace) {
        return Err(QuantityProblem::Whitespace);
    }
    let unsigned = input.strip_prefix('+').unwrap_or(input);
    if unsigned.starts_with('-') {
        return Err(QuantityProblem::Negative);
    }
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(QuantityProblem::NoDigits);
    }
    if frac_part.contains('.') {
        return Err(QuantityProblem::SecondDecimalPoint);
    }
    let (binary_exp, suffix_exp) = suffix_scale(suffix)?;

    // value = significand * 10^decimal_exp * 2^binary_exp. The exponent is
    // kept in i128: an i64 exponent minus the digits after the point cannot
    // overflow it (an i32 did, for `0.1e-2147483648`).
    let mut decimal_exp = suffix_exp - i128::try_from(frac_part.len()).unwrap_or(i128::MAX);
    let all_digits = format!("{int_part}{frac_part}");
    // Zeros that do not change the value must not count against the digit
    // limit: `1.000…0` and `0.000…01` are ordinary quantities.
    let leading_trimmed = all_digits.trim_start_matches('0');
    let significant = leading_trimmed.trim_end_matches('0');
    decimal_exp += i128::try_from(leading_trimmed.len() - significant.len()).unwrap_or(i128::MAX);
    if significant.is_empty() {
        // Zero times any scale is zero, however large the exponent.
        return Ok(0);
    }
    if significant.len() > MAX_SIGNIFICANT_DIGITS {
        return Err(QuantityProblem::TooManyDigits);
    }
    let significand: u128 = significant
        .parse()
        .expect("at most 38 ASCII digits fit a u128");

    let (whole, inexact) = if decimal_exp >= 0 {
        let whole = u32::try_from(decimal_exp)
            .ok()
            .and_then(|exp| 10u128.checked_pow(exp))
            .and_then(|scale| significand.checked_mul(scale))
            .and_then(|n| n.checked_mul(1u128 << binary_exp))
            .ok_or(QuantityProblem::TooLarge)?;
        (whole, false)
    } else {
        scale_down(significand, decimal_exp.unsigned_abs(), binary_exp)?
    };
    let bytes = whole + u128::from(inexact && rounding == Rounding::Up);
    u64::try_from(bytes)
        .ok()
        .filter(|&bytes| bytes <= MAX_BYTES)
        .ok_or(QuantityProblem::TooLarge)
}

/// The binary and decimal exponents a suffix stands for.
fn suffix_scale(suffix: &str) -> Result<(u32, i128), QuantityProblem> {
    Ok(match suffix {
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
            Some(exp) if !exp.is_empty() => match exp.parse::<i64>() {
                Ok(exp) => (0, i128::from(exp)),
                Err(e) => match e.kind() {
                    std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                        return Err(QuantityProblem::ExponentOutOfRange(exp.to_owned()));
                    }
                    _ => return Err(QuantityProblem::ExponentNotAnInteger(exp.to_owned())),
                },
            },
            Some(_) => return Err(QuantityProblem::ExponentNotAnInteger(String::new())),
            None => return Err(QuantityProblem::UnknownSuffix(other.to_owned())),
        },
    })
}

/// `significand * 2^binary_exp / 10^tens` as whole bytes and whether a
/// fraction of a byte was left over, exactly and without overflowing.
fn scale_down(
    significand: u128,
    tens: u128,
    binary_exp: u32,
) -> Result<(u128, bool), QuantityProblem> {
    const MAX_TENS: u32 = 38; // 10^38 is the largest power of ten in a u128
    let Some(divisor) = u32::try_from(tens)
        .ok()
        .filter(|&tens| tens <= MAX_TENS)
        .map(|tens| 10u128.pow(tens))
    else {
        // Divide in two steps: floor(floor(a / b) / c) == floor(a / (b * c)),
        // and a remainder in either step makes the result inexact.
        let (partial, inexact) = scale_down(significand, MAX_TENS.into(), binary_exp)?;
        return Ok(
            match u32::try_from(tens - u128::from(MAX_TENS))
                .ok()
                .and_then(|rest| 10u128.checked_pow(rest))
            {
                Some(rest) => (partial / rest, inexact || partial % rest != 0),
                // partial < 2^60 < 10^19: less than one byte, and not zero.
                None => (0, true),
            },
        );
    };
    let quotient = significand / divisor;
    let mut remainder = significand % divisor;
    let whole = quotient
        .checked_mul(1u128 << binary_exp)
        .ok_or(QuantityProblem::TooLarge)?;
    // Long division of remainder * 2^binary_exp by divisor, one bit at a
    // time; remainder < divisor <= 10^38 < 2^127, so doubling it fits.
    let mut fraction_bits = 0u128;
    for _ in 0..binary_exp {
        remainder <<= 1;
        fraction_bits <<= 1;
        if remainder >= divisor {
            remainder -= divisor;
            fraction_bits |= 1;
        }
    }
    let whole = whole
        .checked_add(fraction_bits)
        .ok_or(QuantityProblem::TooLarge)?;
    Ok((whole, remainder != 0))
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
            ("1e+3", 1000),
            ("1.5Gi", 3 << 29),
            (".5Ki", 512),
            ("1.", 1),
            ("+7", 7),
            ("123456789", 123_456_789),
            ("1.0000000000000000000000000000000000000000000000", 1),
            ("00000000000000000000000000000000000000000000001", 1),
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
        // 0.001 * 1024 = 1.024 bytes.
        assert_eq!(parse_bytes("0.001Ki", Rounding::Down), Ok(1));
        assert_eq!(parse_bytes("0.001Ki", Rounding::Up), Ok(2));
        // 0.0009765625 * 1024 is exactly 1.
        assert_eq!(parse_bytes("0.0009765625Ki", Rounding::Up), Ok(1));
    }

    #[test]
    fn invalid_quantities_are_refused() {
        for input in [
            "", "Gi", "-1Gi", "1Xi", "1.2.3", "1e", "1ee3", "abc", "1 Gi", "16Ei", "1e30",
        ] {
            assert!(parse_bytes(input, Rounding::Up).is_err(), "{input:?}");
        }
        let message = parse_bytes("5Q", Rounding::Up).unwrap_err().to_string();
        assert_eq!(
            message,
            "\"5Q\" is not a valid quantity: unknown suffix \"Q\""
        );
    }
}
