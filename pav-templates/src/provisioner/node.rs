//! A spec subtree with its templates compiled: what compiling makes and
//! rendering walks.

use std::sync::Arc;

use serde_json::Value as Json;

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
