//! CSI ephemeral inline volumes (`spec.volumeLifecycleModes` with
//! `Ephemeral`; pav-csi's `Provisioner::ephemeral` runs Create, Stage,
//! Unstage and Delete for each with its pod). A PaV ephemeral volume is
//! made by its staging pod and removed by its unstaging pod, as the
//! templates decide: Create only names it (the volume id the kubelet made
//! up) and hands the pod's attributes to Stage in the volume's context;
//! Delete has nothing left to do.

use pav_sdk::{Create, CreateRequest, Delete, DeleteRequest, Parameters, Result, Volume};

use super::PodNode;

/// The volume context key that marks the Stage of an ephemeral volume:
/// the kubelet's own name for it, kept by Create in the context.
pub(super) const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";

#[pav_sdk::async_trait]
impl Create for PodNode {
    async fn create(&self, req: CreateRequest) -> Result<Volume> {
        Ok(named(req))
    }
}

/// The ephemeral volume `req` asks for, named and described only.
fn named(req: CreateRequest) -> Volume {
    let size = req.capacity.min_bytes;
    let mut volume = Volume::new(req.name, size.unwrap_or(0));
    volume.context = req.parameters;
    volume = volume.with_context(EPHEMERAL_KEY, "true");
    if let Some(bytes) = size {
        volume = volume.with_context(pav_sdk::ephemeral::SIZE_ATTRIBUTE, bytes.to_string());
    }
    volume
}

#[pav_sdk::async_trait]
impl Delete for PodNode {
    async fn delete(&self, _: DeleteRequest) -> Result<()> {
        // Its unstaging pod, which pav-csi's Unstage ran, removed it.
        Ok(())
    }
}

/// What an ephemeral volume's context says: the pod's attributes (without
/// the kubelet's keys and `size`) and its size; `None` for a persistent
/// volume's context.
pub(super) fn attributes(context: &Parameters) -> Option<(Parameters, Option<u64>)> {
    if context.get(EPHEMERAL_KEY).map(String::as_str) != Some("true") {
        return None;
    }
    let size = (context.get(pav_sdk::ephemeral::SIZE_ATTRIBUTE)).and_then(|s| s.parse().ok());
    let attributes = (context.iter())
        .filter(|(key, _)| {
            !key.starts_with("csi.storage.k8s.io/") && *key != pav_sdk::ephemeral::SIZE_ATTRIBUTE
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    Some((attributes, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_hands_the_attributes_and_size_to_stage() {
        let mut req = pav_sdk::build::create("csi-abc", pav_sdk::VolumeMode::Filesystem);
        req.parameters = [("tier".to_owned(), "fast".to_owned())].into();
        req.capacity.min_bytes = Some(64 << 20);
        let volume = named(req);
        assert_eq!(volume.handle, "csi-abc");
        let (passed, size) = attributes(&volume.context).unwrap();
        assert_eq!(passed, [("tier".to_owned(), "fast".to_owned())].into());
        assert_eq!(size, Some(64 << 20));
        let persistent: Parameters = [("tier".to_owned(), "fast".to_owned())].into();
        assert_eq!(attributes(&persistent), None);
    }
}
