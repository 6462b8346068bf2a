//! Attach over records: the CSI spec's answers to repeats, conflicts and
//! the per-node limit, without asking the author.

mod common;

use pav_sdk::records::{DirStore, RecordStore, Records};
use pav_sdk::*;

use common::Calls;

const MIB: u64 = 1 << 20;

/// Storage that attaches anything anywhere, counting each call: what
/// records must keep it from being asked.
#[derive(Default)]
struct Disks {
    calls: Calls,
}

#[async_trait]
impl Create for Disks {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(Volume::new(format!("vol-{}", req.name), MIB))
    }
}

#[async_trait]
impl Delete for Disks {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        self.calls.record(format!("delete {}", req.handle.as_str()));
        Ok(())
    }
}

#[async_trait]
impl Attach for Disks {
    async fn attach(&self, req: AttachRequest) -> Result<Attached> {
        let call = format!("attach {} {}", req.handle.as_str(), req.node_id);
        self.calls.record(call);
        if req.node_id == "broken" {
            return Err(Error::Internal("the node does not answer".into()));
        }
        // Named after the volume's name, which only its record tells.
        let device = format!("/dev/disk-{}", req.recorded()?.name);
        Ok(Attached::with_context(Parameters::from([(
            "devicePath".into(),
            device,
        )])))
    }

    async fn detach(&self, req: DetachRequest) -> Result<()> {
        let node = req.node_id.unwrap_or_else(|| "every node".into());
        self.calls
            .record(format!("detach {} {node}", req.handle.as_str()));
        Ok(())
    }
}

fn attach(handle: &str, node: &str, mode: AccessMode) -> AttachRequest {
    let mut req = build::attach(handle, node, VolumeMode::Filesystem);
    req.access_mode = mode;
    req
}

async fn created(p: &Provisioner<Disks>, names: &[&str]) {
    for name in names {
        let req = build::create(*name, VolumeMode::Filesystem);
        p.create().unwrap().create(req).await.unwrap();
    }
}

/// A repeat is answered from the records (also after a restart), another
/// use on the same node is ALREADY_EXISTS, a single-node volume attached
/// elsewhere FAILED_PRECONDITION, a multi-node one attaches to both.
#[tokio::test]
async fn repeats_and_conflicts_are_answered_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let keep = || Records::in_dir(dir.path());
    let p = provisioner!(Disks::default()).keep_records(keep());
    created(&p, &["a", "b"]).await;
    let attacher = p.attach().unwrap();
    let first = attacher
        .attach(attach("vol-a", "n1", AccessMode::SingleNodeWriter))
        .await
        .unwrap();
    assert_eq!(first.publish_context["devicePath"], "/dev/disk-a");
    let again = attacher
        .attach(attach("vol-a", "n1", AccessMode::SingleNodeWriter))
        .await
        .unwrap();
    assert_eq!(again, first);

    let mut read_only = attach("vol-a", "n1", AccessMode::SingleNodeWriter);
    read_only.read_only = true;
    let other_use = attacher.attach(read_only).await.unwrap_err();
    assert!(
        matches!(other_use, Error::AlreadyExists(_)),
        "{other_use:?}"
    );
    let elsewhere = attacher
        .attach(attach("vol-a", "n2", AccessMode::SingleNodeWriter))
        .await
        .unwrap_err();
    assert!(
        matches!(elsewhere, Error::FailedPrecondition(_)),
        "{elsewhere:?}"
    );
    let unknown = attacher
        .attach(attach("vol-never", "n1", AccessMode::SingleNodeWriter))
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::NotFound(_)), "{unknown:?}");

    for node in ["n1", "n2"] {
        attacher
            .attach(attach("vol-b", node, AccessMode::MultiNodeReaderOnly))
            .await
            .unwrap();
    }
    assert_eq!(
        p.inner().calls.all(),
        ["attach vol-a n1", "attach vol-b n1", "attach vol-b n2"]
    );

    let restarted = provisioner!(Disks::default()).keep_records(keep());
    let repeat = (restarted.attach().unwrap())
        .attach(attach("vol-a", "n1", AccessMode::SingleNodeWriter))
        .await
        .unwrap();
    assert_eq!(repeat, first);
    assert!(restarted.inner().calls.all().is_empty());
    let recorded = DirStore::new(dir.path()).load().await.unwrap().volumes;
    let b = recorded.iter().find(|v| v.handle == "vol-b").unwrap();
    assert_eq!(b.attachments.len(), 2);
}

/// Detaching what is not attached asks nobody; a volume still attached
/// cannot be deleted; detaching without a node detaches from each.
#[tokio::test]
async fn detach_and_delete_follow_the_attachments() {
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(Disks::default()).keep_records(Records::in_dir(dir.path()));
    created(&p, &["a"]).await;
    let attacher = p.attach().unwrap();
    for handle in ["vol-a", "vol-never"] {
        let req = build::detach(handle, Some("n1".into()));
        attacher.detach(req).await.unwrap();
    }
    assert!(p.inner().calls.all().is_empty());

    for node in ["n1", "n2"] {
        let req = attach("vol-a", node, AccessMode::MultiNodeMultiWriter);
        attacher.attach(req).await.unwrap();
    }
    let in_use = (p.delete().unwrap())
        .delete(build::delete("vol-a"))
        .await
        .unwrap_err();
    assert!(matches!(in_use, Error::FailedPrecondition(_)), "{in_use:?}");
    attacher.detach(build::detach("vol-a", None)).await.unwrap();
    attacher.detach(build::detach("vol-a", None)).await.unwrap();
    p.delete()
        .unwrap()
        .delete(build::delete("vol-a"))
        .await
        .unwrap();
    assert_eq!(
        p.inner().calls.all(),
        [
            "attach vol-a n1",
            "attach vol-a n2",
            "detach vol-a n1",
            "detach vol-a n2",
            "delete vol-a"
        ]
    );
}

/// A node holding its maximum refuses one more; a failed attach holds no
/// place; a detach frees one.
#[tokio::test]
async fn a_full_node_is_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(Disks::default())
        .keep_records(Records::in_dir(dir.path()))
        .max_volumes_per_node(2);
    created(&p, &["a", "b", "c"]).await;
    let attacher = p.attach().unwrap();
    let failed = attacher
        .attach(attach("vol-a", "broken", AccessMode::SingleNodeWriter))
        .await
        .unwrap_err();
    assert!(matches!(failed, Error::Internal(_)), "{failed:?}");
    for handle in ["vol-a", "vol-b"] {
        let req = attach(handle, "n1", AccessMode::SingleNodeWriter);
        attacher.attach(req).await.unwrap();
    }
    let full = attacher
        .attach(attach("vol-c", "n1", AccessMode::SingleNodeWriter))
        .await
        .unwrap_err();
    assert!(matches!(full, Error::ResourceExhausted(_)), "{full:?}");
    // Repeats are not new attachments.
    let req = attach("vol-b", "n1", AccessMode::SingleNodeWriter);
    attacher.attach(req).await.unwrap();
    let req = attach("vol-c", "n2", AccessMode::SingleNodeWriter);
    attacher.attach(req).await.unwrap();
    let detach = build::detach("vol-a", Some("n1".into()));
    attacher.detach(detach).await.unwrap();
    let req = attach("vol-a", "n1", AccessMode::SingleNodeWriter);
    attacher.attach(req).await.unwrap();
}

#[tokio::test]
async fn without_attach_records_serve_no_attach() {
    struct CreateOnly;
    #[async_trait]
    impl Create for CreateOnly {
        async fn create(&self, req: CreateRequest) -> Result<Volume> {
            Ok(Volume::new(req.name, MIB))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let p = provisioner!(CreateOnly).keep_records(Records::in_dir(dir.path()));
    assert!(p.create().is_some() && p.attach().is_none());
}
