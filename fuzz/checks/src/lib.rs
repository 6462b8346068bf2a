//! The properties pav's fuzz targets check, one plain function per target:
//! each takes the fuzzer's bytes and panics when a property fails.
//!
//! Two callers share them, so a property is stated once:
//!
//! - the cargo-fuzz targets in `fuzz/fuzz_targets/` (one line each), built
//!   with AddressSanitizer and LeakSanitizer by `scripts/fuzz`, which
//!   explores with libFuzzer's coverage guidance;
//! - this crate's `tests/replay.rs`, an ordinary test of the workspace
//!   build, which replays `fuzz/corpus/TARGET` (every crash ever found, as
//!   `regress-*`) and a fixed set of deterministic mutations of it.
//!
//! Every function ignores input it cannot read as its target's format
//! (text that is not UTF-8, bytes that are not a protobuf message): the
//! fuzzer's mutations make plenty, and they test nothing.

mod csi_node_path;
mod csi_request;
mod quantity;
mod templates;

pub use csi_node_path::{NodePathTree, csi_node_path};
pub use csi_request::csi_request;
pub use quantity::quantity;
pub use templates::{provisioner_parse, template_render};
