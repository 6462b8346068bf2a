//! Compiling a spec subtree: templates added to the environment once,
//! template-free subtrees folded into constants.

use std::sync::Arc;

use serde_json::Value as Json;

use super::check::{Checker, has_template_syntax};
use super::message::jinja_message;
use super::node::{Node, collapse};
use crate::engine;
use crate::error::Error;

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
