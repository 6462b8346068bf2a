//! Values as deep as a field's fuel lets a template build them, then each
//! operation that walks a value by recursion (printing, comparing,
//! hashing, sorting, dropping). minijinja's own operations have no depth
//! limit; the render's stack is sized for them instead
//! ([`RENDER_STACK_BYTES`]). A stack overflow aborts the whole test binary
//! rather than failing one assertion.

mod common;

use pav_templates::engine::{MAX_BUILT_DEPTH, RENDER_STACK_BYTES};

/// The stack of tokio's blocking threads, on which the drivers render.
const DRIVER_STACK_BYTES: usize = 2 << 20;

/// Levels of nesting per `{% set %}`: minijinja's parser refuses more.
const LEVELS_PER_TAG: usize = 73;

/// How a value kind nests: (name, opening, closing, `l` one level deeper,
/// tags of [`LEVELS_PER_TAG`] levels the fuel affords with a cheap
/// operation after them).
const KINDS: [(&str, &str, &str, &str, usize); 2] = [
    ("list", "[", "]", "[l]", 1790),
    ("mapping", "{'k':", "}", "{'k': l}", 900),
];

/// (operation on `l`, with `W` for `l` one level deeper; tags fewer than
/// the kind's, for operations that spend fuel on their output).
const OPERATIONS: [(&str, usize); 16] = [
    // Dropped at the end of the render.
    ("x", 0),
    ("{{ (l ~ '')|length }}", 460),
    ("{{ '%s'|format(l)|length }}", 70),
    ("{{ '{}'.format(l)|length }}", 70),
    ("{{ l|upper|length }}", 70),
    ("{{ 't' if l == W else 'f' }}", 0),
    ("{{ 't' if l != W else 'f' }}", 0),
    ("{{ 't' if l < W else 'f' }}", 0),
    ("{{ 't' if l in [W] else 'f' }}", 0),
    ("{{ 't' if l is lt W else 'f' }}", 0),
    ("{{ [l, W]|sort|length }}", 0),
    ("{{ [l, W]|max|length }}", 0),
    ("{{ [l, W]|unique|length }}", 0),
    ("{{ {l: 1}|length }}", 0),
    ("{{ l|list|length }}", 0),
    ("{{ {'a': l, 'b': W}|dictsort(by='value')|length }}", 0),
];

/// Every case: (kind, operation, template).
fn cases() -> Vec<(&'static str, String, String)> {
    let mut cases = Vec::new();
    for (kind, open, close, deeper, tags) in KINDS {
        for (operation, fewer) in OPERATIONS {
            let operation = operation.replace('W', deeper);
            let template = build(tags - fewer, open, close) + &operation;
            cases.push((kind, operation, template));
        }
    }
    cases
}

/// `l`, `tags` × [`LEVELS_PER_TAG`] levels deep: nested literals are the
/// cheapest nesting in fuel.
fn build(tags: usize, open: &str, close: &str) -> String {
    let level = format!(
        "{{% set l = {}l{} %}}",
        open.repeat(LEVELS_PER_TAG),
        close.repeat(LEVELS_PER_TAG)
    );
    format!("{{% set l = 0 %}}{}", level.repeat(tags))
}

/// Renders `template` as a field of a provisioner named "deep".
fn render(template: &str) -> Result<String, String> {
    common::render_field("deep", template)
}

fn out_of_fuel(result: &Result<String, String>) -> bool {
    result
        .as_ref()
        .is_err_and(|message| message.contains("evaluation budget exhausted"))
}

#[test]
fn the_fuel_builds_values_this_deep_and_no_deeper() {
    let deepest = 1790 * LEVELS_PER_TAG;
    assert!(deepest as u64 <= MAX_BUILT_DEPTH && deepest as u64 * 50 > MAX_BUILT_DEPTH * 49);
    let (_, open, close, _, tags) = KINDS[0];
    let results = std::thread::Builder::new()
        .stack_size(DRIVER_STACK_BYTES)
        .spawn(move || {
            (
                render(&(build(tags, open, close) + "x")),
                render(&(build(tags + 5, open, close) + "x")),
            )
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(results.0, Ok("x".to_owned()));
    assert!(out_of_fuel(&results.1), "{:?}", results.1);
}

#[test]
fn deep_values_render_on_a_driver_thread() {
    // Each of these overflowed a 2 MiB stack (aborted): printing at about
    // 1,500 levels, comparing at 1,600, dropping at 5,500.
    for (kind, operation, template) in cases() {
        let result = std::thread::Builder::new()
            .stack_size(DRIVER_STACK_BYTES)
            .spawn(move || render(&template))
            .unwrap()
            .join()
            .unwrap();
        // The value was built whole, and the operation ran to its end:
        // an answer, or an error of its own (`unhashable type: 'list'`).
        assert!(!out_of_fuel(&result), "{kind}: {operation}: {result:?}");
    }
}

/// Bytes of the current thread's stack mapping ever touched (its resident
/// pages: a stack mapped for the measurement, so nothing else used it).
#[cfg(target_os = "linux")]
fn stack_high_water() -> usize {
    let marker = 0u8;
    let here = std::ptr::addr_of!(marker) as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((start, end)) = range.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            inside = (start..end).contains(&here);
        } else if inside && let Some(rss) = line.strip_prefix("Rss:") {
            let kib: usize = rss.trim().trim_end_matches("kB").trim().parse().unwrap();
            return kib << 10;
        }
    }
    panic!("no mapping holds the stack")
}

#[cfg(target_os = "linux")]
#[test]
fn deep_values_need_a_quarter_less_stack_than_a_render_has() {
    for (kind, operation, template) in cases() {
        // On a fresh stack larger than the contract, so the render runs on
        // it and its high water mark is the render's.
        let used = stacker::grow(2 * RENDER_STACK_BYTES, || {
            let result = render(&template);
            assert!(!out_of_fuel(&result), "{kind}: {operation}: {result:?}");
            stack_high_water()
        });
        assert!(
            used + used / 4 <= RENDER_STACK_BYTES,
            "{kind}: {operation}: {} MiB of stack",
            used >> 20
        );
    }
}
