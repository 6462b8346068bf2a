//! Attach and detach over records: each volume's attachments answer
//! repeats, conflicts between nodes and the per-node limit; the author's
//! [`Attach`] does the attaching.

use async_trait::async_trait;

use super::RecordKeeper;
use crate::attach::{Attach, AttachRequest, Attached, DetachRequest};
use crate::records::{AttachmentRecord, Index, RecordedMode, VolumeRecord};
use crate::{Error, Result};

/// What an attachment is for: a repeat must ask for the same.
fn same_use(recorded: &AttachmentRecord, req: &AttachRequest) -> bool {
    recorded.volume_mode == RecordedMode::from(req.volume_mode)
        && recorded.access_mode == format!("{:?}", req.access_mode)
        && recorded.read_only == req.read_only
}

/// Whether a recorded access mode is one node's.
fn single_node(access_mode: &str) -> bool {
    !matches!(
        access_mode,
        "MultiNodeReaderOnly" | "MultiNodeSingleWriter" | "MultiNodeMultiWriter"
    )
}

impl Index {
    /// Attachments `node_id` holds and is being given.
    fn attached_to(&self, node_id: &str) -> u32 {
        let recorded = (self.volumes.values())
            .flat_map(|v| &v.attachments)
            .filter(|a| a.node_id == node_id)
            .count();
        let pending = self.attaching.get(node_id).copied().unwrap_or(0);
        u32::try_from(recorded)
            .unwrap_or(u32::MAX)
            .saturating_add(pending)
    }
}

/// What an attach asks of a volume as recorded.
enum Decision {
    /// Attached already for the same use: this context.
    Repeat(Attached),
    /// A new attachment, which may go ahead.
    Attach,
}

/// The CSI spec's answer to `req` from the record, before any attaching.
fn decide(record: &VolumeRecord, req: &AttachRequest) -> Result<Decision> {
    if let Some(recorded) = (record.attachments.iter()).find(|a| a.node_id == req.node_id) {
        if same_use(recorded, req) {
            return Ok(Decision::Repeat(Attached::with_context(
                recorded.publish_context.clone(),
            )));
        }
        return Err(Error::AlreadyExists(format!(
            "volume {:?} is attached to node {:?} {}as {} {}, not as asked",
            req.handle.as_str(),
            req.node_id,
            if recorded.read_only { "read-only " } else { "" },
            recorded.access_mode,
            match recorded.volume_mode {
                RecordedMode::Filesystem => "Filesystem",
                RecordedMode::Block => "Block",
            },
        )));
    }
    let asked_single = !req.access_mode.is_multi_node();
    if let Some(elsewhere) = (record.attachments.iter())
        .find(|a| a.node_id != req.node_id && (asked_single || single_node(&a.access_mode)))
    {
        return Err(Error::FailedPrecondition(format!(
            "volume {:?} is attached to node {:?} ({}); it can be attached to one node at a time",
            req.handle.as_str(),
            elsewhere.node_id,
            elsewhere.access_mode
        )));
    }
    Ok(Decision::Attach)
}

impl RecordKeeper {
    /// Holds a place on `node_id` for an attachment until
    /// [`unhold`](Self::unhold); `RESOURCE_EXHAUSTED` when it is full.
    async fn hold(&self, node_id: &str) -> Result<()> {
        let mut index = self.index().await?;
        if let Some(max) = self.author.max_volumes_per_node {
            let held = index.attached_to(node_id);
            if held >= max {
                return Err(Error::ResourceExhausted(format!(
                    "node {node_id:?} holds {held} volumes, its maximum"
                )));
            }
        }
        *index.attaching.entry(node_id.to_owned()).or_default() += 1;
        Ok(())
    }

    async fn unhold(&self, node_id: &str) {
        let Ok(mut index) = self.index().await else {
            return;
        };
        let left = match index.attaching.get_mut(node_id) {
            Some(count) => {
                *count = count.saturating_sub(1);
                *count
            }
            None => return,
        };
        if left == 0 {
            index.attaching.remove(node_id);
        }
    }

    /// The author's Attach (present: the keeper serves Attach only then).
    fn author_attach(&self) -> &dyn Attach {
        (self.author.attach.as_deref())
            .expect("records serve Attach only for a provisioner with Attach")
    }

    /// Writes `record` with its attachments changed by `change`, from the
    /// record as it is now (another volume's call may have changed the
    /// index meanwhile, never this volume's: pav-csi holds it).
    async fn update_attachments(
        &self,
        name: &str,
        change: impl FnOnce(&mut Vec<AttachmentRecord>),
    ) -> Result<()> {
        let Some(mut record) = self.index().await?.volumes.get(name).cloned() else {
            return Ok(()); // deleted meanwhile
        };
        change(&mut record.attachments);
        self.store.put_volume(&record).await?;
        self.index().await?.volumes.insert(name.to_owned(), record);
        Ok(())
    }
}

#[async_trait]
impl Attach for RecordKeeper {
    async fn attach(&self, mut req: AttachRequest) -> Result<Attached> {
        let Some(record) = self.index().await?.volume(&req.handle).cloned() else {
            return Err(Error::NotFound(format!(
                "volume {:?} does not exist",
                req.handle.as_str()
            )));
        };
        match decide(&record, &req)? {
            Decision::Repeat(attached) => return Ok(attached),
            Decision::Attach => {}
        }
        let node_id = req.node_id.clone();
        self.hold(&node_id).await?;
        let attachment = AttachmentRecord {
            node_id: node_id.clone(),
            volume_mode: req.volume_mode.into(),
            access_mode: format!("{:?}", req.access_mode),
            read_only: req.read_only,
            publish_context: Default::default(),
        };
        req.record = Some(record.clone());
        let attached = self.author_attach().attach(req).await;
        let recorded = match &attached {
            Ok(attached) => {
                let attachment = AttachmentRecord {
                    publish_context: attached.publish_context.clone(),
                    ..attachment
                };
                (self.update_attachments(&record.name, |all| all.push(attachment))).await
            }
            Err(_) => Ok(()),
        };
        self.unhold(&node_id).await;
        // Unrecorded, it would be attached without the keeper knowing:
        // a retry attaches again (the author's attach is idempotent).
        recorded.map_err(|e| {
            Error::Unavailable(format!(
                "attached, but the attachment cannot be recorded: {}",
                e.message()
            ))
        })?;
        attached
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        let Some(record) = self.index().await?.volume(&req.handle).cloned() else {
            return Ok(()); // never created, or deleted: attached nowhere
        };
        let nodes: Vec<String> = (record.attachments.iter())
            .map(|a| a.node_id.clone())
            .filter(|node| req.node_id.as_ref().is_none_or(|wanted| wanted == node))
            .collect();
        for node in nodes {
            let one = DetachRequest {
                node_id: Some(node.clone()),
                ..req.clone()
            };
            match self.author_attach().detach(one).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            (self.update_attachments(&record.name, |all| all.retain(|a| a.node_id != node)))
                .await?;
        }
        Ok(())
    }

    fn attaches_read_only(&self) -> bool {
        self.author_attach().attaches_read_only()
    }
}
