//! The depth of flow collections (`[…]`, `{…}`) as libyaml's own parser
//! sees it, counted before serde_yaml parses a document (the bound is
//! [`MAX_YAML_FLOW_DEPTH`](super::MAX_YAML_FLOW_DEPTH)).
//!
//! libyaml (the one serde_yaml runs, `unsafe-libyaml-norway`) is driven
//! here event by event, so quotes, comments, plain and block scalars are
//! told apart exactly as the real parse will: no byte-level guess that an
//! apostrophe in a plain scalar or a `]` in a comment can fool.
//!
//! Why stopping early bounds the time: libyaml's scanner runs ahead of the
//! parser only while the token at the head of its queue may still be a
//! simple key (`[a]: b`), and a possible simple key goes stale at the next
//! line break or 1,024 bytes after it starts. So when the walk stops at
//! the first collection past the limit, the scanner has read at most one
//! token plus about 1 KB beyond it, and held at most that many more open
//! levels; every token it scanned cost at most that many levels. Measured
//! (release build, 2 shared cores): 250 KB of `[`, 100,000 levels hidden
//! from a byte-level count (by `]` in comments or in strings after a
//! plain scalar's apostrophe) and 100,000 levels after a 1 MB line of
//! spaces are refused in 1 to 11 ms; libyaml's full parse of the same took
//! 1.5 to 70 s. The walk is the price of exactness for documents with more
//! than 256 brackets: about 15 % on 1.2 MB of flat lists, 0.45 s on the
//! worst case, 1 MB of siblings each 256 levels deep.

// libyaml is a C library translated to Rust: its API is raw pointers.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use unsafe_libyaml_norway as unsafe_libyaml;

/// Where the first flow collection (`[…]`, `{…}`) nested more than `limit`
/// levels deep starts, as a byte offset into `text`; `None` when there is
/// none, or when libyaml finds an error before one (the real parse then
/// reports that error, having seen no deeper nesting).
pub(super) fn first_flow_collection_deeper_than(text: &str, limit: usize) -> Option<usize> {
    let mut parser = EventParser::new(text);
    let mut flow_depth = 0usize;
    while let Some(event) = parser.next_event() {
        match event {
            Event::Start { flow: true, offset } => {
                flow_depth += 1;
                if flow_depth > limit {
                    return Some(offset);
                }
            }
            // Block collections never sit inside flow ones, so while any
            // flow collection is open, an end closes the innermost of them.
            Event::End => flow_depth = flow_depth.saturating_sub(1),
            Event::Start { flow: false, .. } | Event::Other => {}
        }
    }
    None
}

/// What the walk needs of one libyaml event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// A sequence or mapping starts, in flow style (`[`, `{`) or block
    /// style; `offset` is the byte where it starts (its anchor or tag, if
    /// any).
    Start { flow: bool, offset: usize },
    /// A sequence or mapping ends.
    End,
    /// A scalar, alias, or the start or end of the stream or a document.
    Other,
}

/// libyaml's event parser reading `text`.
///
/// Contract: `parser` points to a parser that `yaml_parser_initialize`
/// set up, reads `text` (which outlives it, hence the lifetime), and is
/// deleted and freed exactly once, in `drop`. It is a raw pointer from
/// `Box::into_raw` rather than a `Box` because libyaml's string reader
/// keeps a pointer back to the parser: every access goes through this one
/// pointer, and the parser never moves.
struct EventParser<'text> {
    parser: NonNull<unsafe_libyaml::yaml_parser_t>,
    text: PhantomData<&'text str>,
}

impl<'text> EventParser<'text> {
    fn new(text: &'text str) -> Self {
        let parser = NonNull::from(Box::leak(Box::new(MaybeUninit::<
            unsafe_libyaml::yaml_parser_t,
        >::uninit())))
        .cast::<unsafe_libyaml::yaml_parser_t>();
        // SAFETY: `parser` is a valid, exclusive allocation for a
        // `yaml_parser_t`; `yaml_parser_initialize` zeroes it and sets up
        // its buffers before anything reads it (it only fails on a failed
        // allocation, which aborts in this port). Encoding and input are
        // set once, right after, as libyaml requires. `text` is UTF-8 and
        // outlives the parser ('text); libyaml only reads it.
        unsafe {
            let _initialized = unsafe_libyaml::yaml_parser_initialize(parser.as_ptr());
            // As serde_yaml does: a UTF-8 string, so marks count its bytes.
            unsafe_libyaml::yaml_parser_set_encoding(
                parser.as_ptr(),
                unsafe_libyaml::YAML_UTF8_ENCODING,
            );
            unsafe_libyaml::yaml_parser_set_input_string(
                parser.as_ptr(),
                text.as_ptr(),
                text.len() as u64,
            );
        }
        Self {
            parser,
            text: PhantomData,
        }
    }

    /// The next event; `None` after the stream's end or once libyaml has
    /// failed.
    fn next_event(&mut self) -> Option<Event> {
        let mut raw = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        // SAFETY: `self.parser` is initialised and only used through this
        // pointer (contract above); `raw` is writable memory for one event.
        // `yaml_parser_parse` zeroes the event first and fills it on
        // success, so it is initialised when it returns OK; the union field
        // read is the one that matches the event's type; and the event's
        // allocations (anchor, tag, scalar value) are freed exactly once,
        // by `yaml_event_delete`, after the last read.
        unsafe {
            if unsafe_libyaml::yaml_parser_parse(self.parser.as_ptr(), raw.as_mut_ptr()).fail {
                return None;
            }
            let raw = raw.assume_init_mut();
            let offset = usize::try_from(raw.start_mark.index).unwrap_or(usize::MAX);
            let event = match raw.type_ {
                unsafe_libyaml::YAML_SEQUENCE_START_EVENT => Event::Start {
                    flow: raw.data.sequence_start.style == unsafe_libyaml::YAML_FLOW_SEQUENCE_STYLE,
                    offset,
                },
                unsafe_libyaml::YAML_MAPPING_START_EVENT => Event::Start {
                    flow: raw.data.mapping_start.style == unsafe_libyaml::YAML_FLOW_MAPPING_STYLE,
                    offset,
                },
                unsafe_libyaml::YAML_SEQUENCE_END_EVENT
                | unsafe_libyaml::YAML_MAPPING_END_EVENT => Event::End,
                // What libyaml gives after the stream's end (nothing to
                // free).
                unsafe_libyaml::YAML_NO_EVENT => return None,
                _ => Event::Other,
            };
            unsafe_libyaml::yaml_event_delete(raw);
            Some(event)
        }
    }
}

impl Drop for EventParser<'_> {
    fn drop(&mut self) {
        // SAFETY: the parser was initialised in `new` and is deleted once,
        // here; then the allocation `Box::leak` made is given back to a
        // `Box` (of the same `MaybeUninit` type) to be freed, and nothing
        // uses the pointer afterwards.
        unsafe {
            unsafe_libyaml::yaml_parser_delete(self.parser.as_ptr());
            drop(Box::from_raw(
                self.parser
                    .cast::<MaybeUninit<unsafe_libyaml::yaml_parser_t>>()
                    .as_ptr(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Vec<Event> {
        let mut parser = EventParser::new(text);
        std::iter::from_fn(|| parser.next_event()).collect()
    }

    #[test]
    fn events_tell_flow_from_block_and_count_bytes() {
        use Event::{End, Other, Start};
        assert_eq!(
            events("é:\n- [a, {b: c}]\n"),
            [
                Other, // stream start
                Other, // document start
                Start {
                    flow: false,
                    offset: 0
                },
                Other, // é
                Start {
                    flow: false,
                    offset: 4
                },
                Start {
                    flow: true,
                    offset: 6
                },
                Other, // a
                Start {
                    flow: true,
                    offset: 10
                },
                Other, // b
                Other, // c
                End,
                End,
                End,
                End,
                Other, // document end
                Other, // stream end
            ]
        );
    }

    #[test]
    fn errors_end_the_walk() {
        // The unclosed sequence is reported when the stream ends.
        let walked = events("[a, [b]");
        assert_eq!(walked.len(), 7, "{walked:?}");
        assert_eq!(walked.last(), Some(&Event::End));
        assert_eq!(first_flow_collection_deeper_than("[a, [b]", 1), Some(4));
        assert_eq!(first_flow_collection_deeper_than("[a, [b]", 2), None);
        // A tag followed by `,` in a flow collection (what made
        // libyaml-safer panic) is an ordinary result here.
        assert_eq!(first_flow_collection_deeper_than("[!a, [b]]", 2), None);
    }
}
