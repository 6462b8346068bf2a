//! Touch points a value implements but whose configuration, read when the
//! driver starts, says it does not serve: a provisioner built from a spec
//! (such as pav's PavProvisioners) implements every trait once and drops
//! what the spec lacks, so pav-csi advertises only what is served.

use super::Provisioner;

impl<P: Send + Sync + 'static> Provisioner<P> {
    /// Drops the [`Capacity`](crate::Capacity) touch point
    /// [`provisioner!`](crate::provisioner!) added: `GET_CAPACITY` is not
    /// advertised and `GetCapacity` answers `UNIMPLEMENTED`.
    ///
    /// ```
    /// # use pav_sdk::*;
    /// # struct Mine;
    /// # #[async_trait::async_trait]
    /// # impl Capacity for Mine {
    /// #     async fn capacity(&self, _: CapacityRequest) -> Result<AvailableCapacity> { Ok(AvailableCapacity::new(0)) }
    /// # }
    /// let p = pav_sdk::provisioner!(Mine);
    /// assert!(p.capacity().is_some());
    /// assert!(p.without_capacity().capacity().is_none());
    /// ```
    pub fn without_capacity(mut self) -> Self {
        self.capacity = None;
        self
    }

    /// Drops the [`Modify`](crate::Modify) touch point
    /// [`provisioner!`](crate::provisioner!) added: `MODIFY_VOLUME` is not
    /// advertised, and `CreateVolume` refuses `mutable_parameters`.
    pub fn without_modify(mut self) -> Self {
        self.modify = None;
        self.rewrap_records();
        self
    }

    /// Drops the [`GroupSnapshot`](crate::GroupSnapshot) touch point
    /// [`provisioner!`](crate::provisioner!) added, keeping
    /// [`Snapshot`](crate::Snapshot): `GROUP_CONTROLLER_SERVICE` is not
    /// advertised, and the GroupController calls answer `UNIMPLEMENTED`.
    pub fn without_group_snapshot(mut self) -> Self {
        self.group_snapshot = None;
        self.rewrap_records();
        self
    }

    /// Drops the [`Attach`](crate::Attach) touch point
    /// [`provisioner!`](crate::provisioner!) added:
    /// `PUBLISH_UNPUBLISH_VOLUME` is not advertised, and
    /// `ControllerPublishVolume` answers `UNIMPLEMENTED`.
    pub fn without_attach(mut self) -> Self {
        self.attach = None;
        self.rewrap_records();
        self
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    struct Modifiable;

    #[async_trait::async_trait]
    impl Modify for Modifiable {
        async fn modify(&self, _: ModifyRequest) -> Result<()> {
            Ok(())
        }
    }

    struct Attachable;

    #[async_trait::async_trait]
    impl Attach for Attachable {
        async fn attach(&self, _: AttachRequest) -> Result<Attached> {
            Ok(Attached::with_context(Parameters::new()))
        }

        async fn detach(&self, _: DetachRequest) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn attach_is_dropped_on_request() {
        let provisioner = crate::provisioner!(Attachable);
        assert!(provisioner.attach.is_some());
        assert!(provisioner.without_attach().attach.is_none());
    }

    struct Grouped;

    #[async_trait::async_trait]
    impl Snapshot for Grouped {
        async fn create_snapshot(&self, req: SnapshotRequest) -> Result<SnapshotInfo> {
            Ok(SnapshotInfo::new(
                req.name,
                req.source,
                0,
                std::time::SystemTime::now(),
            ))
        }

        async fn delete_snapshot(&self, _: DeleteSnapshotRequest) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl GroupSnapshot for Grouped {
        async fn create_group_snapshot(
            &self,
            req: GroupSnapshotRequest,
        ) -> Result<GroupSnapshotInfo> {
            Ok(GroupSnapshotInfo::new(
                req.name,
                [],
                std::time::SystemTime::now(),
            ))
        }

        async fn delete_group_snapshot(&self, _: DeleteGroupSnapshotRequest) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn group_snapshots_are_dropped_on_request_and_snapshots_kept() {
        let provisioner = crate::provisioner!(Grouped);
        assert!(provisioner.group_snapshot.is_some());
        let dropped = provisioner.without_group_snapshot();
        assert!(dropped.group_snapshot.is_none());
        assert!(dropped.snapshot.is_some());
    }

    #[test]
    fn modify_is_dropped_on_request() {
        let provisioner = crate::provisioner!(Modifiable);
        assert!(provisioner.modify.is_some());
        assert!(provisioner.without_modify().modify.is_none());
    }
}
