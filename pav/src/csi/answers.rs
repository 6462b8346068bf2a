//! Answers of pods that measure something periodically (a segment's
//! capacity, a staged volume's health), reused while they stand, so that
//! a CO polling every minute does not start a pod each time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

// Tokio's clock, which tests can advance, so that how long an answer
// stands is tested without waiting for it.
use tokio::time::Instant;

/// Answers per key, each with when it was measured and how long it
/// stands. The map is behind a mutex held only for a lookup or an insert,
/// never across a pod's run.
#[derive(Debug)]
pub struct Answers<T>(Mutex<HashMap<String, Answer<T>>>);

#[derive(Debug)]
struct Answer<T> {
    measured: Instant,
    stands_for: Duration,
    value: T,
}

/// How many times its standing time an answer is kept after it stopped
/// standing, for [`Answers::latest`].
const KEPT_STANDINGS: u32 = 4;

impl<T> Answer<T> {
    fn stands(&self) -> bool {
        self.measured.elapsed() < self.stands_for
    }

    fn kept(&self) -> bool {
        self.measured.elapsed() < self.stands_for * KEPT_STANDINGS
    }
}

impl<T> Default for Answers<T> {
    fn default() -> Self {
        Answers(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> Answers<T> {
    /// The answer for `key`, unless it is older than it stands for.
    pub fn fresh(&self, key: &str) -> Option<T> {
        let answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        answers
            .get(key)
            .filter(|answer| answer.stands())
            .map(|answer| answer.value.clone())
    }

    /// The last answer for `key`, even one that no longer stands, while
    /// it is kept (a few times its standing time): what to say when a new
    /// answer cannot be had now.
    pub fn latest(&self, key: &str) -> Option<T> {
        let answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        answers
            .get(key)
            .filter(|answer| answer.kept())
            .map(|answer| answer.value.clone())
    }

    /// Records `value` for `key`, standing for `stands_for`, and drops the
    /// answers no longer kept (keys that are gone: segments of deleted
    /// nodes, unstaged volumes).
    pub fn record(&self, key: String, value: T, stands_for: Duration) {
        let mut answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        answers.retain(|_, answer| answer.kept());
        let measured = Instant::now();
        answers.insert(
            key,
            Answer {
                measured,
                stands_for,
                value,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_reused_while_they_stand() {
        let answers = Answers::default();
        assert_eq!(answers.fresh("a"), None);
        answers.record("a".into(), 42, Duration::from_secs(60));
        assert_eq!(answers.fresh("a"), Some(42));
        assert_eq!(answers.fresh("b"), None);
        // An answer that stands for no time is never reused, and is
        // dropped when the next is recorded.
        answers.record("b".into(), 7, Duration::ZERO);
        assert_eq!(answers.fresh("b"), None);
        answers.record("c".into(), 1, Duration::from_secs(60));
        assert_eq!(answers.0.lock().unwrap().len(), 2, "b dropped, a kept");
        assert_eq!(answers.fresh("a"), Some(42));
    }

    #[tokio::test(start_paused = true)]
    async fn the_latest_answer_is_kept_a_while_after_it_stopped_standing() {
        let answers = Answers::default();
        answers.record("a".into(), 42, Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(answers.fresh("a"), None);
        assert_eq!(answers.latest("a"), Some(42));
        tokio::time::advance(Duration::from_secs(3 * 60)).await;
        assert_eq!(answers.latest("a"), None, "kept four minutes, no longer");
        answers.record("b".into(), 1, Duration::from_secs(60));
        assert_eq!(answers.0.lock().unwrap().len(), 1, "a dropped");
    }
}
