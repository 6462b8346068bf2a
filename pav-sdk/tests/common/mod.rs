//! What the tests' storage doubles share.

use std::sync::Mutex;

/// The calls a storage double was asked, in order: what records must
/// keep it from being asked.
#[derive(Debug, Default)]
pub struct Calls(Mutex<Vec<String>>);

impl Calls {
    /// Notes one call.
    pub fn record(&self, call: String) {
        self.0.lock().unwrap().push(call);
    }

    /// Every call so far.
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}
