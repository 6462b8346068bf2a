//! Errors say their cause once: an error's message says its
//! step and leaves the cause to [`source`](std::error::Error::source);
//! [`pav_csi::error_chain`] (or `anyhow`'s `{:#}`) prints both, in CSI
//! replies, events and logs. One representative of every variant of pav
//! that has a source; a variant added with a source belongs in
//! [`every_sourced_variant`]. (`cli`'s errors follow the rule too.)

use std::error::Error;
use std::io;

use pav_templates::quantity::{QuantityError, Rounding, parse_bytes};

use crate::csi::context::DriverError;
use crate::csi::controller::capacity::CapacityError;
use crate::csi::controller::expand::ExpandError;
use crate::csi::controller::snapshot::SnapshotError;
use crate::csi::node::UnstageError;
use crate::pods::dir::PodDirError;
use crate::pods::results::CreatedError;
use crate::uninstall_check::UninstallCheckError;

/// A cause no message of pav says by itself.
const CAUSE: &str = "the disk is on fire";

fn io() -> io::Error {
    io::Error::other(CAUSE)
}

/// A kube error whose text is its own (its source, an I/O error, is
/// in it: kube's messages repeat their sources).
fn kube() -> kube::Error {
    kube::Error::ReadEvents(io())
}

fn quantity() -> QuantityError {
    parse_bytes(CAUSE, Rounding::Down).unwrap_err()
}

fn pod_dir() -> PodDirError {
    PodDirError::Remove {
        dir: "/var/lib/pav/pods/p".into(),
        source: io(),
    }
}

/// Fails when `err`'s message repeats its source's
/// ([`pav_csi::cause_repeated`]); else says the chain holds the cause.
fn assert_cause_once(what: &str, err: &dyn Error) {
    if let Some(problem) = pav_csi::cause_repeated(err) {
        panic!("{what}: {problem}");
    }
    let message = err.to_string();
    let cause = err.source().map(ToString::to_string).unwrap_or_default();
    let chain = pav_csi::error_chain(err);
    assert!(
        chain.starts_with(&format!("{message}: {cause}")),
        "{what}: {chain:?}"
    );
    assert!(chain.matches(CAUSE).count() <= 1, "{what}: {chain:?}");
}

#[test]
fn every_sourced_variant() {
    let json = || serde_json::from_str::<u8>("{").unwrap_err();
    let cases: Vec<(&str, Box<dyn Error>)> = vec![
        (
            "operator::Error::Kube",
            Box::new(crate::operator::Error::Kube(kube())),
        ),
        (
            "DriverError::Api",
            Box::new(DriverError::Api {
                what: "pod pav/p".into(),
                source: Box::new(kube()),
            }),
        ),
        (
            "UnstageError::RecordedUnstaging",
            Box::new(UnstageError::RecordedUnstaging(json())),
        ),
        (
            "UnstageError::CleanUp",
            Box::new(UnstageError::CleanUp {
                pod: "pav/p".into(),
                source: pod_dir(),
            }),
        ),
        ("PodDirError::Remove", Box::new(pod_dir())),
        (
            "CreatedError::Capacity",
            Box::new(CreatedError::Capacity(quantity())),
        ),
        (
            "SnapshotError::Size",
            Box::new(SnapshotError::Size {
                pod: "pav/p".into(),
                source: quantity(),
            }),
        ),
        (
            "ExpandError::Capacity",
            Box::new(ExpandError::Capacity {
                pod: "pav/p".into(),
                source: quantity(),
            }),
        ),
        (
            "ExpandError::TooSmall",
            Box::new(ExpandError::TooSmall {
                said_by: "expansion pod pav/p: /pav/capacity".into(),
                source: crate::recipe::grown(1, 2).unwrap_err(),
            }),
        ),
        (
            "CapacityError::Quantity",
            Box::new(CapacityError::Quantity {
                pod: "pav/p".into(),
                source: quantity(),
            }),
        ),
        (
            "UninstallCheckError::TerminationMessage",
            Box::new(UninstallCheckError::TerminationMessage {
                path: "/dev/termination-log".into(),
                source: io(),
            }),
        ),
        (
            "UninstallCheckError::Client",
            Box::new(UninstallCheckError::Client(kube())),
        ),
    ];
    for (what, err) in &cases {
        assert_cause_once(what, err.as_ref());
    }
}

/// What reaches a CSI reply (and so the CO's events) is the whole chain,
/// each cause once.
#[test]
fn csi_replies_carry_the_chain() {
    let unstage = UnstageError::CleanUp {
        pod: "pav/p".into(),
        source: pod_dir(),
    };
    let reply = pav_sdk::Error::from(unstage);
    assert_eq!(
        reply.message(),
        format!("cleaning up after staging pod pav/p: removing /var/lib/pav/pods/p: {CAUSE}")
    );
    let api = DriverError::Api {
        what: "pod pav/p".into(),
        source: Box::new(kube()),
    };
    let reply = pav_sdk::Error::from(api);
    assert!(matches!(reply, pav_sdk::Error::Unavailable(_)), "{reply:?}");
    assert_eq!(reply.message().matches(CAUSE).count(), 1, "{reply:?}");
    assert!(reply.message().starts_with("pod pav/p: "), "{reply:?}");
}
