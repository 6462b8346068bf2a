//! Numbers as Python has them: how they print, and the `int` and `float`
//! filters.
//!
//! minijinja computes with 64-bit integers and widens to 128 bits
//! (`-2**127` to `2**128 - 1`) when a result needs it; beyond that an
//! operation is an error ("unable to calculate"), where Python's integers
//! grow without bound. Within that range every integer prints, converts and
//! serialises exactly, as in Python.

use minijinja::value::{Kwargs, Rest, Value, ValueKind, from_args};
use minijinja::{Error as JinjaError, ErrorKind};

use super::args::{keyword, keywords};

/// Python's `str()` of a number: integers in full, floats as `repr` does
/// (`1.0`, `1e+16`, `1e-05`).
pub(crate) fn python_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(float) => python_float(float),
        Err(_) => value.to_string(),
    }
}

/// Python's `repr()` of a float: the shortest digits that read back as the
/// same float, positional from `1e-4` up to `1e16`, scientific outside.
pub(crate) fn python_float(float: f64) -> String {
    if float.is_nan() {
        return "nan".to_owned();
    }
    if float.is_infinite() {
        return if float > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // `{:e}` gives the shortest digits that round-trip, as Python's repr does.
    let scientific = format!("{float:e}");
    let (mantissa, exp) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let (int_part, frac_part) = if point <= 0 {
            let zeros = "0".repeat(point.unsigned_abs() as usize);
            ("0".to_owned(), format!("{zeros}{digits}"))
        } else {
            let point = point as usize;
            if digits.len() > point {
                (digits[..point].to_owned(), digits[point..].to_owned())
            } else {
                (format!("{digits:0<point$}"), String::new())
            }
        };
        let frac_part = if frac_part.is_empty() {
            "0".to_owned()
        } else {
            frac_part
        };
        format!("{sign}{int_part}.{frac_part}")
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.unsigned_abs())
    }
}

/// The integer `float` truncates to, as Python's `int(float)`; an error
/// for infinities (Python's `OverflowError`) and beyond 128 bits.
fn truncated(float: f64) -> Result<Option<Value>, JinjaError> {
    if float.is_nan() {
        // Python's `ValueError`: the filter falls back to its default.
        return Ok(None);
    }
    let whole = float.trunc();
    if whole >= -(2f64.powi(127)) && whole < 2f64.powi(127) {
        Ok(Some(Value::from(whole as i128)))
    } else if whole >= 0.0 && whole < 2f64.powi(128) {
        Ok(Some(Value::from(whole as u128)))
    } else {
        Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "int(): {} is beyond the integers pav computes with (128 bits)",
                python_float(float)
            ),
        ))
    }
}

/// Parses `text` as Python's `int(text, base)` does: surrounding
/// whitespace, a sign, the base's prefix (any prefix when `base` is 0) and
/// underscores between digits.
fn parse_int(text: &str, base: u32) -> Option<Value> {
    let text = text.trim();
    let (negative, text) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = text.to_ascii_lowercase();
    let prefixed = |prefix: &str, radix: u32| {
        lower
            .strip_prefix(prefix)
            .filter(|_| base == radix || base == 0)
            .map(|rest| (rest.trim_start_matches('_').to_owned(), radix))
    };
    let (digits, radix) = prefixed("0x", 16)
        .or_else(|| prefixed("0o", 8))
        .or_else(|| prefixed("0b", 2))
        .unwrap_or((lower.clone(), if base == 0 { 10 } else { base }));
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || digits.starts_with(['+', '-'])
    {
        return None;
    }
    let digits = digits.replace('_', "");
    let magnitude = u128::from_str_radix(&digits, radix).ok()?;
    if !negative {
        return Some(Value::from(magnitude));
    }
    if magnitude <= i128::MAX as u128 + 1 {
        Some(Value::from(0i128.wrapping_sub_unsigned(magnitude)))
    } else {
        None
    }
}

fn undefined_error(filter: &str) -> JinjaError {
    JinjaError::new(
        ErrorKind::UndefinedError,
        format!("filter '{filter}' may not be applied to an undefined value"),
    )
}

/// Jinja2's `int`: numbers are truncated, strings parsed in `base` (or as a
/// float, then truncated), and anything that does not parse gives `default`
/// (0) instead of an error, as existing templates expect. Undefined is an
/// error, as in Jinja2.
pub(crate) fn int_filter(
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["default", "base"], &positional, kwargs)?;
    let default = keyword::<Value>(&kwargs, "default")?.unwrap_or(Value::from(0));
    let base = keyword::<u32>(&kwargs, "base")?.unwrap_or(10);
    kwargs.assert_all_used()?;
    if base != 0 && !(2..=36).contains(&base) {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "int(): base must be 0 or between 2 and 36",
        ));
    }
    let parsed = match value.kind() {
        ValueKind::Undefined => return Err(undefined_error("int")),
        ValueKind::Bool => Some(Value::from(i64::from(value.is_true()))),
        ValueKind::Number if value.is_integer() => Some(value.clone()),
        ValueKind::Number => truncated(f64::try_from(value.clone())?)?,
        ValueKind::String => {
            let text = value.as_str().unwrap_or_default();
            match parse_int(text, base) {
                Some(parsed) => Some(parsed),
                // Jinja2 then tries `int(float(text))`.
                None => match parse_float(text) {
                    Some(float) => truncated(float)?,
                    None => None,
                },
            }
        }
        _ => None,
    };
    Ok(parsed.unwrap_or(default))
}

/// Parses `text` as Python's `float(text)`: surrounding whitespace,
/// underscores between digits, `inf`, `nan`.
fn parse_float(text: &str) -> Option<f64> {
    let text = text.trim();
    if text.starts_with('_') || text.ends_with('_') || text.contains("__") {
        return None;
    }
    let cleaned = text.replace('_', "");
    let lower = cleaned.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    // Rust also reads "infinity" and "nan" as Python does, but not "in"
    // or "na" alone; everything else it reads is a Python float too.
    if unsigned.is_empty() || unsigned.starts_with(['e', '.']) && unsigned.len() == 1 {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

/// Jinja2's `float`: numbers and numeric strings as floats, anything else
/// `default` (0.0); undefined is an error, as in Jinja2.
pub(crate) fn float_filter(
    value: &Value,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["default"], &positional, kwargs)?;
    let default = keyword::<Value>(&kwargs, "default")?.unwrap_or(Value::from(0.0));
    kwargs.assert_all_used()?;
    let parsed = match value.kind() {
        ValueKind::Undefined => return Err(undefined_error("float")),
        ValueKind::Bool => Some(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone()).ok(),
        ValueKind::String => parse_float(value.as_str().unwrap_or_default()),
        _ => None,
    };
    Ok(parsed.map(Value::from).unwrap_or(default))
}

/// The Python `int` and `float` methods Jinja2's sandbox lets a template
/// call, or `None` when `method` is not one pav has.
pub(crate) fn number_method(
    value: &Value,
    method: &str,
    args: &[Value],
) -> Option<Result<Value, JinjaError>> {
    match method {
        // Class methods, callable on any int or float.
        "from_bytes" if value.is_integer() => return Some(int_from_bytes(args)),
        "to_bytes" if value.is_integer() => return Some(int_to_bytes(value, args)),
        "fromhex" if !value.is_integer() => {
            return Some(from_args::<(&str,)>(args).and_then(|(text,)| float_from_hex(text)));
        }
        _ => {}
    }
    if !args.is_empty() {
        return None;
    }
    if value.is_integer() {
        let magnitude = i128::try_from(value.clone())
            .map(i128::unsigned_abs)
            .or_else(|_| u128::try_from(value.clone()));
        let Ok(magnitude) = magnitude else {
            return None;
        };
        return match method {
            "bit_length" => Some(Ok(Value::from(128 - magnitude.leading_zeros()))),
            "bit_count" => Some(Ok(Value::from(magnitude.count_ones()))),
            "conjugate" => Some(Ok(value.clone())),
            "as_integer_ratio" => Some(Ok(Value::from_iter([value.clone(), Value::from(1)]))),
            _ => None,
        };
    }
    let float = f64::try_from(value.clone()).ok()?;
    match method {
        "conjugate" => Some(Ok(value.clone())),
        "is_integer" => Some(Ok(Value::from(float.is_finite() && float.fract() == 0.0))),
        "hex" => Some(Ok(Value::from(float_hex(float)))),
        "as_integer_ratio" => Some(integer_ratio(float)),
        _ => None,
    }
}

/// The arguments Python's `int.to_bytes` and `int.from_bytes` share:
/// `byteorder` (`'big'` by default) and the keyword `signed`.
fn byte_order(byteorder: Option<&str>, kwargs: &Kwargs) -> Result<(bool, bool), JinjaError> {
    let big = match byteorder.unwrap_or("big") {
        "big" => true,
        "little" => false,
        _ => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                "byteorder must be either 'little' or 'big'",
            ));
        }
    };
    let signed = keyword::<bool>(kwargs, "signed")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    Ok((big, signed))
}

/// Python's `int.from_bytes(bytes, byteorder='big', *, signed=False)`,
/// for up to 16 bytes (pav's integers are at most 128 bits wide).
fn int_from_bytes(args: &[Value]) -> Result<Value, JinjaError> {
    let (bytes, byteorder, kwargs) = from_args::<(Value, Option<&str>, Kwargs)>(args)?;
    let (big, signed) = byte_order(byteorder, &kwargs)?;
    let mut bytes: Vec<u8> = match bytes.as_bytes() {
        Some(bytes) => bytes.to_vec(),
        None => bytes
            .try_iter()?
            .map(|byte| {
                u8::try_from(byte).map_err(|_| {
                    JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "bytes must be in range(0, 256)",
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if !big {
        bytes.reverse();
    }
    if bytes.len() > 16 {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "int.from_bytes(): more than 16 bytes is beyond the integers pav computes with (128 bits)",
        ));
    }
    let negative = signed && bytes.first().is_some_and(|first| first & 0x80 != 0);
    let mut padded = [if negative { 0xff } else { 0 }; 16];
    padded[16 - bytes.len()..].copy_from_slice(&bytes);
    Ok(if signed {
        Value::from(i128::from_be_bytes(padded))
    } else {
        Value::from(u128::from_be_bytes(padded))
    })
}

/// Python's `int.to_bytes(length=1, byteorder='big', *, signed=False)`.
fn int_to_bytes(value: &Value, args: &[Value]) -> Result<Value, JinjaError> {
    let (length, byteorder, kwargs) = from_args::<(Option<usize>, Option<&str>, Kwargs)>(args)?;
    let (big, signed) = byte_order(byteorder, &kwargs)?;
    let length = length.unwrap_or(1);
    if length > super::MAX_OUTPUT_BYTES {
        // Before allocating: no field may print more anyway.
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "int.to_bytes(): length beyond the output limit of a field",
        ));
    }
    let overflow = || JinjaError::new(ErrorKind::InvalidOperation, "int too big to convert");
    let (negative, mut bytes) = match i128::try_from(value.clone()) {
        Ok(int) if int < 0 && !signed => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                "can't convert negative int to unsigned",
            ));
        }
        Ok(int) => (int < 0, int.to_be_bytes().to_vec()),
        Err(_) => (false, u128::try_from(value.clone())?.to_be_bytes().to_vec()),
    };
    // Drop the leading bytes the sign fills, keeping one sign bit when
    // signed.
    let fill = if negative { 0xff } else { 0 };
    while bytes.len() > length {
        if bytes[0] != fill {
            return Err(overflow());
        }
        bytes.remove(0);
    }
    if signed
        && bytes
            .first()
            .is_some_and(|first| (first & 0x80 != 0) != negative)
    {
        return Err(overflow());
    }
    if signed && length == 0 && negative {
        return Err(overflow());
    }
    let mut bytes = [vec![fill; length - bytes.len()], bytes].concat();
    if !big {
        bytes.reverse();
    }
    Ok(super::collections::python_bytes(&bytes))
}

/// Python's `float.fromhex(text)`: `[sign]['0x']digits['.'digits]['p'exponent]`,
/// `inf` and `nan`.
fn float_from_hex(text: &str) -> Result<Value, JinjaError> {
    let invalid = || {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("float.fromhex(): invalid hexadecimal floating-point string {text:?}"),
        )
    };
    let trimmed = text.trim().to_ascii_lowercase();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed.as_str()),
    };
    let magnitude = match unsigned {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => {
            let body = unsigned.strip_prefix("0x").unwrap_or(unsigned);
            let (digits, exponent) = match body.split_once('p') {
                Some((digits, exponent)) => {
                    (digits, exponent.parse::<i32>().map_err(|_| invalid())?)
                }
                None => (body, 0),
            };
            let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
            if whole.is_empty() && fraction.is_empty() {
                return Err(invalid());
            }
            // The significant hex digits (at most 30: 120 bits, more than a
            // double holds) and the power of two they are scaled by.
            let mut mantissa = 0u128;
            let mut scale = exponent;
            for (index, digit) in whole.chars().chain(fraction.chars()).enumerate() {
                let digit = digit.to_digit(16).ok_or_else(invalid)?;
                if mantissa >> 120 == 0 {
                    mantissa = mantissa << 4 | u128::from(digit);
                    if index >= whole.len() {
                        scale -= 4;
                    }
                } else if index < whole.len() {
                    scale += 4;
                }
            }
            let float = mantissa as f64 * 2f64.powi(scale.clamp(-1100, 1100));
            if float.is_infinite() {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "float.fromhex(): hexadecimal value too large to represent as a float",
                ));
            }
            float
        }
    };
    Ok(Value::from(if negative { -magnitude } else { magnitude }))
}

/// Python's `float.hex()`: `0x1.8000000000000p+1` for 3.0.
fn float_hex(float: f64) -> String {
    if float.is_nan() {
        return "nan".to_owned();
    }
    if float.is_infinite() {
        return if float > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let sign = if float.is_sign_negative() { "-" } else { "" };
    let bits = float.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64;
    let mantissa = bits & ((1 << 52) - 1);
    if exponent == 0 && mantissa == 0 {
        return format!("{sign}0x0.0p+0");
    }
    let (lead, exponent) = if exponent == 0 {
        (0, -1022)
    } else {
        (1, exponent - 1023)
    };
    format!("{sign}0x{lead}.{mantissa:013x}p{exponent:+}")
}

/// Python's `float.as_integer_ratio()`: the exact fraction, in lowest
/// terms; an error when a term needs more than 128 bits.
fn integer_ratio(float: f64) -> Result<Value, JinjaError> {
    let too_big = || {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            format!(
                "as_integer_ratio(): {} needs integers beyond 128 bits",
                python_float(float)
            ),
        )
    };
    if !float.is_finite() {
        return Err(too_big());
    }
    let bits = float.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (mut numerator, mut exponent) = if biased == 0 {
        (fraction as i128, -1074)
    } else {
        ((fraction | 1 << 52) as i128, biased - 1075)
    };
    if numerator == 0 {
        return Ok(Value::from_iter([Value::from(0), Value::from(1)]));
    }
    while exponent < 0 && numerator % 2 == 0 {
        numerator /= 2;
        exponent += 1;
    }
    if float < 0.0 {
        numerator = -numerator;
    }
    let (numerator, denominator) = if exponent >= 0 {
        let shifted = numerator
            .checked_mul(1i128.checked_shl(exponent as u32).ok_or_else(too_big)?)
            .filter(|_| exponent < 127)
            .ok_or_else(too_big)?;
        (shifted, 1)
    } else {
        let denominator = 1i128
            .checked_shl(exponent.unsigned_abs())
            .filter(|_| exponent > -127)
            .ok_or_else(too_big)?;
        (numerator, denominator)
    };
    Ok(Value::from_iter([
        Value::from(numerator),
        Value::from(denominator),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e20, "1.5e+20"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123.456, "123.456"),
            (0.0, "0.0"),
        ];
        for (float, text) in cases {
            assert_eq!(python_float(float), text, "{float}");
        }
    }

    #[test]
    fn float_methods_match_python() {
        assert_eq!(float_hex(3.0), "0x1.8000000000000p+1");
        assert_eq!(float_hex(-0.1), "-0x1.999999999999ap-4");
        assert_eq!(float_hex(0.0), "0x0.0p+0");
        assert_eq!(integer_ratio(2.5).unwrap().to_string(), "[5, 2]");
        assert_eq!(integer_ratio(-0.75).unwrap().to_string(), "[-3, 4]");
        assert_eq!(
            integer_ratio(1e20).unwrap().to_string(),
            "[100000000000000000000, 1]"
        );
        assert!(integer_ratio(1e300).is_err());
    }

    #[test]
    fn integers_parse_as_python_int() {
        let cases = [
            ("42", 10, Some("42")),
            (" -7 ", 10, Some("-7")),
            ("1_000", 10, Some("1000")),
            ("1__0", 10, None),
            ("0x1A", 16, Some("26")),
            ("0x1A", 0, Some("26")),
            ("0b101", 0, Some("5")),
            ("ff", 16, Some("255")),
            ("18446744073709551616", 10, Some("18446744073709551616")),
            ("3.7", 10, None),
            ("", 10, None),
        ];
        for (text, base, expected) in cases {
            assert_eq!(
                parse_int(text, base).map(|v| v.to_string()).as_deref(),
                expected,
                "{text:?} in base {base}"
            );
        }
    }
}
