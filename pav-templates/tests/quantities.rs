//! Quantities from the hostile-input review: each case is text a claim or a
//! PavProvisioner may hold, and what `parse_bytes` must make of it.

use pav_templates::quantity::{MAX_BYTES, QuantityProblem, Rounding, parse_bytes};

/// Refused quantities and the problem each must report.
#[test]
fn refused_quantities_name_their_problem() {
    let cases: &[(&str, QuantityProblem)] = &[
        // Kubernetes' grammar has no whitespace; trimming it hid typos and
        // let through text the API server refuses.
        ("1Ki ", QuantityProblem::Whitespace),
        (" 1Gi", QuantityProblem::Whitespace),
        ("1Gi\n", QuantityProblem::Whitespace),
        ("1\tGi", QuantityProblem::Whitespace),
        ("1 Gi", QuantityProblem::Whitespace),
        // CSI carries capacities as int64.
        ("15Ei", QuantityProblem::TooLarge),
        ("8Ei", QuantityProblem::TooLarge),
        ("9223372036854775808", QuantityProblem::TooLarge),
        ("1e19", QuantityProblem::TooLarge),
        ("1e9223372036854775807", QuantityProblem::TooLarge),
        (
            "99999999999999999999999999999999999999999",
            QuantityProblem::TooManyDigits,
        ),
        (
            "1e99999999999999999999",
            QuantityProblem::ExponentOutOfRange("99999999999999999999".into()),
        ),
        ("1e1.5", QuantityProblem::ExponentNotAnInteger("1.5".into())),
        ("1e3Ki", QuantityProblem::ExponentNotAnInteger("3Ki".into())),
        ("1e", QuantityProblem::ExponentNotAnInteger(String::new())),
        ("1ex", QuantityProblem::ExponentNotAnInteger("x".into())),
        ("-1Gi", QuantityProblem::Negative),
        ("1.2.3", QuantityProblem::SecondDecimalPoint),
        ("Gi", QuantityProblem::NoDigits),
        ("1Xi", QuantityProblem::UnknownSuffix("Xi".into())),
    ];
    for (input, expected) in cases {
        for rounding in [Rounding::Up, Rounding::Down] {
            let error = parse_bytes(input, rounding)
                .expect_err(&format!("{input:?} ({rounding:?}) must be refused"));
            assert_eq!(error.problem(), expected, "{input:?} ({rounding:?})");
        }
    }
}

/// Accepted quantities that were refused, or panicked, before.
#[test]
fn edge_quantities_have_exact_values() {
    // (input, bytes rounded down, bytes rounded up)
    let cases: &[(&str, u64, u64)] = &[
        // Subtracting the fraction's digits from this exponent overflowed an
        // i32 (a panic in debug builds).
        ("0.1e-2147483648", 0, 1),
        ("1e-9223372036854775808", 0, 1),
        // Zero is zero at any scale.
        ("0e100", 0, 0),
        ("0.000e9223372036854775807", 0, 0),
        ("0Ei", 0, 0),
        // The largest capacity CSI can carry, spelled three ways.
        ("9223372036854775807", MAX_BYTES, MAX_BYTES),
        ("7Ei", 7 << 60, 7 << 60),
        ("9223372036854775806.5", MAX_BYTES - 1, MAX_BYTES),
        // Zeros that add no precision do not count as digits.
        (
            "1.00000000000000000000000000000000000000000000000000Gi",
            1 << 30,
            1 << 30,
        ),
        (
            "0.00000000000000000000000000000000000000000000000001e50",
            1,
            1,
        ),
        // A point beyond 38 decimal places, then a binary scale: the exact
        // values, from Python's fractions.
        (
            "0.099999999999999999999999999999999999999Ei",
            115_292_150_460_684_697,
            115_292_150_460_684_698,
        ),
        (
            "0.0000000000012345678901234567890123456789Ei",
            1_423_359,
            1_423_360,
        ),
    ];
    for &(input, down, up) in cases {
        assert_eq!(
            parse_bytes(input, Rounding::Down),
            Ok(down),
            "{input:?} down"
        );
        assert_eq!(parse_bytes(input, Rounding::Up), Ok(up), "{input:?} up");
    }
    // Rounding up must not carry a value past the limit.
    let just_over = "9223372036854775807.5";
    assert_eq!(parse_bytes(just_over, Rounding::Down), Ok(MAX_BYTES));
    let error = parse_bytes(just_over, Rounding::Up).unwrap_err();
    assert_eq!(error.problem(), &QuantityProblem::TooLarge);
}

#[test]
fn messages_quote_the_input_and_say_what_is_wrong() {
    let cases = [
        (
            "1Gi\n",
            "\"1Gi\\n\" is not a valid quantity: it contains whitespace, which Kubernetes' quantity grammar does not allow",
        ),
        (
            "15Ei",
            "\"15Ei\" is not a valid quantity: more than 9223372036854775807 bytes (2^63 - 1, the largest capacity CSI's int64 can carry)",
        ),
    ];
    for (input, message) in cases {
        assert_eq!(
            parse_bytes(input, Rounding::Up).unwrap_err().to_string(),
            message
        );
    }
}
