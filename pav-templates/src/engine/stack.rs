//! The stack a render runs on.
//!
//! minijinja's operations on values recurse once per level of nesting:
//! printing (`~`, `format`, `upper`, …), hashing and dropping a list or
//! mapping. (Comparisons are pav's own and stop at
//! [`MAX_VALUE_DEPTH`](super::MAX_VALUE_DEPTH): see
//! [`comparisons`](super::comparisons).) A template can
//! nest values as deeply as its fuel allows, far deeper than any
//! Kubernetes object (about 15 levels), and pav cannot refuse them when
//! they are made: minijinja has no hook on building a list, a mapping or a
//! tuple. So a render gets the stack the deepest such value needs, instead.

use crate::engine::FUEL_PER_FIELD;

/// Stack every render has, in bytes: what the deepest value one field's
/// fuel can build needs under the operation that uses the most stack per
/// level, with margin.
///
/// Contract, measured by `tests/deep_values.rs` (which fails when it stops
/// holding):
/// - depth: every level of a list, tuple or mapping costs at least one
///   instruction (64 fuel units) and a slot (32 units), so a field's
///   template nests at most `FUEL_PER_FIELD` × 64 / 96 = 133,333 levels
///   ([`MAX_BUILT_DEPTH`]). Nested literals are the cheapest way:
///   `{% set l = [[…73 levels…[l]…]] %}` repeated reached 130,670; a
///   mapping costs three times as much (65,700).
/// - per level: printing such a list takes 1,120 bytes of stack per
///   level in a debug build, dropping it 368 (minijinja's `<` took 1,456
///   and `==` 1,328 before comparisons became pav's own; mappings: 1,792
///   for `<` at half the depth); 182 MiB in all, measured then.
///
/// Only the pages a render touches are ever backed by memory.
pub const RENDER_STACK_BYTES: usize = 256 << 20;

/// The deepest a field's template can nest lists within its fuel: each
/// level costs an instruction and a slot, 1.5 units of fuel.
pub const MAX_BUILT_DEPTH: u64 = FUEL_PER_FIELD * 2 / 3;

/// Runs `render` with at least [`RENDER_STACK_BYTES`] of stack: on the
/// current one when that has enough left (a thread made with
/// [`RENDER_STACK_BYTES`] and some more, as the pav binary's runtime
/// threads are), on a fresh one mapped for the call otherwise (stacker,
/// which rustc uses for the same purpose). Everything a render makes must
/// also be dropped in here.
pub(crate) fn on_render_stack<R>(render: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RENDER_STACK_BYTES, RENDER_STACK_BYTES, render)
}
