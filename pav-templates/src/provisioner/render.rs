//! Evaluating a compiled phase: each template's output bounded, `yaml`
//! outputs parsed, errors located at their field.

use std::cell::Cell;

use minijinja::value::{Value, ValueKind};
use serde_json::Value as Json;

use super::CompiledProvisioner;
use super::message::jinja_message;
use super::node::Node;
use crate::engine::{self, MAX_OUTPUT_BYTES, MAX_PHASE_OUTPUT_BYTES};
use crate::error::{Error, Result};
use crate::yaml::{MAX_YAML_ALIAS_EXPANSION_BYTES, yaml_to_json_within};

impl CompiledProvisioner {
    /// `left`: what the phase's templates may still output, all together.
    pub(super) fn render_node(
        &self,
        node: &Node,
        context: &Value,
        left: &Cell<usize>,
    ) -> Result<Json> {
        Ok(match node {
            Node::Constant(value) => value.clone(),
            Node::List(items) => Json::Array(
                items
                    .iter()
                    .map(|item| self.render_node(item, context, left))
                    .collect::<Result<_>>()?,
            ),
            Node::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(key, item)| Ok((key.clone(), self.render_node(item, context, left)?)))
                    .collect::<Result<_>>()?,
            ),
            Node::Template { path, may_set_yaml } => {
                self.render_template(path, *may_set_yaml, context, left)?
            }
        })
    }

    pub(super) fn render_template(
        &self,
        path: &str,
        may_set_yaml: bool,
        context: &Value,
        left: &Cell<usize>,
    ) -> Result<Json> {
        // Dropped last, once nothing of the render is used any more.
        let _namespaces = engine::NamespaceTracking::start();
        let template = self
            .env
            .get_template(path)
            .map_err(|err| self.render_error(path, &err))?;
        // Output goes to a buffer that refuses to grow past the limit, so a
        // runaway loop stops at 1 MiB instead of when memory runs out; and
        // past what the phase's other templates left, so many fields cannot
        // add up to gigabytes either.
        let phase_left = left.get();
        let mut output = BoundedOutput {
            bytes: Vec::new(),
            limit: MAX_OUTPUT_BYTES.min(phase_left),
            overflowed: false,
        };
        let captured = template
            .render_captured_to(context, &mut output)
            .map_err(|err| {
                if !output.overflowed {
                    self.render_error(path, &err)
                } else if phase_left < MAX_OUTPUT_BYTES {
                    Error::Render {
                        at: self.location(path, err.line()),
                        message: format!(
                            "the templates of spec.{} output more than {MAX_PHASE_OUTPUT_BYTES} bytes in all",
                            path.split('.').nth(1).unwrap_or_default()
                        ),
                    }
                } else {
                    Error::Render {
                        at: self.location(path, err.line()),
                        message: format!(
                            "output is more than the limit of {MAX_OUTPUT_BYTES} bytes"
                        ),
                    }
                }
            })?;
        left.set(phase_left - output.bytes.len());
        // Written from `&str` pieces only, so always UTF-8.
        let output = String::from_utf8(output.bytes).map_err(|err| Error::Render {
            at: self.location(path, None),
            message: format!("output is not UTF-8: {err}"),
        })?;
        if !may_set_yaml {
            return Ok(Json::String(output));
        }
        let yaml = match captured.state().lookup("yaml") {
            None => false,
            Some(value) => match value.kind() {
                ValueKind::Bool => value.is_true(),
                other => {
                    return Err(Error::Render {
                        at: self.location(path, None),
                        message: format!("variable `yaml` must be true or false, not {other}"),
                    });
                }
            },
        };
        if !yaml {
            return Ok(Json::String(output));
        }
        // Aliases share the phase's budget too, so many small `yaml = true`
        // fields cannot each expand by the whole allowance.
        let left_now = left.get();
        let (json, expanded) =
            yaml_to_json_within(&output, MAX_YAML_ALIAS_EXPANSION_BYTES.min(left_now)).map_err(
                |message| Error::Yaml {
                    at: self.location(path, None),
                    message,
                },
            )?;
        left.set(left_now - expanded);
        Ok(json)
    }

    pub(super) fn render_error(&self, path: &str, err: &minijinja::Error) -> Error {
        Error::Render {
            at: self.location(path, err.line()),
            message: jinja_message(err),
        }
    }
}

/// A template's output, refused past `limit` bytes.
struct BoundedOutput {
    bytes: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + data.len() > self.limit {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit reached"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
