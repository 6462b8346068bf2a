//! Recent `CreateVolume` and `CreateSnapshot` answers, so a retried
//! request is answered the same.

use std::collections::{HashMap, VecDeque};

use pav_sdk::CreateRequest;

use crate::csi;

/// Recent answers by name (`CreateVolume`'s by default; `CreateSnapshot`'s
/// as [`SnapshotCache`]), so a retried request is answered without calling
/// the provisioner and an incompatible one is refused. At most
/// [`CAPACITY`](Self::CAPACITY) names: the oldest answer goes first (a retry
/// after that calls the provisioner again, which must be idempotent by name
/// anyway).
#[derive(Debug)]
pub(crate) struct CreateCache<Q = CreateRequest, A = csi::Volume> {
    answers: HashMap<String, (Q, A)>,
    /// Names in the order they were answered, oldest first.
    order: VecDeque<String>,
}

/// Recent `CreateSnapshot` answers by snapshot name.
pub(crate) type SnapshotCache = CreateCache<pav_sdk::SnapshotRequest, csi::Snapshot>;

impl<Q, A> Default for CreateCache<Q, A> {
    fn default() -> Self {
        Self {
            answers: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl CreateCache {
    /// Forgets the answer that created `volume_id`.
    pub(crate) fn forget_volume(&mut self, volume_id: &str) {
        self.forget(|volume| volume.volume_id == volume_id);
    }
}

impl SnapshotCache {
    /// Forgets the answer that created `snapshot_id`.
    pub(crate) fn forget_snapshot(&mut self, snapshot_id: &str) {
        self.forget(|snapshot| snapshot.snapshot_id == snapshot_id);
    }
}

impl<Q, A> CreateCache<Q, A> {
    /// Answers kept; each holds one request of bounded size (every string,
    /// map and repeated field of it is limited).
    pub(crate) const CAPACITY: usize = 1024;

    pub(crate) fn get(&self, name: &str) -> Option<&(Q, A)> {
        self.answers.get(name)
    }

    pub(crate) fn insert(&mut self, name: &str, request: Q, volume: A) {
        if self
            .answers
            .insert(name.to_owned(), (request, volume))
            .is_none()
        {
            self.order.push_back(name.to_owned());
        }
        while self.order.len() > Self::CAPACITY {
            if let Some(oldest) = self.order.pop_front() {
                self.answers.remove(&oldest);
            }
        }
    }

    /// Forgets the answers `created` says made what is gone.
    fn forget(&mut self, created: impl Fn(&A) -> bool) {
        self.answers.retain(|_, (_, answer)| !created(answer));
        let answers = &self.answers;
        self.order.retain(|name| answers.contains_key(name));
    }

    /// How many answers are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.answers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pav_sdk::VolumeMode;

    fn volume(id: &str) -> csi::Volume {
        csi::Volume {
            volume_id: id.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn the_create_cache_keeps_the_newest_answers() {
        let request = pav_sdk::build::create("name", VolumeMode::Filesystem);
        let mut cache = CreateCache::default();
        for i in 0..<CreateCache>::CAPACITY + 10 {
            cache.insert(
                &format!("pvc-{i}"),
                request.clone(),
                volume(&format!("v-{i}")),
            );
        }
        assert_eq!(cache.len(), <CreateCache>::CAPACITY);
        assert!(cache.get("pvc-9").is_none(), "oldest kept");
        assert!(cache.get("pvc-10").is_some());
        // A repeated name takes no second place.
        cache.insert("pvc-10", request.clone(), volume("v-10"));
        assert_eq!(cache.order.len(), <CreateCache>::CAPACITY);
        cache.forget_volume("v-10");
        assert!(cache.get("pvc-10").is_none());
        assert_eq!(cache.order.len(), <CreateCache>::CAPACITY - 1);
    }
}
