//! At most one operation in flight per volume; a concurrent one is `ABORTED`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tonic::Status;

/// Keys (volume ids or names) with an operation in progress.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashSet<String>>>);

/// Holds a key until dropped.
#[derive(Debug)]
pub(crate) struct OperationGuard {
    set: InFlight,
    key: String,
}

impl InFlight {
    /// Claims `key`, or answers `ABORTED` when another operation holds it.
    pub(crate) fn claim(&self, key: String) -> Result<OperationGuard, Status> {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !set.insert(key.clone()) {
            return Err(Status::aborted(format!(
                "an operation on {key} is already in progress"
            )));
        }
        Ok(OperationGuard {
            set: self.clone(),
            key,
        })
    }
}

impl Drop for OperationGuard {
    fn drop(&mut self) {
        let mut set = self.set.0.lock().unwrap_or_else(|e| e.into_inner());
        set.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_claim_is_aborted_until_release() {
        let in_flight = InFlight::default();
        let guard = in_flight.claim("vol-1".into()).unwrap();
        assert_eq!(
            in_flight.claim("vol-1".into()).unwrap_err().code(),
            tonic::Code::Aborted
        );
        assert!(in_flight.claim("vol-2".into()).is_ok());
        drop(guard);
        assert!(in_flight.claim("vol-1".into()).is_ok());
    }
}
