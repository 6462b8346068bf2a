//! Kubernetes quantities as bytes, for a PersistentVolume's capacity.
//!
//! Unlike the ephemeral volumes' `size` attribute (whole numbers only, a
//! user's text), a capacity is whatever the API server or another
//! controller wrote: fractions (`1.5Gi`), exponents (`1e9`) and milli
//! units are all valid Kubernetes spellings, and refusing one would leave
//! a claim unpopulated for good.

/// Bytes of Kubernetes quantity `text`, rounded up to a whole byte as
/// Kubernetes' `Quantity.Value()` does; `None` for what is not a
/// quantity, a negative one, or one above `u64::MAX`.
///
/// Accepts the grammar of `k8s.io/apimachinery/pkg/api/resource`: an
/// optional `+`, digits with an optional fraction, then nothing, a binary
/// suffix (`Ki` to `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M` to `E`)
/// or a decimal exponent (`e3`, `E-2`).
pub(crate) fn bytes(text: &str) -> Option<u64> {
    let text = text.strip_prefix('+').unwrap_or(text);
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    // 10^38 is u128's limit; longer mantissas are no capacity anyone
    // writes, and refusing them keeps the arithmetic exact.
    if digits.len() > 30 {
        return None;
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let (factor, exponent) = scale(suffix)?;
    let exponent = exponent.checked_sub(i32::try_from(fraction.len()).ok()?)?;
    let value = mantissa.checked_mul(factor)?;
    let value = if exponent >= 0 {
        value.checked_mul(10u128.checked_pow(exponent.unsigned_abs())?)?
    } else {
        match 10u128.checked_pow(exponent.unsigned_abs()) {
            Some(divisor) => value.div_ceil(divisor),
            // Below a byte, but not nothing: a whole byte, rounded up.
            None => u128::from(value != 0),
        }
    };
    u64::try_from(value).ok()
}

/// The binary factor and decimal exponent of a quantity's suffix.
fn scale(suffix: &str) -> Option<(u128, i32)> {
    let binary = |shift: u32| Some((1u128 << shift, 0));
    let decimal = |exponent: i32| Some((1, exponent));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Anything beyond this is far outside u64 (or below a byte).
            let exponent: i32 = exponent.parse().ok()?;
            (exponent.abs() <= 100).then_some((1, exponent))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn plain_binary_and_decimal_quantities() {
        assert_eq!(bytes("0"), Some(0));
        assert_eq!(bytes("1048576"), Some(1 << 20));
        assert_eq!(bytes("+5"), Some(5));
        assert_eq!(bytes("1Ki"), Some(1024));
        assert_eq!(bytes("64Mi"), Some(64 << 20));
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("2Ti"), Some(2 << 40));
        assert_eq!(bytes("1Pi"), Some(1 << 50));
        assert_eq!(bytes("15Ei"), Some(15 << 60));
        assert_eq!(bytes("1k"), Some(1_000));
        assert_eq!(bytes("1500M"), Some(1_500_000_000));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("3T"), Some(3_000_000_000_000));
        assert_eq!(bytes("1P"), Some(1_000_000_000_000_000));
        assert_eq!(bytes("18E"), Some(18_000_000_000_000_000_000));
    }

    #[test]
    fn fractions_exponents_and_small_units_round_up_to_a_byte() {
        assert_eq!(bytes("1.5Gi"), Some(3 << 29));
        assert_eq!(bytes("0.5Ki"), Some(512));
        assert_eq!(bytes(".5k"), Some(500));
        assert_eq!(bytes("2."), Some(2));
        assert_eq!(bytes("1.0000001k"), Some(1_001));
        assert_eq!(bytes("1e3"), Some(1_000));
        assert_eq!(bytes("1E9"), Some(1_000_000_000));
        assert_eq!(bytes("12e+2"), Some(1_200));
        assert_eq!(bytes("1500e-3"), Some(2));
        assert_eq!(bytes("1500m"), Some(2));
        assert_eq!(bytes("1000m"), Some(1));
        assert_eq!(bytes("1u"), Some(1));
        assert_eq!(bytes("1n"), Some(1));
        assert_eq!(bytes("0n"), Some(0));
        assert_eq!(bytes("1e-100"), Some(1));
        assert_eq!(bytes("00000000000000000000000000000000001Ki"), Some(1024));
    }

    #[test]
    fn what_is_no_quantity_or_too_large_is_none() {
        for text in [
            "",
            ".",
            "-1",
            "-1Gi",
            "1 Gi",
            "1gi",
            "1KiB",
            "Gi",
            "1.2.3",
            "1e",
            "1e+",
            "1ee3",
            "1e3.5",
            "1e1000",
            "0x10",
            "1Ki1",
            "16Ei",
            "18446744073709551616",
            "20E",
            "1234567890123456789012345678901",
        ] {
            assert_eq!(bytes(text), None, "{text:?}");
        }
        assert_eq!(bytes("18446744073709551615"), Some(u64::MAX));
    }
}
