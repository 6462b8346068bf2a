//! CSI ephemeral inline volumes: a volume that lives and dies with one pod,
//! declared in the pod itself ([`Provisioner::ephemeral`]).

use crate::provisioner::Provisioner;
use crate::touch_points::{Create, Delete, Stage};

/// The volume attribute that sizes an ephemeral inline volume (bytes, or a
/// Kubernetes quantity such as `64Mi` or `1G`); without it the volume gets
/// the size [`Create`] chooses for a request without one.
pub const SIZE_ATTRIBUTE: &str = "size";

impl<P: Send + Sync + 'static> Provisioner<P> {
    /// Serves CSI ephemeral inline volumes: a pod's
    ///
    /// ```yaml
    /// volumes:
    ///   - name: scratch
    ///     csi:
    ///       driver: <driver name>
    ///       fsType: ext4            # optional
    ///       volumeAttributes: { size: 64Mi, <parameters> }
    /// ```
    ///
    /// is created for the pod on its node and deleted with it. The
    /// CSIDriver object must list the mode,
    /// `volumeLifecycleModes: [Persistent, Ephemeral]`, and have
    /// `podInfoOnMount: true`: only then does the kubelet (v1.34
    /// `csi_mounter.go`) put `csi.storage.k8s.io/ephemeral: "true"` in the
    /// volume context, which is how pav-csi tells an inline volume from a
    /// persistent one; the pod comes with it
    /// ([`StageRequest::pod`](crate::StageRequest::pod)). No sidecar is
    /// involved: the kubelet calls `NodePublishVolume` with no staging
    /// path, and `NodeUnpublishVolume` when the pod goes.
    ///
    /// pav-csi then runs, in `NodePublishVolume`: [`Create`] (the name is
    /// the volume id the kubelet made up; the size is the
    /// [`SIZE_ATTRIBUTE`] attribute, or Create's default; the parameters
    /// are the pod's `volumeAttributes` without `size` and the
    /// `csi.storage.k8s.io/` keys, which become the pod), after
    /// [`Validate`](crate::Validate) when it has it, then [`Stage`] at the
    /// target path (with the created volume's context and the pod), and
    /// binds what it staged there; in `NodeUnpublishVolume`: unmounts,
    /// [`Unstage`](crate::Unstage) if it has it, and [`Delete`]. A record
    /// in pav-csi's state directory, written before Create and removed
    /// after Delete, keeps each ephemeral volume on the node: after a
    /// crash or a node restart anywhere in between, the kubelet's repeated
    /// publish finishes the volume (Create answers the same volume again,
    /// the data is kept), and its unpublish deletes it. So the volume is
    /// neither leaked nor lost, provided Create is idempotent by name and
    /// its volumes are on this node (Create runs in the node plugin).
    ///
    /// Without this option a publish with the ephemeral key is
    /// `INVALID_ARGUMENT`, naming the key. Requires [`Create`], [`Delete`]
    /// and [`Stage`], and adds them if they were not added yet.
    ///
    /// ```
    /// # use pav_sdk::*;
    /// # struct Mine;
    /// # #[async_trait]
    /// # impl Create for Mine { async fn create(&self, r: CreateRequest) -> Result<Volume> { Ok(Volume::new(r.name, 1)) } }
    /// # #[async_trait]
    /// # impl Delete for Mine { async fn delete(&self, _: DeleteRequest) -> Result<()> { Ok(()) } }
    /// # #[async_trait]
    /// # impl Stage for Mine { async fn stage(&self, r: StageRequest) -> Result<Staged> { Ok(Staged::at(r.target_path)) } }
    /// let p = provisioner!(Mine).ephemeral();
    /// assert!(p.serves_ephemeral() && p.create().is_some());
    /// ```
    pub fn ephemeral(mut self) -> Self
    where
        P: Create + Delete + Stage,
    {
        if self.create.is_none() {
            self = self.with_create();
        }
        if self.delete.is_none() {
            self = self.with_delete();
        }
        if self.stage.is_none() {
            self = self.with_stage();
        }
        self.ephemeral = true;
        self
    }
}

impl<P> Provisioner<P> {
    /// True when CSI ephemeral inline volumes are served; see
    /// [`ephemeral`](Provisioner::ephemeral).
    pub fn serves_ephemeral(&self) -> bool {
        self.ephemeral
    }
}
