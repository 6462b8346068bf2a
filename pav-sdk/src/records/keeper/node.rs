//! The node's calls over records: Stage, Unstage and NodeExpand get their
//! volume's record in their request, so that what Create chose (a size, a
//! source) reaches the node without the volume context.

use std::path::PathBuf;

use async_trait::async_trait;

use super::RecordKeeper;
use crate::records::VolumeRecord;
use crate::touch_points::{NodeExpand, Stage, Unstage};
use crate::types::{NodeCleanUpRequest, NodeExpandRequest, StageRequest, Staged, UnstageRequest};
use crate::{Result, VolumeId};

impl RecordKeeper {
    /// The record of the volume `handle`, read from the store rather than
    /// this process's index: a node plugin may run apart from the
    /// controller that writes the records, and an index loaded once would
    /// not see the volumes created or grown since.
    async fn stored_record(&self, handle: &VolumeId) -> Result<Option<VolumeRecord>> {
        let recorded = self.store.load().await?;
        Ok((recorded.volumes.into_iter()).find(|r| r.handle == **handle))
    }
}

impl RecordKeeper {
    /// The author's Stage, which records wrap.
    fn author_stage(&self) -> &dyn Stage {
        (self.author.stage.as_deref())
            .expect("records serve Stage only for a provisioner with Stage")
    }
}

#[async_trait]
impl Stage for RecordKeeper {
    async fn stage(&self, mut req: StageRequest) -> Result<Staged> {
        req.record = self.stored_record(&req.handle).await?;
        req.node_dir = made_for_record(&req.record, req.node_dir.take())?;
        self.author_stage().stage(req).await
    }

    async fn clean_up(&self, req: NodeCleanUpRequest) -> Result<()> {
        self.author_stage().clean_up(req).await
    }

    async fn max_volumes_now(&self) -> Result<Option<u32>> {
        self.author_stage().max_volumes_now().await
    }
}

/// The node directory pav-csi named, made when the volume is recorded;
/// none for a volume pav-sdk did not create, which no Delete would ever
/// clean up after.
fn made_for_record(record: &Option<VolumeRecord>, dir: Option<PathBuf>) -> Result<Option<PathBuf>> {
    match (record, dir) {
        (Some(_), Some(dir)) => {
            std::fs::create_dir_all(&dir)?;
            Ok(Some(dir))
        }
        _ => Ok(None),
    }
}

#[async_trait]
impl Unstage for RecordKeeper {
    async fn unstage(&self, mut req: UnstageRequest) -> Result<()> {
        let unstage = (self.author.unstage.as_deref())
            .expect("records serve Unstage only for a provisioner with Unstage");
        req.record = self.stored_record(&req.handle).await?;
        unstage.unstage(req).await
    }
}

#[async_trait]
impl NodeExpand for RecordKeeper {
    async fn node_expand(&self, mut req: NodeExpandRequest) -> Result<u64> {
        let node_expand = (self.author.node_expand.as_deref())
            .expect("records serve NodeExpand only for a provisioner with NodeExpand");
        req.record = self.stored_record(&req.handle).await?;
        node_expand.node_expand(req).await
    }
}
