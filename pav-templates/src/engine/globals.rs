//! Jinja2's globals where minijinja-contrib's differ: `cycler()` objects
//! with `reset()` and `current`, and `lipsum()` taking Jinja2's arguments
//! (HTML paragraphs unless told otherwise).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::{Kwargs, Object, ObjectRepr, Rest, Value, from_args};
use minijinja::{Error as JinjaError, ErrorKind, State};

use super::args::{keyword, keywords};

/// Jinja2's `Cycler`: `next()` returns the current item and moves to the
/// following one (back to the first after the last), `current` is the item
/// `next()` returns next, `reset()` goes back to the first.
#[derive(Debug)]
struct Cycler {
    items: Vec<Value>,
    position: AtomicUsize,
}

impl Object for Cycler {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "current" => Some(self.items[self.position.load(Ordering::Relaxed)].clone()),
            _ => None,
        }
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, JinjaError> {
        let () = from_args(args)?;
        match method {
            "next" => {
                let position = self.position.load(Ordering::Relaxed);
                self.position
                    .store((position + 1) % self.items.len(), Ordering::Relaxed);
                Ok(self.items[position].clone())
            }
            "reset" => {
                self.position.store(0, Ordering::Relaxed);
                Ok(Value::from(()))
            }
            _ => Err(JinjaError::from(ErrorKind::UnknownMethod)),
        }
    }
}

/// Jinja2's `cycler(*items)`.
pub(crate) fn cycler(items: Rest<Value>) -> Result<Value, JinjaError> {
    if items.is_empty() {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "cycler(): at least one item has to be provided",
        ));
    }
    Ok(Value::from_object(Cycler {
        items: items.0,
        position: AtomicUsize::new(0),
    }))
}

/// Jinja2's `lipsum(n=5, html=True, min=20, max=100)`, by position or by
/// name, on minijinja-contrib's generator (whose `html` is false unless
/// given).
pub(crate) fn lipsum(
    state: &mut State<'_, '_>,
    positional: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let kwargs = keywords(&["n", "html", "min", "max"], &positional, kwargs)?;
    let mut arguments = ["n", "html", "min", "max"]
        .into_iter()
        .filter_map(|name| {
            let given = keyword::<Value>(&kwargs, name).transpose()?;
            Some(given.map(|value| (name, value)))
        })
        .collect::<Result<Vec<(&str, Value)>, JinjaError>>()?;
    kwargs.assert_all_used()?;
    // Jinja2 draws each paragraph's length with `randrange(min, max)`.
    let bound = |name: &str, default: i64| {
        arguments
            .iter()
            .find(|(given, _)| *given == name)
            .map_or(Ok(default), |(_, value)| i64::try_from(value.clone()))
    };
    if bound("min", 20)? >= bound("max", 100)? {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "lipsum(): min must be less than max",
        ));
    }
    if !arguments.iter().any(|(name, _)| *name == "html") {
        arguments.push(("html", Value::from(true)));
    }
    minijinja_contrib::globals::lipsum(state, None, Kwargs::from_iter(arguments))
}

#[cfg(test)]
mod tests {
    use minijinja::Environment;

    fn render(source: &str) -> String {
        let mut env = Environment::new();
        env.add_function("cycler", super::cycler);
        env.add_function("lipsum", super::lipsum);
        env.render_str(source, ()).unwrap()
    }

    #[test]
    fn cycler_cycles_resets_and_shows_current() {
        assert_eq!(
            render(
                "{% set c = cycler(1, 2, 3) %}{{ c.current }}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ 'r' if c.reset() is none }}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.next() }}"
            ),
            "1123r1231"
        );
    }

    #[test]
    fn lipsum_writes_html_unless_told_otherwise() {
        assert!(render("{{ lipsum(1) }}").starts_with("<p>"));
        assert!(!render("{{ lipsum(1, false) }}").starts_with("<p>"));
        assert!(!render("{{ lipsum(1, html=false) }}").starts_with("<p>"));
    }
}
