//! Errors say their cause once: an error's message says its
//! step and leaves the cause to [`source`](std::error::Error::source);
//! [`error_chain`](super::error_chain) (or `anyhow`'s `{:#}`) prints both.
//! One representative of every variant of pav-csi that has a source; a
//! variant added with a source belongs in [`every_sourced_variant`].

use std::error::Error;
use std::io;
use std::path::PathBuf;

use crate::controller::delete_volume::DeleteVolumeError;
use crate::controller::get_volume::GetVolumeError;
use crate::controller::list_volumes::ListVolumesError;
use crate::controller::publish_volume::{ContextError, PublishError};
use crate::controller::unpublish_volume::UnpublishError;
use crate::convert::{SnapshotAnswerError, VolumeAnswerError};
use crate::group_controller::AnswerError;
use crate::limits::LimitError;
use crate::mount::{
    DeviceError, GrowError, MountError, MountFlags, ParseError, TableError, UnmountError,
};
use crate::node::binds::BindError;
use crate::node::ephemeral::EphemeralError;
use crate::node::stats::StatsError;
use crate::node::{RecordError, UndoStageError};
use crate::occupancy::OccupancyError;

/// A cause no message of pav-csi says by itself.
const CAUSE: &str = "the disk is on fire";

fn io() -> io::Error {
    io::Error::other(CAUSE)
}

fn sdk() -> pav_sdk::Error {
    pav_sdk::Error::Unavailable(CAUSE.into())
}

fn path() -> PathBuf {
    PathBuf::from("/var/lib/pav/x")
}

/// A limit broken by a field named after [`CAUSE`].
fn limit() -> LimitError {
    LimitError::Required {
        field: CAUSE.into(),
    }
}

/// A `JoinError` (no public constructor): a task aborted.
fn join_error() -> tokio::task::JoinError {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let task = tokio::spawn(std::future::pending::<()>());
        task.abort();
        task.await.unwrap_err()
    })
}

/// Fails when `err`'s message repeats its source's
/// ([`super::cause_repeated`]), or its chain does not hold the cause once.
fn assert_cause_once(what: &str, err: &dyn Error) {
    if let Some(problem) = super::cause_repeated(err) {
        panic!("{what}: {problem}");
    }
    let chain = super::error_chain(err);
    assert_eq!(chain.matches(CAUSE).count(), 1, "{what}: {chain:?}");
}

/// A `tonic::transport::Error`, which has no public constructor.
fn transport() -> tonic::transport::Error {
    tonic::transport::Endpoint::from_shared("\0".to_owned()).unwrap_err()
}

#[test]
fn every_sourced_variant() {
    let table = || TableError::Read(io());
    let cases: Vec<(&str, Box<dyn Error>)> = vec![
        (
            "Error::Socket",
            Box::new(crate::Error::Socket {
                path: path(),
                source: io(),
            }),
        ),
        (
            "ProbeError::Connect",
            Box::new(crate::client::ProbeError::Connect(crate::Error::Socket {
                path: path(),
                source: io(),
            })),
        ),
        (
            "MountError::Mount",
            Box::new(MountError::Mount {
                what: "tmpfs".into(),
                fstype: "tmpfs".into(),
                target: path(),
                source: io(),
            }),
        ),
        (
            "MountError::Bind",
            Box::new(MountError::Bind {
                what: path(),
                target: path(),
                source: io(),
            }),
        ),
        (
            "MountError::BindFlags",
            Box::new(MountError::BindFlags {
                target: path(),
                flags: MountFlags::READ_ONLY,
                source: io(),
            }),
        ),
        (
            "MountError::MountTable",
            Box::new(MountError::MountTable {
                target: path(),
                source: table(),
            }),
        ),
        (
            "MountError::Remount",
            Box::new(MountError::Remount {
                target: path(),
                flags: MountFlags::NOSUID,
                data: "size=1m".into(),
                source: io(),
            }),
        ),
        (
            "UnmountError::MountTable",
            Box::new(UnmountError::MountTable(io())),
        ),
        (
            "UnmountError::Unmount",
            Box::new(UnmountError::Unmount {
                point: path(),
                source: io(),
            }),
        ),
        ("TableError::Read", Box::new(table())),
        (
            "TableError::Parse",
            Box::new(TableError::Parse(ParseError {
                line: "1 2".into(),
                problem: CAUSE,
            })),
        ),
        (
            "DeviceError::Open",
            Box::new(DeviceError::Open {
                path: path(),
                source: io(),
            }),
        ),
        (
            "DeviceError::Size",
            Box::new(DeviceError::Size {
                path: path(),
                source: io(),
            }),
        ),
        (
            "GrowError::MountTable",
            Box::new(GrowError::MountTable {
                mount_point: path(),
                source: table(),
            }),
        ),
        (
            "GrowError::Open",
            Box::new(GrowError::Open {
                mount_point: path(),
                source: io(),
            }),
        ),
        (
            "GrowError::Device",
            Box::new(GrowError::Device {
                mount_point: path(),
                source: DeviceError::Open {
                    path: path(),
                    source: io(),
                },
            }),
        ),
        (
            "GrowError::Size",
            Box::new(GrowError::Size {
                mount_point: path(),
                fstype: "ext4".into(),
                source: io(),
            }),
        ),
        (
            "GrowError::Permission",
            Box::new(GrowError::Permission {
                mount_point: path(),
                fstype: "ext4".into(),
                capability: "CAP_SYS_RESOURCE",
                source: io(),
            }),
        ),
        (
            "GrowError::Grow",
            Box::new(GrowError::Grow {
                mount_point: path(),
                fstype: "ext4".into(),
                wanted: 1 << 30,
                source: io(),
            }),
        ),
        (
            "EphemeralError::Record",
            Box::new(EphemeralError::Record {
                doing: "reading",
                source: io(),
            }),
        ),
        (
            "EphemeralError::Validate",
            Box::new(EphemeralError::Validate {
                volume_id: "v".into(),
                source: sdk(),
            }),
        ),
        (
            "EphemeralError::Create",
            Box::new(EphemeralError::Create {
                volume_id: "v".into(),
                source: sdk(),
            }),
        ),
        (
            "EphemeralError::Stage",
            Box::new(EphemeralError::Stage {
                volume_id: "v".into(),
                source: sdk(),
            }),
        ),
        (
            "EphemeralError::Restage",
            Box::new(EphemeralError::Restage {
                volume_id: "v".into(),
                source: sdk(),
            }),
        ),
        (
            "EphemeralError::Unstage",
            Box::new(EphemeralError::Unstage {
                volume_id: "v".into(),
                source: sdk(),
            }),
        ),
        (
            "EphemeralError::Delete",
            Box::new(EphemeralError::Delete {
                volume_id: "v".into(),
                source: sdk(),
            }),
        ),
        (
            "PublishError::Attach",
            Box::new(PublishError::Attach {
                node_id: "n".into(),
                source: sdk(),
            }),
        ),
        (
            "UnpublishError::Detach",
            Box::new(UnpublishError::Detach(sdk())),
        ),
        (
            "GetVolumeError::Listing",
            Box::new(GetVolumeError::Listing(sdk())),
        ),
        (
            "GetVolumeError::Health",
            Box::new(GetVolumeError::Health(sdk())),
        ),
        (
            "PublishError::Context",
            Box::new(PublishError::Context(ContextError::Limit(limit()))),
        ),
        (
            "DeleteVolumeError::Record",
            Box::new(DeleteVolumeError::Record(io())),
        ),
        (
            "ListVolumesError::Answer",
            Box::new(ListVolumesError::Answer(VolumeAnswerError::Limit(limit()))),
        ),
        (
            "SnapshotAnswerError::Handle",
            Box::new(SnapshotAnswerError::Handle(limit())),
        ),
        (
            "AnswerError::Handle",
            Box::new(AnswerError::Handle(limit())),
        ),
        (
            "AnswerError::Member",
            Box::new(AnswerError::Member(SnapshotAnswerError::Handle(limit()))),
        ),
        (
            "OccupancyError::MountTable",
            Box::new(OccupancyError::MountTable(table())),
        ),
        (
            "OccupancyError::Records",
            Box::new(OccupancyError::Records(io())),
        ),
        (
            "BindError::MountTable",
            Box::new(BindError::MountTable(table())),
        ),
        ("BindError::TargetDir", Box::new(BindError::TargetDir(io()))),
        (
            "BindError::TargetParent",
            Box::new(BindError::TargetParent(io())),
        ),
        (
            "BindError::TargetFile",
            Box::new(BindError::TargetFile(io())),
        ),
        ("BindError::Remove", Box::new(BindError::Remove(io()))),
        ("RecordError::Read", Box::new(RecordError::Read(io()))),
        ("RecordError::Write", Box::new(RecordError::Write(io()))),
        ("RecordError::Remove", Box::new(RecordError::Remove(io()))),
        (
            "UndoStageError::Unmount",
            Box::new(UndoStageError::Unmount(UnmountError::MountTable(io()))),
        ),
        ("StatsError::Usage", Box::new(StatsError::Usage(io()))),
        #[cfg(feature = "testing")]
        (
            "HarnessError::Io",
            Box::new(crate::testing::HarnessError::Io(io())),
        ),
        #[cfg(feature = "testing")]
        (
            "HarnessError::Driver",
            Box::new(crate::testing::HarnessError::Driver(crate::Error::Socket {
                path: path(),
                source: io(),
            })),
        ),
    ];
    for (what, err) in &cases {
        assert_cause_once(what, err.as_ref());
    }
}

/// Causes whose text is not pav-csi's to choose (a task's failure, a mode
/// refused): said once too.
#[test]
fn other_causes_are_said_once() {
    let cases: Vec<(&str, Box<dyn Error>)> = vec![
        (
            "DeleteVolumeError::RecordTask",
            Box::new(DeleteVolumeError::RecordTask(join_error())),
        ),
        (
            "node PublishError::ServiceAccountTokens",
            Box::new(crate::node::publish::PublishError::ServiceAccountTokens {
                field: "secrets",
                source: pav_sdk::TokensError::Malformed { line: 1, column: 1 },
            }),
        ),
        (
            "PublishError::Mode",
            Box::new(PublishError::Mode(
                crate::controller::ModeError::VolumeMode(pav_sdk::VolumeMode::Block),
            )),
        ),
    ];
    for (what, err) in &cases {
        let (message, cause) = (err.to_string(), err.source().unwrap().to_string());
        assert!(
            !message.contains(&cause),
            "{what}: {message:?} repeats {cause:?}"
        );
        assert_eq!(
            super::error_chain(err.as_ref()),
            format!("{message}: {cause}"),
            "{what}"
        );
    }
}

/// `Error::Transport`'s source is tonic's, whose text is its own.
#[test]
fn the_transport_error_is_said_once() {
    let err = crate::Error::Transport(transport());
    let (message, cause) = (err.to_string(), err.source().unwrap().to_string());
    assert!(!message.contains(&cause), "{message:?} repeats {cause:?}");
    let chain = super::error_chain(&err);
    assert!(chain.starts_with(&format!("{message}: {cause}")), "{chain}");
}

/// `freeze` builds its error itself (its fields are private).
#[test]
fn a_freeze_error_is_said_once() {
    let err = crate::mount::blocking::freeze("/nonexistent/pav-cause-once").unwrap_err();
    let (message, cause) = (err.to_string(), err.source().unwrap().to_string());
    assert!(!message.contains(&cause), "{message:?} repeats {cause:?}");
    assert_eq!(super::error_chain(&err), format!("{message}: {cause}"));
}
