//! `namespace()` objects, emptied after each render: a namespace holding
//! itself (`{% set ns.n = ns %}`) would otherwise outlive the render, its
//! memory leaked on every evaluation ([`NamespaceTracking`]).

use std::cell::RefCell;

use minijinja::Environment;
use minijinja::Error as JinjaError;
use minijinja::value::{Value, ValueOrKwargs};

thread_local! {
    /// The namespaces made so far by the render [`NamespaceTracking`]
    /// tracks on this thread, if any.
    static NAMESPACES: RefCell<Option<Vec<Value>>> = const { RefCell::new(None) };
}

/// minijinja's `namespace()`, remembering what it made for
/// [`NamespaceTracking`].
pub(super) fn tracked_namespace(defaults: Option<ValueOrKwargs>) -> Result<Value, JinjaError> {
    let namespace = minijinja::functions::namespace(defaults)?;
    NAMESPACES.with_borrow_mut(|tracked| {
        if let Some(tracked) = tracked {
            tracked.push(namespace.clone());
        }
    });
    Ok(namespace)
}

/// Empties, when dropped, every namespace made on this thread since it was
/// created.
///
/// `{% set ns.n = ns %}` makes a reference cycle that outlives the render:
/// memory leaked on every evaluation. minijinja offers no hook on
/// assignment to refuse it, and only its own `{% set %}` can change a
/// namespace, so once the render is over each attribute is set to none by
/// a small generated template, which breaks every cycle: a cycle's last
/// link is always such an assignment (values are immutable otherwise).
#[must_use = "namespaces are emptied when this is dropped"]
pub(crate) struct NamespaceTracking(());

impl NamespaceTracking {
    /// Starts tracking the namespaces made on this thread.
    pub(crate) fn start() -> Self {
        NAMESPACES.set(Some(Vec::new()));
        NamespaceTracking(())
    }
}

impl Drop for NamespaceTracking {
    fn drop(&mut self) {
        let namespaces = NAMESPACES.take().unwrap_or_default();
        if namespaces.is_empty() {
            return;
        }
        let mut source = String::new();
        // What the namespaces hold, released below one level at a time.
        let mut contents = Vec::new();
        for (index, namespace) in namespaces.iter().enumerate() {
            // `{% set %}` only ever made attributes named as identifiers;
            // others came from `namespace(...)`'s arguments and cannot
            // close a cycle.
            let keys: Vec<Value> = namespace
                .try_iter()
                .into_iter()
                .flatten()
                .filter(|key| key.as_str().is_some_and(is_identifier))
                .collect();
            if keys.is_empty() {
                continue;
            }
            source.push_str(&format!("{{% set n = namespaces[{index}] %}}"));
            for key in keys {
                contents.extend(namespace.get_item(&key).ok());
                source.push_str(&format!("{{% set n.{key} = none %}}"));
            }
        }
        // An environment without fuel: the render may have spent it all.
        let result = Environment::new().render_str(
            &source,
            minijinja::context! { namespaces => Value::from(namespaces) },
        );
        debug_assert!(result.is_ok(), "emptying namespaces: {result:?}");
        release_iteratively(contents);
    }
}

/// Drops `values` without recursing into the lists only they hold.
///
/// Dropping a list drops its items, recursively: 368 bytes of stack per
/// level in a debug build. Lists held by namespaces are taken apart here
/// one level at a time instead, so emptying them touches no more stack
/// than a shallow value. (Mappings cannot be: minijinja does not expose
/// their type. Nor can values the render dropped itself. Both drop by
/// recursion within [`RENDER_STACK_BYTES`](super::RENDER_STACK_BYTES),
/// which `tests/deep_values.rs` checks at the deepest the fuel allows.)
fn release_iteratively(mut values: Vec<Value>) {
    while let Some(value) = values.pop() {
        let Some(list) = value.downcast_object::<Vec<Value>>() else {
            continue;
        };
        drop(value);
        // Only when nothing else holds the list; otherwise dropping our
        // reference frees nothing.
        if let Ok(items) = std::sync::Arc::try_unwrap(list) {
            values.extend(items);
        }
    }
}

fn is_identifier(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}
