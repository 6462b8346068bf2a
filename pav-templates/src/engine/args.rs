//! Filter and function arguments as Jinja2 takes them: keywords looked up
//! cheaply, and positional arguments accepted where minijinja's builtins
//! take keywords only.

use minijinja::value::{ArgType, Kwargs, Value};
use minijinja::{Error as JinjaError, ErrorKind};

/// Keyword argument `name` of a filter or function, if given. minijinja's
/// `Kwargs::get` allocates on every lookup (the key as a value, and again
/// as a string to mark it used), so calls without keywords, nearly all of
/// them, skip it: `default('x')` in every field must not cost that.
pub(crate) fn keyword<'a, T>(kwargs: &'a Kwargs, name: &'a str) -> Result<Option<T>, JinjaError>
where
    Option<T>: ArgType<'a, Output = Option<T>>,
{
    if kwargs.args().next().is_none() {
        return Ok(None);
    }
    kwargs.get::<Option<T>>(name)
}

/// `kwargs` with the positional arguments added under `names`, in order:
/// Jinja2 takes these filters' arguments either way, minijinja's builtins
/// as keywords only.
pub(crate) fn keywords(
    names: &[&str],
    positional: &[Value],
    kwargs: Kwargs,
) -> Result<Kwargs, JinjaError> {
    if positional.len() > names.len() {
        return Err(JinjaError::from(ErrorKind::TooManyArguments));
    }
    if positional.is_empty() {
        return Ok(kwargs);
    }
    let mut merged: Vec<(String, Value)> = names
        .iter()
        .zip(positional)
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect();
    for name in kwargs.args() {
        if names[..positional.len()].contains(&name) {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("argument {name} given twice"),
            ));
        }
        merged.push((name.to_owned(), kwargs.get::<Value>(name)?));
    }
    Ok(Kwargs::from_iter(
        merged
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone())),
    ))
}
