//! Memory a long-running pav process hands back to the system.
//!
//! glibc's malloc keeps what a burst of claims needed: the chunks freed
//! afterwards stay in the process, scattered over its arenas (one per
//! thread that allocated at once, up to eight per core). After 200 claims
//! came and went, the leader `pav controller` held 35.6 MiB of memory of
//! its own, 18.7 MiB of it free chunks that `malloc_trim` gave back
//! (docs/performance.md#memory). So the controller and the drivers use at
//! most two arenas, and trim every minute.
// glibc's `mallopt` and `malloc_trim` have no safe binding.
#![allow(unsafe_code)]

use std::time::Duration;

/// How often [`trim_periodically`] trims.
pub const TRIM_PERIOD: Duration = Duration::from_secs(60);

/// Limits malloc to two arenas: fewer places for free chunks to be held.
/// Call before the process starts threads (arenas already made stay).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a malloc parameter; any value is accepted
    // or refused by its return value.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Hands the free memory of every arena back to the system; true when
/// some was.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes malloc's own locks; it is safe to call at
    // any time from any thread.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// [`trim`] every `period`, for the process' life.
pub async fn trim_periodically(period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        tokio::task::spawn_blocking(trim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of small allocations, freed while one allocation made
    /// after them stays: the heap cannot shrink from its top, and only a
    /// trim hands the free pages back.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_freed_burst_is_handed_back() {
        let resident = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        // Below the mmap threshold, so they come from the heap.
        let burst: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 4000]).collect();
        let kept = vec![1u8; 4000];
        drop(burst);
        let before = resident();
        assert!(trim(), "nothing was handed back");
        let after = resident();
        assert!(
            before.saturating_sub(after) > 40_000,
            "RssAnon {before} KiB before the trim, {after} KiB after"
        );
        drop(kept);
    }
}
