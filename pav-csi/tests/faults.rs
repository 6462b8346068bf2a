//! pav_csi::testing's faults: each meets the calls it was set for, and a
//! faulty value serves what its value serves, through pav-csi too.

use std::sync::Mutex;
use std::time::Duration;

use pav_csi::csi;
use pav_csi::testing::{Fault, Faults, Harness, Method, capability};
use pav_sdk::{
    AccessMode, Create, CreateRequest, Delete, DeleteRequest, Error, Result, Volume, VolumeMode,
    async_trait,
};
use tonic::Code;

/// Storage that notes each call that reached it.
#[derive(Default)]
struct Noted(Mutex<Vec<String>>);

impl Noted {
    fn calls(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait]
impl Create for Noted {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        self.0.lock().unwrap().push(format!("create {}", req.name));
        Ok(Volume::new(req.name, 1 << 20))
    }
}

#[async_trait]
impl Delete for Noted {
    async fn delete(&self, req: DeleteRequest) -> Result<()> {
        self.0
            .lock()
            .unwrap()
            .push(format!("delete {}", req.handle));
        Ok(())
    }
}

fn unavailable(why: &str) -> Error {
    Error::Unavailable(why.into())
}

fn create(name: &str) -> CreateRequest {
    pav_sdk::build::create(name, VolumeMode::Filesystem)
}

/// `Fail` stops the call before the storage, `FailAfter` loses the
/// answer of a call that ran; queued faults meet the next calls in order,
/// then `every`'s fault meets each call until cleared.
#[tokio::test]
async fn each_fault_meets_the_calls_it_was_set_for() {
    let faults = Faults::new();
    let p = pav_sdk::provisioner!(faults.around(Noted::default()));
    let creator = p.create().unwrap();
    faults
        .next(Method::Create, Fault::Fail(unavailable("refused")))
        .next(Method::Create, Fault::FailAfter(unavailable("crashed")));
    let refused = creator.create(create("a")).await.unwrap_err();
    assert_eq!(refused, unavailable("refused"));
    let crashed = creator.create(create("b")).await.unwrap_err();
    assert_eq!(crashed, unavailable("crashed"));
    creator.create(create("c")).await.unwrap();
    assert_eq!(p.inner().inner().calls(), ["create b", "create c"]);
    assert_eq!(faults.calls(Method::Create), 2);

    faults.every(Method::Delete, Fault::Fail(unavailable("down")));
    let deleter = p.delete().unwrap();
    for _ in 0..2 {
        let down = deleter.delete(pav_sdk::build::delete("c")).await;
        assert_eq!(down, Err(unavailable("down")));
    }
    faults.clear(Method::Delete);
    deleter.delete(pav_sdk::build::delete("c")).await.unwrap();
    assert_eq!(faults.calls(Method::Delete), 1);
    assert_eq!(faults.calls(Method::Exists), 0, "exists is a method apart");
}

/// A delayed call starts that much later, then runs.
#[tokio::test(start_paused = true)]
async fn a_delayed_call_starts_later() {
    let faults = Faults::new();
    let p = pav_sdk::provisioner!(faults.around(Noted::default()));
    faults.next(Method::Create, Fault::Delay(Duration::from_secs(60)));
    let started = tokio::time::Instant::now();
    p.create().unwrap().create(create("slow")).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(60));
    assert_eq!(p.inner().inner().calls(), ["create slow"]);
}

/// The faulty value serves the touch points of its value, no more.
#[test]
fn a_faulty_value_serves_what_its_value_serves() {
    let faults = Faults::new();
    let faulty = pav_sdk::provisioner!(faults.around(Noted::default()));
    let plain = pav_sdk::provisioner!(Noted::default());
    assert_eq!(format!("{faulty:?}"), format!("{plain:?}"));
    assert!(faulty.create().is_some() && faulty.stage().is_none());
}

/// Through pav-csi, with records: a Create whose answer is lost is
/// UNAVAILABLE, and its repeat creates again (the storage must take it)
/// and is recorded once.
#[tokio::test]
async fn a_crash_before_the_record_is_retried_through_the_driver() {
    let faults = Faults::new();
    let records = tempfile::tempdir().unwrap();
    let keep = pav_sdk::records::Records::in_dir(records.path());
    let p = pav_sdk::provisioner!(faults.around(Noted::default())).keep_records(keep);
    faults.next(Method::Create, Fault::FailAfter(unavailable("crashed")));
    let mut h = Harness::start(p).await.unwrap();
    let req = csi::CreateVolumeRequest {
        name: "pvc-1".into(),
        volume_capabilities: vec![capability(
            VolumeMode::Filesystem,
            AccessMode::SingleNodeWriter,
        )],
        ..Default::default()
    };
    let crashed = h.controller.create_volume(req.clone()).await.unwrap_err();
    assert_eq!(crashed.code(), Code::Unavailable, "{crashed:?}");
    h.controller.create_volume(req).await.unwrap();
    let listed = (h
        .controller
        .list_volumes(csi::ListVolumesRequest::default())
        .await)
        .unwrap()
        .into_inner();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(faults.calls(Method::Create), 2);
    h.shutdown().await.unwrap();
}
