//! Compiling a spec subtree: templates added to the environment once,
//! template-free subtrees folded into constants.

use std::sync::Arc;

use serde_json::Value as Json;

use super::check::{Checker, has_template_syntax};
use super::render::jinja_message;
use crate::engine;
use crate::error::Error;

/// A spec subtree with its templates compiled.
#[derive(Debug)]
pub(super) enum Node {
    /// No template inside: used as is.
    Constant(Json),
    /// A string field holding template syntax; the template's name in the
    /// environment is its field path.
    Template {
        path: Arc<str>,
        /// Whether the source mentions `yaml`: only then can it set the
        /// variable, so only then is the evaluation state kept and read.
        may_set_yaml: bool,
    },
    List(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Checker {
    pub(super) fn compile(&mut self, path: &str, value: &Json) -> Node {
        match value {
            Json::String(source) => {
                if !has_template_syntax(source) {
                    // Still evaluated, so whitespace rules apply exactly as
                    // for templates (a single trailing newline is dropped).
                    return match self.env.render_str(&engine::template_source(source), ()) {
                        Ok(text) => Node::Constant(Json::String(text)),
                        Err(err) => {
                            self.problems.push(Error::Syntax {
                                at: self.at(path, err.line()),
                                message: jinja_message(&err),
                            });
                            Node::Constant(Json::Null)
                        }
                    };
                }
                // Before minijinja parses it: its parser and compiler recurse
                // once per level of an operator chain.
                if let Err(too_deep) = engine::expression_depth::check_expression_depth(source) {
                    self.problems.push(Error::Syntax {
                        at: self.at(path, Some(too_deep.line)),
                        message: too_deep.to_string(),
                    });
                    return Node::Constant(Json::Null);
                }
                match self
                    .env
                    .add_template_owned(path.to_owned(), engine::template_source(source))
                {
                    Ok(()) => Node::Template {
                        path: Arc::from(path),
                        may_set_yaml: source.contains("yaml"),
                    },
                    Err(err) => {
                        self.problems.push(Error::Syntax {
                            at: self.at(path, err.line()),
                            message: jinja_message(&err),
                        });
                        Node::Constant(Json::Null)
                    }
                }
            }
            Json::Array(items) => {
                let nodes: Vec<Node> = items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| self.compile(&format!("{path}[{index}]"), item))
                    .collect();
                collapse(nodes.into_iter().map(|n| (None, n)).collect(), false)
            }
            Json::Object(map) => {
                let nodes: Vec<(Option<String>, Node)> = map
                    .iter()
                    .map(|(key, item)| {
                        (
                            Some(key.clone()),
                            self.compile(&format!("{path}.{key}"), item),
                        )
                    })
                    .collect();
                collapse(nodes, true)
            }
            scalar => Node::Constant(scalar.clone()),
        }
    }
}

/// Folds a list or map whose children are all constant into one constant,
/// so rendering copies template-free subtrees in one step.
pub(super) fn collapse(children: Vec<(Option<String>, Node)>, is_map: bool) -> Node {
    if children.iter().all(|(_, n)| matches!(n, Node::Constant(_))) {
        let constants = children.into_iter().map(|(key, node)| match node {
            Node::Constant(value) => (key, value),
            _ => unreachable!("checked above"),
        });
        return Node::Constant(if is_map {
            Json::Object(constants.map(|(k, v)| (k.unwrap_or_default(), v)).collect())
        } else {
            Json::Array(constants.map(|(_, v)| v).collect())
        });
    }
    if is_map {
        Node::Map(
            children
                .into_iter()
                .map(|(k, n)| (k.unwrap_or_default(), n))
                .collect(),
        )
    } else {
        Node::List(children.into_iter().map(|(_, n)| n).collect())
    }
}
