//! The Python `list` and `dict` methods Jinja2's immutable sandbox lets a
//! template call and minijinja-contrib's pycompat lacks, and mappings built
//! in Python's insertion order.

use minijinja::value::{Serde, Value, ValueKind, from_args};
use minijinja::{Error as JinjaError, ErrorKind};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// Key-value pairs that serialize as a mapping, in their order.
struct OrderedPairs(Vec<(Value, Value)>);

impl Serialize for OrderedPairs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A mapping of `pairs` in their order, as a Python dict keeps it (a later
/// pair with the same key replaces the value, not the position).
pub(crate) fn ordered_map(pairs: Vec<(Value, Value)>) -> Value {
    Value::from(Serde(OrderedPairs(pairs)))
}

/// Python `bytes` as pav has them: a list of integers, which iterates,
/// indexes and counts as `bytes` do (minijinja's own bytes do not
/// iterate).
pub(crate) fn python_bytes(bytes: &[u8]) -> Value {
    bytes.iter().copied().map(Value::from).collect()
}

/// The method of a list or dict, or `None` when `method` is not one pav
/// has (pycompat then tries). Values here are immutable: a copy is the
/// value itself.
pub(crate) fn collection_method(
    value: &Value,
    method: &str,
    args: &[Value],
) -> Option<Result<Value, JinjaError>> {
    let result = match (value.kind(), method) {
        (ValueKind::Seq | ValueKind::Map, "copy") => from_args::<()>(args).map(|()| value.clone()),
        (ValueKind::Seq, "index") => from_args::<(Value,)>(args).and_then(|(wanted,)| {
            value
                .try_iter()?
                .position(|item| item == wanted)
                .map(Value::from)
                .ok_or_else(|| JinjaError::new(ErrorKind::InvalidOperation, "value is not in list"))
        }),
        // `dict.fromkeys(iterable, value=None)`, a class method.
        (ValueKind::Map, "fromkeys") => {
            from_args::<(Value, Option<Value>)>(args).and_then(|(keys, item)| {
                let item = item.unwrap_or(Value::from(()));
                let pairs = keys.try_iter()?.map(|key| (key, item.clone())).collect();
                Ok(ordered_map(pairs))
            })
        }
        _ => return None,
    };
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fromkeys_keeps_the_keys_order() {
        let dict = Value::from(Serde(serde_json::json!({})));
        let keys = Value::from_iter(["y", "x", "y"]);
        let made = collection_method(&dict, "fromkeys", &[keys, Value::from(0)])
            .unwrap()
            .unwrap();
        assert_eq!(made.to_string(), "{'y': 0, 'x': 0}");
    }

    #[test]
    fn index_finds_the_first_or_fails() {
        let list = Value::from_iter([3, 1, 3]);
        let index =
            |wanted: i64| collection_method(&list, "index", &[Value::from(wanted)]).unwrap();
        assert_eq!(index(3).unwrap(), Value::from(0));
        assert!(index(9).is_err());
    }
}
