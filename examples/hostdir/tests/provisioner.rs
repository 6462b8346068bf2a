//! The HostDir provisioner's behaviour, including hostile volume ids.

#[allow(dead_code)]
#[path = "../src/provisioner.rs"]
mod provisioner;

use pav_sdk::{Create, Delete, Error, Stage, Stats, VolumeCondition, VolumeId, VolumeMode, build};
use provisioner::HostDir;

const MIB: u64 = 1 << 20;

fn request(name: &str, bytes: u64) -> pav_sdk::CreateRequest {
    let mut req = build::create(name, VolumeMode::Filesystem);
    req.capacity.min_bytes = Some(bytes);
    req
}

#[tokio::test]
async fn create_is_idempotent_and_delete_forgets() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostDir::new(dir.path().join("root"), 10 * MIB).unwrap();
    let volume = host.create(request("pvc-1", MIB)).await.unwrap();
    assert_eq!(
        (volume.handle.as_str(), volume.capacity_bytes),
        ("pvc-1", MIB)
    );
    assert_eq!(host.create(request("pvc-1", MIB)).await.unwrap(), volume);
    let err = host.create(request("pvc-1", 2 * MIB)).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
    assert!(host.exists(&VolumeId::new("pvc-1")).await.unwrap());
    let staged = host
        .stage(build::stage(
            "pvc-1",
            "n",
            "/staging",
            VolumeMode::Filesystem,
        ))
        .await
        .unwrap();
    assert_eq!(staged.path, dir.path().join("root/volumes/pvc-1/data"));
    host.delete(build::delete("pvc-1")).await.unwrap();
    host.delete(build::delete("pvc-1")).await.unwrap();
    assert!(!host.exists(&VolumeId::new("pvc-1")).await.unwrap());
}

#[tokio::test]
async fn the_budget_bounds_what_is_reserved() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostDir::new(dir.path().to_owned(), 3 * MIB).unwrap();
    let err = host.create(request("huge", 4 * MIB)).await.unwrap_err();
    assert!(matches!(err, Error::OutOfRange(_)), "{err:?}");
    host.create(request("a", 2 * MIB)).await.unwrap();
    let err = host.create(request("b", 2 * MIB)).await.unwrap_err();
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err:?}");
    host.delete(build::delete("a")).await.unwrap();
    host.create(request("b", 2 * MIB)).await.unwrap();
}

#[tokio::test]
async fn ids_never_reach_outside_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let host = HostDir::new(root.clone(), 10 * MIB).unwrap();
    // Siblings of the root and of its volumes directory, as an attacker names them.
    for victim in [dir.path().join("victim"), root.join("victim")] {
        std::fs::create_dir_all(victim.join("data")).unwrap();
        std::fs::write(victim.join("size"), "1").unwrap();
    }
    for id in ["../victim", "../../victim", "..", ".", "", "a/../../victim"] {
        host.delete(build::delete(id)).await.unwrap_or_else(|e| {
            assert!(matches!(e, Error::NotFound(_)), "{id:?}: {e:?}");
        });
        assert!(
            !host.exists(&VolumeId::new(id)).await.unwrap_or(false),
            "{id:?}"
        );
        let stage = build::stage(id, "n", "/staging", VolumeMode::Filesystem);
        let err = host.stage(stage).await.unwrap_err();
        assert!(matches!(err, Error::NotFound(_)), "{id:?}: {err:?}");
        let err = host.create(request(id, MIB)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{id:?}: {err:?}");
    }
    assert!(dir.path().join("victim/data").is_dir());
    assert!(root.join("victim/data").is_dir());
}

#[tokio::test]
async fn stats_report_the_volume_not_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostDir::new(dir.path().to_owned(), 10 * MIB).unwrap();
    host.create(request("pvc-1", MIB)).await.unwrap();
    let data = dir.path().join("volumes/pvc-1/data");
    std::fs::create_dir(data.join("sub")).unwrap();
    std::fs::write(data.join("sub/file"), vec![7u8; 256 << 10]).unwrap();
    let ask = build::stats("pvc-1", &data, VolumeMode::Filesystem);
    let stats = host.stats(ask).await.unwrap();
    let bytes = stats.bytes.unwrap();
    assert_eq!(bytes.total, MIB);
    assert!(bytes.used >= 256 << 10 && bytes.used < MIB, "{bytes:?}");
    assert_eq!(bytes.available, MIB - bytes.used);
    assert_eq!(stats.condition, Some(VolumeCondition::healthy()));
    std::fs::write(data.join("big"), vec![7u8; 2 << 20]).unwrap();
    let ask = build::stats("pvc-1", &data, VolumeMode::Filesystem);
    let condition = host.stats(ask).await.unwrap().condition.unwrap();
    assert!(condition.abnormal, "over its size: {condition:?}");
}
