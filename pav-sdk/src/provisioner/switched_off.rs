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

    #[test]
    fn modify_is_dropped_on_request() {
        let provisioner = crate::provisioner!(Modifiable);
        assert!(provisioner.modify.is_some());
        assert!(provisioner.without_modify().modify.is_none());
    }
}
