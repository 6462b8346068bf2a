//! Blocking system calls (mount table, files) from the node service's
//! async code.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work`, which blocks, without holding up the runtime's other
/// tasks. On a multi-thread runtime it runs in place (`block_in_place`:
/// the worker's other tasks move to another thread while this one
/// blocks), which spares a node call the wake-up of a blocking thread and
/// back, most of its time on a small machine (docs/performance.md);
/// elsewhere (a current-thread runtime: tests) on a blocking thread.
/// Either way a call stuck in the kernel (a hung NFS or FUSE mount) holds
/// one thread, never the runtime. `Err` says why `work` did not return: it
/// panicked, or its blocking task was cancelled.
pub(crate) async fn run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        let work = std::panic::AssertUnwindSafe(work);
        return tokio::task::block_in_place(|| std::panic::catch_unwind(work))
            .map_err(|panic| panic_message(&*panic));
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| e.to_string())
}

/// What a panic said, as `JoinError` tells it.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let said = (panic.downcast_ref::<&str>().copied())
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    format!("panicked: {}", said.unwrap_or("(no message)"))
}

#[cfg(test)]
mod tests {
    use super::run;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_in_place_on_a_multi_thread_runtime() {
        let caller = std::thread::current().id();
        let ran_on = run(|| std::thread::current().id()).await.unwrap();
        assert_eq!(ran_on, caller);
        let panicked = run(|| -> () { panic!("boom") }).await.unwrap_err();
        assert_eq!(panicked, "panicked: boom");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_on_a_blocking_thread_on_a_current_thread_runtime() {
        let caller = std::thread::current().id();
        let ran_on = run(|| std::thread::current().id()).await.unwrap();
        assert_ne!(ran_on, caller);
        let panicked = run(|| -> () { panic!("boom") }).await.unwrap_err();
        assert!(panicked.contains("panicked"), "{panicked}");
    }
}
