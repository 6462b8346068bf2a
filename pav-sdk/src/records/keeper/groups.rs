//! Group snapshots over records: a group and each of its members recorded
//! once the author took them, so that repeats, deletes of what is gone
//! and gets are answered without the author.

use async_trait::async_trait;

use super::RecordKeeper;
use crate::group_snapshot::{
    DeleteGroupSnapshotRequest, GetGroupSnapshotRequest, GroupSnapshot, GroupSnapshotInfo,
    GroupSnapshotRequest, check_members,
};
use crate::records::{GroupRecord, SnapshotRecord};
use crate::{Error, Result};

/// The name of the snapshot record of member `handle` of the group named
/// `group`: a name no `CreateSnapshot` gives (the CO's are
/// `snapshot-<uid>`), so a member never takes another snapshot's record.
fn member_name(group: &str, handle: &str) -> String {
    format!("group-member {handle} of {group}")
}

/// `ALREADY_EXISTS` unless the recorded group answers `req`: the same
/// sources, in any order, and the same parameters.
fn check_same(record: &GroupRecord, req: &GroupSnapshotRequest) -> Result<()> {
    let mut recorded: Vec<&str> = record.sources.iter().map(String::as_str).collect();
    let mut requested: Vec<&str> = req.sources.iter().map(|s| s.as_str()).collect();
    recorded.sort_unstable();
    requested.sort_unstable();
    if recorded != requested {
        return Err(Error::AlreadyExists(format!(
            "group snapshot {:?} exists of volumes {recorded:?}, not {requested:?}",
            req.name
        )));
    }
    if record.parameters != req.parameters {
        return Err(Error::AlreadyExists(format!(
            "group snapshot {:?} exists with other parameters",
            req.name
        )));
    }
    Ok(())
}

impl RecordKeeper {
    /// The author's GroupSnapshot (present: the keeper serves it only then).
    fn author_group_snapshot(&self) -> &dyn GroupSnapshot {
        (self.author.group_snapshot.as_deref())
            .expect("records serve group snapshots only for a provisioner with GroupSnapshot")
    }

    /// The recorded group as CreateVolumeGroupSnapshot answered it.
    async fn group_info(&self, record: &GroupRecord) -> Result<GroupSnapshotInfo> {
        let index = self.index().await?;
        let members = (record.members.iter())
            .filter_map(|handle| index.snapshots.get(&member_name(&record.name, handle)))
            .map(SnapshotRecord::info);
        Ok(GroupSnapshotInfo::new(
            record.handle.clone(),
            members,
            record.created,
        ))
    }

    /// Records each member of `taken`, then the group: a crash between
    /// leaves member records a retry rewrites.
    async fn record_group(
        &self,
        req: &GroupSnapshotRequest,
        taken: &GroupSnapshotInfo,
    ) -> Result<()> {
        let unrecorded = |e: Error| {
            Error::Unavailable(format!(
                "group snapshot {:?} was taken but cannot be recorded ({}); calling again records it",
                req.name,
                e.message()
            ))
        };
        for member in &taken.snapshots {
            let record = SnapshotRecord {
                name: member_name(&req.name, &member.handle),
                handle: member.handle.clone(),
                source: member.source.clone(),
                size_bytes: member.size_bytes,
                parameters: req.parameters.clone(),
                created: member.created,
                group: Some(taken.handle.clone()),
            };
            self.store.put_snapshot(&record).await.map_err(unrecorded)?;
            self.index()
                .await?
                .snapshots
                .insert(record.name.clone(), record);
        }
        let group = GroupRecord {
            name: req.name.clone(),
            handle: taken.handle.clone(),
            sources: req.sources.iter().map(|s| s.to_string()).collect(),
            parameters: req.parameters.clone(),
            members: taken.snapshots.iter().map(|s| s.handle.clone()).collect(),
            created: taken.created,
        };
        self.store.put_group(&group).await.map_err(unrecorded)?;
        self.index().await?.groups.insert(group.name.clone(), group);
        Ok(())
    }
}

#[async_trait]
impl GroupSnapshot for RecordKeeper {
    async fn create_group_snapshot(&self, req: GroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let recorded = self.index().await?.groups.get(&req.name).cloned();
        if let Some(record) = recorded {
            check_same(&record, &req)?;
            return self.group_info(&record).await;
        }
        let mut asked = req.clone();
        asked.secrets = Default::default();
        let taken = self
            .author_group_snapshot()
            .create_group_snapshot(req)
            .await?;
        if taken.ready() {
            // Recorded once ready: the snapshotter asks again until then.
            self.record_group(&asked, &taken).await?;
        }
        Ok(taken)
    }

    async fn delete_group_snapshot(&self, req: DeleteGroupSnapshotRequest) -> Result<()> {
        let Some(record) = self.index().await?.group(&req.handle).cloned() else {
            return Ok(()); // never taken, or deleted already
        };
        check_members(
            &record.handle,
            &req.snapshot_ids,
            record.members.iter().map(String::as_str),
        )?;
        match self
            .author_group_snapshot()
            .delete_group_snapshot(req)
            .await
        {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        // The members first: a crash before the group's record is removed
        // leaves the group, which the retry deletes again.
        for handle in &record.members {
            let name = member_name(&record.name, handle);
            self.store.remove_snapshot(&name).await?;
            self.index().await?.snapshots.remove(&name);
        }
        self.store.remove_group(&record.name).await?;
        self.index().await?.groups.remove(&record.name);
        Ok(())
    }

    async fn get_group_snapshot(&self, req: GetGroupSnapshotRequest) -> Result<GroupSnapshotInfo> {
        let Some(record) = self.index().await?.group(&req.handle).cloned() else {
            return Err(Error::NotFound(format!(
                "group snapshot {:?} does not exist",
                req.handle.as_str()
            )));
        };
        check_members(
            &record.handle,
            &req.snapshot_ids,
            record.members.iter().map(String::as_str),
        )?;
        self.group_info(&record).await
    }
}
