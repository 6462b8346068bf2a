//! [`provisioner!`](crate::provisioner!): a [`Provisioner`] with every
//! touch point its value implements, so that implementing a trait and
//! forgetting its `with_*` call cannot silently disable it.
//!
//! The macro picks, at compile time and for the concrete type it is given,
//! between two methods of the same name: one from a trait implemented only
//! when the type implements the touch point (it calls `with_*`), and a
//! fallback that changes nothing. Method resolution tries the receiver as
//! it is before taking a reference to it, so the first applies whenever
//! its bound holds ("autoref specialization"). This needs the concrete
//! type, which is why it is a macro: in a generic function every probe
//! would take the fallback.

use std::marker::PhantomData;

use crate::attach::Attach;
use crate::group_snapshot::GroupSnapshot;
use crate::health::Health;
use crate::provisioner::Provisioner;
use crate::snapshot::Snapshot;
use crate::touch_points::{
    Capacity, Create, Delete, Expand, List, Modify, NodeExpand, Stage, Stats, Unstage, Validate,
};

/// Stands for the type of a provisioner's value while the macro probes
/// which touch points it implements.
#[doc(hidden)]
#[derive(Debug)]
pub struct Probe<P>(PhantomData<P>);

impl<P> Probe<P> {
    /// The probe of `provisioner`'s value type.
    pub fn of(_provisioner: &Provisioner<P>) -> Self {
        Probe(PhantomData)
    }
}

/// For each touch point: a trait whose method adds it, implemented on
/// `Probe<P>` when `P` implements the touch point, and a fallback trait
/// with a method of the same name on `&Probe<P>`, which adds nothing.
macro_rules! probes {
    ($($touch_point:ident: $found:ident, $missing:ident, $method:ident, $with:ident;)*) => {$(
        #[doc(hidden)]
        pub trait $found<P> {
            /// Adds the touch point.
            fn $method(&self, provisioner: Provisioner<P>) -> Provisioner<P>;
        }

        impl<P: $touch_point + Send + Sync + 'static> $found<P> for Probe<P> {
            fn $method(&self, provisioner: Provisioner<P>) -> Provisioner<P> {
                provisioner.$with()
            }
        }

        #[doc(hidden)]
        pub trait $missing<P> {
            /// Adds nothing: the value does not implement the touch point.
            fn $method(&self, provisioner: Provisioner<P>) -> Provisioner<P>;
        }

        impl<P> $missing<P> for &Probe<P> {
            fn $method(&self, provisioner: Provisioner<P>) -> Provisioner<P> {
                provisioner
            }
        }
    )*};
}

probes! {
    Validate: FoundValidate, MissingValidate, add_validate, with_validate;
    Create: FoundCreate, MissingCreate, add_create, with_create;
    Delete: FoundDelete, MissingDelete, add_delete, with_delete;
    Stage: FoundStage, MissingStage, add_stage, with_stage;
    Unstage: FoundUnstage, MissingUnstage, add_unstage, with_unstage;
    Stats: FoundStats, MissingStats, add_stats, with_stats;
    Expand: FoundExpand, MissingExpand, add_expand, with_expand;
    Modify: FoundModify, MissingModify, add_modify, with_modify;
    Attach: FoundAttach, MissingAttach, add_attach, with_attach;
    Health: FoundHealth, MissingHealth, add_health, with_health;
    NodeExpand: FoundNodeExpand, MissingNodeExpand, add_node_expand, with_node_expand;
    Capacity: FoundCapacity, MissingCapacity, add_capacity, with_capacity;
    List: FoundList, MissingList, add_list, with_list;
    Snapshot: FoundSnapshot, MissingSnapshot, add_snapshot, with_snapshot;
    GroupSnapshot: FoundGroupSnapshot, MissingGroupSnapshot, add_group_snapshot, with_group_snapshot;
}

/// A [`Provisioner`](crate::Provisioner) of `value` with every touch point
/// `value`'s type implements: [`Validate`](crate::Validate),
/// [`Create`](crate::Create), [`Delete`](crate::Delete),
/// [`Stage`](crate::Stage), [`Unstage`](crate::Unstage),
/// [`Stats`](crate::Stats), [`Expand`](crate::Expand),
/// [`Modify`](crate::Modify), [`Attach`](crate::Attach), [`Health`](crate::Health),
/// [`NodeExpand`](crate::NodeExpand),
/// [`Capacity`](crate::Capacity),
/// [`List`](crate::List), [`Snapshot`](crate::Snapshot) and
/// [`GroupSnapshot`](crate::GroupSnapshot). Implementing
/// a trait is registering it: none can be forgotten. The options that are
/// not traits (`stage_on_publish`, `clones_volumes`, modes, ...) follow as
/// method calls.
///
/// ```
/// use pav_sdk::*;
///
/// struct Mine;
///
/// #[async_trait]
/// impl Create for Mine {
///     async fn create(&self, req: CreateRequest) -> Result<Volume> {
///         Ok(Volume::new(req.name, 1 << 20))
///     }
///     async fn exists(&self, _: &VolumeId) -> Result<bool> {
///         Ok(false)
///     }
/// }
///
/// #[async_trait]
/// impl Delete for Mine {
///     async fn delete(&self, _: DeleteRequest) -> Result<()> {
///         Ok(())
///     }
/// }
///
/// let provisioner = pav_sdk::provisioner!(Mine).clones_volumes();
/// assert!(provisioner.create().is_some() && provisioner.delete().is_some());
/// assert!(provisioner.stage().is_none() && provisioner.snapshot().is_none());
/// ```
///
/// It needs the value's concrete type: inside a function generic over the
/// type, build the [`Provisioner`](crate::Provisioner) with `new` and the
/// `with_*` calls instead.
#[macro_export]
macro_rules! provisioner {
    ($value:expr $(,)?) => {{
        #[allow(unused_imports)]
        use $crate::register::{FoundAttach as _, MissingAttach as _};
        #[allow(unused_imports)]
        use $crate::register::{
            FoundCapacity as _, FoundCreate as _, FoundDelete as _, FoundExpand as _,
            FoundGroupSnapshot as _, FoundHealth as _, FoundList as _, FoundModify as _,
            FoundNodeExpand as _, FoundSnapshot as _, FoundStage as _, FoundStats as _,
            FoundUnstage as _, FoundValidate as _, MissingCapacity as _, MissingCreate as _,
            MissingDelete as _, MissingExpand as _, MissingGroupSnapshot as _, MissingHealth as _,
            MissingList as _, MissingModify as _, MissingNodeExpand as _, MissingSnapshot as _,
            MissingStage as _, MissingStats as _, MissingUnstage as _, MissingValidate as _,
        };
        let provisioner = $crate::Provisioner::new($value);
        let probe = $crate::register::Probe::of(&provisioner);
        let provisioner = (&probe).add_validate(provisioner);
        let provisioner = (&probe).add_create(provisioner);
        let provisioner = (&probe).add_delete(provisioner);
        let provisioner = (&probe).add_stage(provisioner);
        let provisioner = (&probe).add_unstage(provisioner);
        let provisioner = (&probe).add_stats(provisioner);
        let provisioner = (&probe).add_expand(provisioner);
        let provisioner = (&probe).add_modify(provisioner);
        let provisioner = (&probe).add_attach(provisioner);
        let provisioner = (&probe).add_health(provisioner);
        let provisioner = (&probe).add_node_expand(provisioner);
        let provisioner = (&probe).add_capacity(provisioner);
        let provisioner = (&probe).add_list(provisioner);
        let provisioner = (&probe).add_snapshot(provisioner);
        (&probe).add_group_snapshot(provisioner)
    }};
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// Implements Stage, Unstage and Stats, none of the controller's.
    struct NodeOnly;

    #[async_trait]
    impl Stage for NodeOnly {
        async fn stage(&self, req: StageRequest) -> Result<Staged> {
            Ok(Staged::at(req.target_path))
        }
    }

    #[async_trait]
    impl Unstage for NodeOnly {
        async fn unstage(&self, _: UnstageRequest) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait]
    impl Stats for NodeOnly {
        async fn stats(&self, _: StatsRequest) -> Result<VolumeStats> {
            Ok(VolumeStats::bytes(Usage::default()))
        }
    }

    #[test]
    fn every_implemented_touch_point_is_registered_and_no_other() {
        let provisioner = crate::provisioner!(NodeOnly);
        assert!(provisioner.stage().is_some());
        assert!(provisioner.unstage().is_some());
        assert!(provisioner.stats().is_some());
        assert!(provisioner.validate().is_none());
        assert!(provisioner.create().is_none());
        assert!(provisioner.delete().is_none());
        assert!(provisioner.expand().is_none());
        assert!(provisioner.modify().is_none());
        assert!(provisioner.attach().is_none());
        assert!(provisioner.health().is_none());
        assert!(provisioner.node_expand().is_none());
        assert!(provisioner.capacity().is_none());
        assert!(provisioner.list().is_none());
        assert!(provisioner.snapshot().is_none());
        assert!(provisioner.group_snapshot().is_none());
    }

    /// Creates and modifies: the controller's touch points found too.
    struct Modifiable;

    #[async_trait]
    impl Create for Modifiable {
        async fn create(&self, req: CreateRequest) -> Result<Volume> {
            Ok(Volume::new(req.name, 1))
        }
    }

    #[async_trait]
    impl Modify for Modifiable {
        async fn modify(&self, _: ModifyRequest) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn modify_is_registered_when_implemented() {
        let provisioner = crate::provisioner!(Modifiable);
        assert!(provisioner.create().is_some() && provisioner.modify().is_some());
        assert!(provisioner.expand().is_none() && provisioner.stage().is_none());
    }

    /// Takes snapshots alone and in groups.
    struct Grouping;

    #[async_trait]
    impl Snapshot for Grouping {
        async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
            Ok(SnapshotInfo::new(
                req.name,
                req.source.as_str(),
                1,
                std::time::UNIX_EPOCH,
            ))
        }
        async fn delete_snapshot(&self, _: DeleteSnapshotRequest) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait]
    impl GroupSnapshot for Grouping {
        async fn create_group_snapshot(
            &self,
            req: GroupSnapshotRequest,
        ) -> Result<GroupSnapshotInfo> {
            Ok(GroupSnapshotInfo::new(req.name, [], std::time::UNIX_EPOCH))
        }
        async fn delete_group_snapshot(&self, _: DeleteGroupSnapshotRequest) -> Result<()> {
            Ok(())
        }
    }

    /// Attaches: found beside the others.
    struct Attachable;

    #[async_trait]
    impl Attach for Attachable {
        async fn attach(&self, _: AttachRequest) -> Result<Attached> {
            Ok(Attached::default())
        }
        async fn detach(&self, _: DetachRequest) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn group_snapshot_is_registered_when_implemented() {
        let provisioner = crate::provisioner!(Grouping);
        assert!(provisioner.snapshot().is_some() && provisioner.group_snapshot().is_some());
        assert!(crate::provisioner!(Modifiable).group_snapshot().is_none());
    }

    #[test]
    fn attach_is_registered_when_implemented() {
        let provisioner = crate::provisioner!(Attachable);
        assert!(provisioner.attach().is_some());
        assert!(provisioner.create().is_none() && provisioner.modify().is_none());
        assert!(provisioner.volumes_per_node_limit().is_none());
        let limited = crate::provisioner!(Attachable).max_volumes_per_node(8);
        assert_eq!(limited.volumes_per_node_limit(), Some(8));
    }

    /// Reports health only.
    struct Checked;

    #[async_trait]
    impl Health for Checked {
        async fn condition(&self, _: HealthRequest) -> Result<VolumeCondition> {
            Ok(VolumeCondition::healthy())
        }
    }

    #[test]
    fn health_is_registered_when_implemented() {
        let provisioner = crate::provisioner!(Checked);
        assert!(provisioner.health().is_some());
        assert!(provisioner.stats().is_none() && provisioner.list().is_none());
    }

    #[test]
    fn a_value_with_no_touch_point_registers_none() {
        let provisioner = crate::provisioner!(());
        assert!(provisioner.stage().is_none() && provisioner.create().is_none());
    }
}
