//! What the checks found: which check ([`Check`]), how one that did not
//! fail ended ([`Outcome`]), one that failed ([`Failure`]), and all of
//! them ([`Report`], [`Failures`]).

use std::fmt;

#[cfg(doc)]
use super::Conformance;

/// One named conformance check; see [`Conformance`] for what each asserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Check {
    /// [`Conformance::repeated_create`].
    RepeatedCreate,
    /// [`Conformance::delete_unknown_volume`].
    DeleteUnknownVolume,
    /// [`Conformance::stage_unstage_repeats`].
    StageUnstageRepeats,
    /// [`Conformance::publish_unpublish_repeats`].
    PublishUnpublishRepeats,
    /// [`Conformance::attach_detach_repeats`].
    AttachDetachRepeats,
    /// [`Conformance::expand`].
    Expand,
    /// [`Conformance::snapshot_round_trip`].
    SnapshotRoundTrip,
    /// [`Conformance::group_snapshot_round_trip`].
    GroupSnapshotRoundTrip,
    /// [`Conformance::hostile_ids_and_paths`].
    HostileIdsAndPaths,
    /// [`Conformance::modify`].
    Modify,
    /// [`Conformance::health`].
    Health,
}

impl Check {
    /// Every check, in the order [`Conformance::run_all`] runs them.
    pub const ALL: [Check; 11] = [
        Check::RepeatedCreate,
        Check::DeleteUnknownVolume,
        Check::StageUnstageRepeats,
        Check::PublishUnpublishRepeats,
        Check::AttachDetachRepeats,
        Check::Expand,
        Check::SnapshotRoundTrip,
        Check::GroupSnapshotRoundTrip,
        Check::HostileIdsAndPaths,
        Check::Modify,
        Check::Health,
    ];

    /// The check's name: the name of its [`Conformance`] method.
    pub fn name(self) -> &'static str {
        match self {
            Check::RepeatedCreate => "repeated_create",
            Check::DeleteUnknownVolume => "delete_unknown_volume",
            Check::StageUnstageRepeats => "stage_unstage_repeats",
            Check::PublishUnpublishRepeats => "publish_unpublish_repeats",
            Check::AttachDetachRepeats => "attach_detach_repeats",
            Check::Expand => "expand",
            Check::SnapshotRoundTrip => "snapshot_round_trip",
            Check::GroupSnapshotRoundTrip => "group_snapshot_round_trip",
            Check::HostileIdsAndPaths => "hostile_ids_and_paths",
            Check::Modify => "modify",
            Check::Health => "health",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a check that did not fail ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// Every part of the check ran and passed.
    Passed,
    /// The parts that apply ran and passed; the rest did not apply (why,
    /// e.g. "node expansion: the node service is not served").
    Partly(String),
    /// Nothing of the check applies to this provisioner (why, e.g. "the
    /// controller does not advertise EXPAND_VOLUME"). Not a pass.
    Skipped(String),
}

/// A check that failed: which, and what it found.
#[derive(Clone, PartialEq, Eq)]
pub struct Failure {
    /// The check that failed.
    pub check: Check,
    /// The step that failed and what the driver answered.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.check, self.message)
    }
}

/// The same as `Display`, so that `unwrap()` in a test prints it readably.
impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Failure {}

/// What [`Conformance::run_all`] found, one entry per check.
#[derive(Clone, PartialEq, Eq)]
pub struct Report {
    /// Each check and how it ended, in the order they ran.
    pub results: Vec<(Check, Result<Outcome, Failure>)>,
}

impl Report {
    /// The checks that failed.
    pub fn failures(&self) -> Vec<&Failure> {
        (self.results.iter())
            .filter_map(|(_, r)| r.as_ref().err())
            .collect()
    }

    /// The checks that were skipped: nothing of them applied.
    pub fn skipped(&self) -> Vec<Check> {
        (self.results.iter())
            .filter(|(_, r)| matches!(r, Ok(Outcome::Skipped(_))))
            .map(|(check, _)| *check)
            .collect()
    }

    /// The checks that passed, wholly or partly.
    pub fn passed(&self) -> Vec<Check> {
        (self.results.iter())
            .filter(|(_, r)| matches!(r, Ok(Outcome::Passed | Outcome::Partly(_))))
            .map(|(check, _)| *check)
            .collect()
    }
}

/// One line per check: `passed`, `partly` (with what did not apply),
/// `skipped` (with why) or `FAILED` (with what was found).
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (check, result) in &self.results {
            match result {
                Ok(Outcome::Passed) => writeln!(f, "passed  {check}")?,
                Ok(Outcome::Partly(why)) => writeln!(f, "partly  {check} ({why})")?,
                Ok(Outcome::Skipped(why)) => writeln!(f, "skipped {check}: {why}")?,
                Err(failure) => writeln!(f, "FAILED  {check}: {}", failure.message)?,
            }
        }
        Ok(())
    }
}

/// The same as `Display`.
impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// [`Conformance::run_all`]'s error: at least one check failed. Prints
/// the whole [`Report`].
#[derive(Clone, PartialEq, Eq)]
pub struct Failures(pub Report);

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.0.failures().len();
        writeln!(f, "{failed} conformance check(s) failed:")?;
        fmt::Display::fmt(&self.0, f)
    }
}

/// The same as `Display`, so that `unwrap()` in a test prints the report.
impl fmt::Debug for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Failures {}
