//! The population tasks, one per claim at most, keyed by the claim's uid.
//!
//! A population runs outside the reconcile that starts it: it may take
//! hours, and the controller must go on reconciling the claim meanwhile
//! (above all its deletion, which aborts it). What it ended with is kept
//! here until the reconcile it wakes acts on it.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::plan::backoff;

/// Where the population of one claim is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// None runs and none is due to wait: start one.
    Idle,
    /// One runs; its end wakes the claim.
    Running,
    /// The last one succeeded: hand the volume over.
    Succeeded,
    /// The last one failed: try again after this long.
    RetryIn(Duration),
}

/// How a population ended, for the task to report.
#[derive(Debug)]
pub(crate) enum Outcome {
    Succeeded,
    Failed {
        error: pav_sdk::Error,
        retry_in: Duration,
    },
}

#[derive(Debug)]
enum Run {
    Running { id: u64, abort: AbortHandle },
    Succeeded,
    Failed { retry_at: Instant },
}

#[derive(Debug)]
struct Population {
    run: Run,
    /// Failures in a row, for the backoff; kept across the claim's
    /// reconciles, as a failure's reconcile succeeds.
    failures: u32,
}

/// The claims' populations.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    claims: Mutex<HashMap<String, Population>>,
    /// Tells a task apart from the one started after it was aborted, so
    /// that a late end cannot pass for the new one's.
    next_id: AtomicU64,
}

impl Tasks {
    fn claims(&self) -> MutexGuard<'_, HashMap<String, Population>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the population of the claim with uid `uid` is.
    pub(crate) fn state(&self, uid: &str) -> State {
        match self.claims().get(uid).map(|p| &p.run) {
            None => State::Idle,
            Some(Run::Running { .. }) => State::Running,
            Some(Run::Succeeded) => State::Succeeded,
            Some(Run::Failed { retry_at }) => {
                match retry_at.checked_duration_since(Instant::now()) {
                    Some(wait) if !wait.is_zero() => State::RetryIn(wait),
                    _ => State::Idle,
                }
            }
        }
    }

    /// Runs `populate` for the claim with uid `uid`, then `then` with
    /// its outcome, unless [`remove`](Tasks::remove) came first. A panic
    /// of `populate` is a failure, so that the claim is not left waiting
    /// for an end that never comes.
    pub(crate) fn spawn<P, T, F>(self: &Arc<Self>, uid: &str, populate: P, then: T)
    where
        P: Future<Output = pav_sdk::Result<()>> + Send + 'static,
        T: FnOnce(Outcome) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tasks = Arc::clone(self);
        let key = uid.to_owned();
        // Held across the spawn: the task's end, which takes it too,
        // cannot come before its entry exists.
        let mut claims = self.claims();
        let task = tokio::spawn(async move {
            let result = AssertUnwindSafe(populate)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(pav_sdk::Error::internal("the populator panicked")));
            if let Some(outcome) = tasks.end(&key, id, result) {
                then(outcome).await;
            }
        });
        let population = claims.entry(uid.to_owned()).or_insert(Population {
            run: Run::Succeeded,
            failures: 0,
        });
        let previous = std::mem::replace(
            &mut population.run,
            Run::Running {
                id,
                abort: task.abort_handle(),
            },
        );
        // Never two at once on one volume, whatever the caller checked.
        if let Run::Running { abort, .. } = previous {
            abort.abort();
        }
    }

    /// Records the end of task `id`; `None` when it is no longer the
    /// claim's (removed, or replaced).
    fn end(&self, uid: &str, id: u64, result: pav_sdk::Result<()>) -> Option<Outcome> {
        let mut claims = self.claims();
        let population = claims.get_mut(uid)?;
        if !matches!(population.run, Run::Running { id: running, .. } if running == id) {
            return None;
        }
        Some(match result {
            Ok(()) => {
                population.run = Run::Succeeded;
                population.failures = 0;
                Outcome::Succeeded
            }
            Err(error) => {
                population.failures = population.failures.saturating_add(1);
                let retry_in = backoff(population.failures);
                population.run = Run::Failed {
                    retry_at: Instant::now() + retry_in,
                };
                Outcome::Failed { error, retry_in }
            }
        })
    }

    /// Forgets the claim with uid `uid`, aborting its population if one
    /// runs: the claim is being deleted, or its volume is handed over.
    pub(crate) fn remove(&self, uid: &str) {
        if let Some(Population {
            run: Run::Running { abort, .. },
            ..
        }) = self.claims().remove(uid)
        {
            abort.abort();
        }
    }

    /// Aborts every population: the populator stops.
    pub(crate) fn abort_all(&self) {
        for (_, population) in self.claims().drain() {
            if let Run::Running { abort, .. } = population.run {
                abort.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::{mpsc, oneshot};

    /// Spawns a population that ends with what `finish` sends, reporting
    /// its outcome on the returned channel.
    fn start(
        tasks: &Arc<Tasks>,
        uid: &str,
    ) -> (
        oneshot::Sender<pav_sdk::Result<()>>,
        mpsc::UnboundedReceiver<Outcome>,
    ) {
        let (finish, finished) = oneshot::channel();
        let (report, outcomes) = mpsc::unbounded_channel();
        tasks.spawn(
            uid,
            async move { finished.await.unwrap_or(Ok(())) },
            move |outcome| async move { report.send(outcome).unwrap() },
        );
        (finish, outcomes)
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_waits_doubling_and_a_success_resets() {
        let tasks = Arc::new(Tasks::default());
        assert_eq!(tasks.state("u"), State::Idle);
        let (finish, mut outcomes) = start(&tasks, "u");
        assert_eq!(tasks.state("u"), State::Running);
        finish
            .send(Err(pav_sdk::Error::Unavailable("down".into())))
            .unwrap();
        let Some(Outcome::Failed { error, retry_in }) = outcomes.recv().await else {
            panic!("no failure");
        };
        assert_eq!(
            (error.message(), retry_in),
            ("down", Duration::from_secs(5))
        );
        assert_eq!(tasks.state("u"), State::RetryIn(Duration::from_secs(5)));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(tasks.state("u"), State::Idle);

        let (finish, mut outcomes) = start(&tasks, "u");
        finish
            .send(Err(pav_sdk::Error::Internal("again".into())))
            .unwrap();
        let Some(Outcome::Failed { retry_in, .. }) = outcomes.recv().await else {
            panic!("no failure");
        };
        assert_eq!(retry_in, Duration::from_secs(10));

        tokio::time::advance(retry_in).await;
        let (finish, mut outcomes) = start(&tasks, "u");
        finish.send(Ok(())).unwrap();
        assert!(matches!(outcomes.recv().await, Some(Outcome::Succeeded)));
        assert_eq!(tasks.state("u"), State::Succeeded);
        assert_eq!(tasks.claims().get("u").unwrap().failures, 0);
        tasks.remove("u");
        assert_eq!(tasks.state("u"), State::Idle);
    }

    #[tokio::test]
    async fn a_removed_population_is_aborted_and_reports_nothing() {
        let tasks = Arc::new(Tasks::default());
        let (finish, mut outcomes) = start(&tasks, "u");
        tasks.remove("u");
        assert_eq!(tasks.state("u"), State::Idle);
        // The aborted task dropped its `then`, and with it the sender.
        assert!(outcomes.recv().await.is_none());
        assert!(finish.is_closed());

        let (_finish, mut outcomes) = start(&tasks, "v");
        tasks.abort_all();
        assert!(outcomes.recv().await.is_none());
        assert_eq!(tasks.state("v"), State::Idle);
    }

    #[tokio::test]
    async fn a_late_end_of_a_replaced_population_is_ignored() {
        let tasks = Arc::new(Tasks::default());
        assert!(tasks.end("u", 7, Ok(())).is_none());
        let (_first, mut first) = start(&tasks, "u");
        let (_second, _) = start(&tasks, "u");
        assert!(first.recv().await.is_none(), "the first is aborted");
        assert!(tasks.end("u", 0, Ok(())).is_none());
        assert_eq!(tasks.state("u"), State::Running);
    }

    #[tokio::test]
    async fn a_panicking_populator_is_a_failure() {
        let tasks = Arc::new(Tasks::default());
        let (report, mut outcomes) = mpsc::unbounded_channel();
        tasks.spawn("u", async { panic!("boom") }, move |outcome| async move {
            report.send(outcome).unwrap()
        });
        let Some(Outcome::Failed { error, .. }) = outcomes.recv().await else {
            panic!("no failure");
        };
        assert_eq!(error.message(), "the populator panicked");
    }
}
