//! The engine's errors as messages: what compiling and rendering report.

use minijinja::ErrorKind;

/// The engine's message without its own location (we print ours).
pub(super) fn jinja_message(err: &minijinja::Error) -> String {
    let mut message = match (err.kind(), err.detail()) {
        (ErrorKind::OutOfFuel, _) => {
            "evaluation budget exhausted (does the template loop without end?)".to_owned()
        }
        (ErrorKind::UndefinedError, None) => {
            "undefined value (something undefined was indexed or called; test it with `is defined` or give it a `default`)".to_owned()
        }
        (_, Some(detail)) => detail.to_owned(),
        (kind, None) => kind.to_string(),
    };
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    message
}
