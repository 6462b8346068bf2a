//! Arbitrary text as a Kubernetes quantity.

use pav_templates::quantity::{Rounding, parse_bytes};

/// Arbitrary text as a Kubernetes quantity (what claims, classes and
/// templates give as capacities). Must never panic; a parsed capacity fits
/// CSI's int64, and rounding down never gives more than rounding up.
pub fn quantity(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let down = parse_bytes(text, Rounding::Down);
    let up = parse_bytes(text, Rounding::Up);
    for bytes in [&down, &up].into_iter().flatten() {
        assert!(i64::try_from(*bytes).is_ok(), "{text:?}: {bytes} bytes");
    }
    if let Ok(up) = up {
        let down = down.unwrap_or_else(|err| panic!("{text:?}: up {up}, down failed: {err}"));
        assert!(down <= up, "{text:?}: down {down} > up {up}");
    }
}
