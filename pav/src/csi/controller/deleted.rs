//! The record of volumes deleted lately, so a repeated DeleteVolume is
//! answered without a second deletion pod.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Volumes whose DeleteVolume succeeded lately, so a repeated call (the CO
/// retries the whole deletion when removing the PersistentVolume object
/// fails) is answered at once instead of running a second deletion pod.
/// In memory and bounded: at most `capacity` entries, each forgotten after
/// `ttl`.
///
/// The key is the volume handle and the PersistentVolume's UID, not the
/// handle alone: a creation pod may export a handle that a later volume
/// gets again (say, a bucket named after its claim), and that volume's
/// deletion must still run.
#[derive(Debug)]
pub struct Deleted {
    ttl: Duration,
    capacity: usize,
    entries: Mutex<DeletedEntries>,
}

#[derive(Debug, Default)]
struct DeletedEntries {
    at: HashMap<DeletedKey, Instant>,
    /// Keys oldest first; an entry whose time differs from `at`'s was
    /// recorded again later.
    order: VecDeque<(DeletedKey, Instant)>,
}

/// A volume handle and its PersistentVolume's UID.
type DeletedKey = (String, String);

impl Deleted {
    /// A record of at most `capacity` volumes, each kept for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Deleted {
            ttl,
            capacity,
            entries: Mutex::default(),
        }
    }

    fn key(handle: &str, pv_uid: &str) -> DeletedKey {
        (handle.to_owned(), pv_uid.to_owned())
    }

    /// Records, at `now`, that the volume `handle` of the PersistentVolume
    /// with UID `pv_uid` was deleted.
    pub fn record(&self, handle: &str, pv_uid: &str, now: Instant) {
        let key = Self::key(handle, pv_uid);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.forget_older(now, self.ttl);
        entries.at.insert(key.clone(), now);
        entries.order.push_back((key, now));
        while entries.order.len() > self.capacity {
            entries.pop_oldest();
        }
    }

    /// True when the volume was recorded as deleted less than `ttl` before
    /// `now`.
    pub fn contains(&self, handle: &str, pv_uid: &str, now: Instant) -> bool {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .at
            .get(&Self::key(handle, pv_uid))
            .is_some_and(|at| now.saturating_duration_since(*at) < self.ttl)
    }

    /// How many volumes are recorded (expired ones included until the next
    /// [`record`](Self::record)).
    pub fn len(&self) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.at.len()
    }

    /// True when no volume is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Deleted {
    /// 10,000 volumes for 10 minutes.
    fn default() -> Self {
        Deleted::new(10_000, Duration::from_secs(600))
    }
}

impl DeletedEntries {
    fn forget_older(&mut self, now: Instant, ttl: Duration) {
        while self
            .order
            .front()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= ttl)
        {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((key, at)) = self.order.pop_front()
            && self.at.get(&key) == Some(&at)
        {
            self.at.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleted_volumes_are_recorded_per_handle_and_volume() {
        let deleted = Deleted::new(10, Duration::from_secs(600));
        let t0 = Instant::now();
        assert!(!deleted.contains("h", "pv-1", t0));
        deleted.record("h", "pv-1", t0);
        assert!(deleted.contains("h", "pv-1", t0 + Duration::from_secs(1)));
        // The same handle on another PersistentVolume is another volume.
        assert!(!deleted.contains("h", "pv-2", t0));
        assert!(!deleted.contains("h2", "pv-1", t0));
        // Handle and UID are not confused by where they are split.
        deleted.record("a\nb", "c", t0);
        assert!(!deleted.contains("a", "b\nc", t0));
    }

    #[test]
    fn deleted_volumes_are_forgotten_after_the_ttl() {
        let ttl = Duration::from_secs(600);
        let deleted = Deleted::new(10, ttl);
        let t0 = Instant::now();
        deleted.record("old", "1", t0);
        deleted.record("new", "2", t0 + Duration::from_secs(300));
        assert!(deleted.contains("old", "1", t0 + ttl - Duration::from_millis(1)));
        assert!(!deleted.contains("old", "1", t0 + ttl));
        assert!(deleted.contains("new", "2", t0 + ttl));
        // Expired entries go at the next record.
        assert_eq!(deleted.len(), 2);
        deleted.record("newer", "3", t0 + ttl);
        assert_eq!(deleted.len(), 2);
        // Recording again keeps a volume for another ttl.
        deleted.record("new", "2", t0 + ttl + Duration::from_secs(200));
        deleted.record("x", "4", t0 + ttl + Duration::from_secs(400));
        assert!(deleted.contains("new", "2", t0 + ttl + Duration::from_secs(700)));
    }

    #[test]
    fn the_deleted_record_is_bounded() {
        let deleted = Deleted::new(3, Duration::from_secs(600));
        let t0 = Instant::now();
        for i in 0..5u64 {
            deleted.record(&format!("h{i}"), "pv", t0 + Duration::from_secs(i));
        }
        assert_eq!(deleted.len(), 3);
        let now = t0 + Duration::from_secs(5);
        assert!(!deleted.contains("h0", "pv", now));
        assert!(!deleted.contains("h1", "pv", now));
        for i in 2..5 {
            assert!(deleted.contains(&format!("h{i}"), "pv", now));
        }
        // Recording one volume over and over does not grow the record
        // past its bound either, nor lose the volume.
        for i in 0..100u64 {
            deleted.record("h4", "pv", now + Duration::from_millis(i));
        }
        assert!(deleted.len() <= 3);
        assert!(deleted.contains("h4", "pv", now + Duration::from_secs(1)));
        assert_eq!(deleted.entries.lock().unwrap().order.len(), 3);
    }
}
