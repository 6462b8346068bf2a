//! The one error type of this crate.

use std::fmt;

/// Where in a PavProvisioner an error was found.
///
/// Displayed as `provisioner NAME, field PATH[, line N]`, so every message a
/// user sees names the object, the field (`spec.volumeStaging.podTemplate.spec.containers[0].args[1]`)
/// and, for template errors, the line inside that field's template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// `metadata.name` of the PavProvisioner (`<unnamed>` if it has none).
    pub provisioner: String,
    /// Field path from the object root, in Kubernetes' notation.
    pub path: String,
    /// 1-based line inside the field's template, when the error comes from one.
    pub line: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "provisioner {:?}, field {}", self.provisioner, self.path)?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong while parsing, compiling or rendering a
/// PavProvisioner.
///
/// Each variant carries a [`Location`], so the message alone tells the user
/// which object and which field to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object is not a PavProvisioner: malformed YAML, wrong types or
    /// unknown fields.
    #[error("{at}: {message}")]
    Schema {
        /// Where the problem is.
        at: Location,
        /// What is wrong.
        message: String,
    },

    /// A rule of the PaV user guide is broken (for example `volumeCreation`
    /// without `Dynamic`, or `minCapacity` greater than `maxCapacity`).
    #[error("{at}: {message}")]
    Rule {
        /// Where the problem is.
        at: Location,
        /// Which rule, in words.
        message: String,
    },

    /// A template does not compile.
    #[error("{at}: template syntax error: {message}")]
    Syntax {
        /// Where the template is.
        at: Location,
        /// The template engine's description.
        message: String,
    },

    /// A template failed while being evaluated: undefined value in output,
    /// a non-string result, a failing filter, a `get_pvc` lookup error, or
    /// the evaluation budget (fuel, recursion, output size) exhausted.
    #[error("{at}: {message}")]
    Render {
        /// Where the template is.
        at: Location,
        /// What went wrong.
        message: String,
    },

    /// A template set `yaml = true` but its output is not valid YAML.
    #[error("{at}: output of template with `yaml = true` is not valid YAML: {message}")]
    Yaml {
        /// Where the template is.
        at: Location,
        /// The YAML parser's description.
        message: String,
    },

    /// The evaluated phase does not have the shape the guide requires (for
    /// example a `podTemplate` that is not a PodTemplateSpec, or a capacity
    /// that is not a quantity).
    #[error("{at}: {message}")]
    Evaluated {
        /// Which field of the evaluated phase.
        at: Location,
        /// What is wrong with its value.
        message: String,
    },
}

impl Error {
    /// Where the error was found.
    pub fn location(&self) -> &Location {
        match self {
            Error::Schema { at, .. }
            | Error::Rule { at, .. }
            | Error::Syntax { at, .. }
            | Error::Render { at, .. }
            | Error::Yaml { at, .. }
            | Error::Evaluated { at, .. } => at,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
