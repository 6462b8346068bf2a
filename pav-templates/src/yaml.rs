//! YAML to JSON values with a bound on what aliases may expand to.
//!
//! YAML 1.2 with anchors, aliases and `<<` merge keys, as the original PaV
//! examples use. An alias is expanded every time it is used, so a few
//! kilobytes of `&a [x, x, ...]` and `[*a, *a, ...]` make billions of
//! nodes; the parser's own limit (jumps to aliases) still lets the result
//! grow with the square of the input. Here every node and every string
//! byte of the expanded document is charged to a budget, and parsing stops
//! once it is spent. The budget covers any document without aliases (a
//! node takes at least one byte of text) plus
//! [`MAX_YAML_ALIAS_EXPANSION_BYTES`] for what aliases add.
//!
//! libyaml's scanner takes time in the product of tokens and open flow
//! levels, so flow collections may nest at most [`MAX_YAML_FLOW_DEPTH`]
//! deep, counted by libyaml's own parser as it goes (`yaml/flow_depth.rs`) and
//! checked before serde_yaml parses the document.

mod flow_depth;

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;
use serde_yaml::value::{Tag, TaggedValue};
use serde_yaml::{Mapping, Value};

/// How much aliases may add to a YAML document once each is replaced by
/// what it names, counting the bytes of strings plus [`NODE_COST`] per node.
pub const MAX_YAML_ALIAS_EXPANSION_BYTES: usize = 8 << 20;

/// What one node (scalar, list, mapping or tag) is charged, in bytes:
/// about what it takes in memory.
pub const NODE_COST: usize = 32;

/// Parses YAML (1.2, with anchors and `<<` merges) into JSON values,
/// within the alias budget ([`MAX_YAML_ALIAS_EXPANSION_BYTES`]) and the
/// flow nesting limit ([`MAX_YAML_FLOW_DEPTH`]).
pub fn yaml_to_json(text: &str) -> Result<Json, String> {
    yaml_to_json_with_allowance(text, MAX_YAML_ALIAS_EXPANSION_BYTES)
}

fn yaml_to_json_with_allowance(text: &str, allowance: usize) -> Result<Json, String> {
    yaml_to_json_within(text, allowance).map(|(json, _)| json)
}

/// Parses `text`, letting aliases add at most `allowance`; returns the
/// value and how much of the allowance it used (0 without aliases), so a
/// caller can share one allowance among several documents.
pub(crate) fn yaml_to_json_within(text: &str, allowance: usize) -> Result<(Json, usize), String> {
    check_flow_nesting(text).map_err(|err| err.to_string())?;
    // Every node but an empty document's takes at least one byte of text,
    // so an alias-free document never costs more than this.
    let own = (NODE_COST + 1).saturating_mul(text.len() + 1);
    let total = own.saturating_add(allowance);
    let budget = Budget {
        left: Cell::new(total),
        allowance,
    };
    let deserializer = serde_yaml::Deserializer::from_str(text);
    let mut value = ValueSeed(&budget)
        .deserialize(deserializer)
        .map_err(|err| err.to_string())?;
    value.apply_merge().map_err(|err| err.to_string())?;
    let json = serde_json::to_value(&value).map_err(|err| err.to_string())?;
    let used = total - budget.left.get();
    Ok((json, used.saturating_sub(own)))
}

/// Deepest nesting of flow collections (`[…]`, `{…}`) a document may
/// have. libyaml's scanner checks every open level on every token, so
/// parsing takes time in the product of the two: 100,000 levels of `[` took
/// 22 s. serde_yaml refuses anything nested over 128 levels anyway, but
/// only after libyaml has scanned it all; this limit is checked as libyaml
/// goes, stopping it at the first level past it.
pub const MAX_YAML_FLOW_DEPTH: usize = 256;

/// A document whose flow collections may nest deeper than
/// [`MAX_YAML_FLOW_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "flow collections (`[` and `{{`) nested more than {MAX_YAML_FLOW_DEPTH} levels at byte {offset}"
)]
pub struct FlowTooDeep {
    /// The byte where the first collection past the limit starts (its
    /// anchor or tag, if it has one).
    pub offset: usize,
}

/// Refuses, before serde_yaml parses it, a document whose flow
/// collections nest deeper than [`MAX_YAML_FLOW_DEPTH`].
///
/// A document with no more `[` and `{` bytes than that cannot, which a
/// count shows for nearly every document. Any other is walked with
/// libyaml's own event parser ([`flow_depth`]), which counts the nesting the
/// real parse would see and stops at the first level past the limit, so
/// libyaml never scans far at a quadratic cost. Documents libyaml cannot
/// parse are left to serde_yaml, which reports the error as it always has.
fn check_flow_nesting(text: &str) -> Result<(), FlowTooDeep> {
    let openings = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    if openings <= MAX_YAML_FLOW_DEPTH {
        return Ok(());
    }
    match flow_depth::first_flow_collection_deeper_than(text, MAX_YAML_FLOW_DEPTH) {
        Some(offset) => Err(FlowTooDeep { offset }),
        None => Ok(()),
    }
}

struct Budget {
    left: Cell<usize>,
    allowance: usize,
}

impl Budget {
    fn charge<E: de::Error>(&self, string_bytes: usize) -> Result<(), E> {
        let cost = NODE_COST.saturating_add(string_bytes);
        match self.left.get().checked_sub(cost) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format_args!(
                "aliases expand the document by more than {} bytes (are they repeated too often?)",
                self.allowance
            ))),
        }
    }
}

/// Builds a [`Value`] exactly as `Value`'s own `Deserialize` does, charging
/// every node to the budget.
#[derive(Clone, Copy)]
struct ValueSeed<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(i.into()))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(u.into()))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(f.into()))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        self.0.charge(s.len())?;
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        self.0.charge(s.len())?;
        Ok(Value::String(s))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut mapping = Mapping::new();
        while let Some(key) = map.next_key_seed(self)? {
            if mapping.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate entry {}",
                    describe_key(&key)
                )));
            }
            let value = map.next_value_seed(self)?;
            mapping.insert(key, value);
        }
        Ok(Value::Mapping(mapping))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        use de::VariantAccess as _;
        let (tag, contents) = data.variant_seed(TagSeed(self.0))?;
        let value = contents.newtype_variant_seed(self)?;
        Ok(Value::Tagged(Box::new(TaggedValue { tag, value })))
    }
}

/// A tag (`!name`), as `Value`'s own `Deserialize` reads it.
struct TagSeed<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for TagSeed<'_> {
    type Value = Tag;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Tag, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for TagSeed<'_> {
    type Value = Tag;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a YAML tag string")
    }

    fn visit_str<E: de::Error>(self, string: &str) -> Result<Tag, E> {
        self.visit_string(string.to_owned())
    }

    fn visit_string<E: de::Error>(self, string: String) -> Result<Tag, E> {
        if string.is_empty() {
            return Err(E::custom("empty YAML tag is not allowed"));
        }
        self.0.charge(string.len())?;
        Ok(Tag::new(string))
    }
}

/// As serde_yaml words a duplicate key.
fn describe_key(key: &Value) -> String {
    match key {
        Value::Null => "with null key".to_owned(),
        Value::Bool(b) => format!("with key `{b}`"),
        Value::Number(n) => format!("with key {n}"),
        Value::String(s) => format!("with key {s:?}"),
        Value::Sequence(_) | Value::Mapping(_) | Value::Tagged(_) => "in YAML map".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_yaml's own `Value` gives, for comparison.
    fn reference(text: &str) -> Result<Json, String> {
        let mut value: Value = serde_yaml::from_str(text).map_err(|err| err.to_string())?;
        value.apply_merge().map_err(|err| err.to_string())?;
        serde_json::to_value(&value).map_err(|err| err.to_string())
    }

    #[test]
    fn parses_like_serde_yaml() {
        for text in [
            "",
            "~",
            "a: 1\nb: [x, 2.5, true, null, -3]\n",
            "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
            "list: &l [1, 2]\nagain: *l\n",
            "!tag {a: 1}",
            "{1: one, true: yes, null: nothing}",
            "'quoted: string'",
            "a: 1\na: 2\n",
            "{[1]: x}",
            "[unclosed",
            "a: *undefined",
            "- \"\\u00e9\\U0001F600\"",
            "! x",
            "key: |\n  block\n  text\n",
        ] {
            assert_eq!(yaml_to_json(text), reference(text), "{text:?}");
        }
    }

    #[test]
    fn alias_expansion_is_bounded() {
        // 2,000 aliases of a 2,000-item list: 4 million nodes from 14 KB.
        let items = vec!["x"; 2000].join(",");
        let aliases = vec!["*a"; 2000].join(",");
        let bomb = format!("a: &a [{items}]\nb: [{aliases}]\n");
        assert!(bomb.len() < 16 << 10);
        assert_eq!(
            yaml_to_json(&bomb).unwrap_err(),
            "b[131][81]: aliases expand the document by more than 8388608 bytes (are they repeated too often?) at line 1 column 170"
        );
        // Long strings count by their bytes: 128 aliases of 200 KB.
        let long = "y".repeat(200_000);
        let aliases = vec!["*s"; 128].join(",");
        assert!(yaml_to_json(&format!("s: &s {long}\nb: [{aliases}]\n")).is_err());
        // The same shapes within the allowance parse.
        let aliases = ["*s"; 8].join(",");
        assert!(yaml_to_json(&format!("s: &s {long}\nb: [{aliases}]\n")).is_ok());
        // With no allowance, aliases may add no more than the text's size.
        let small = format!(
            "a: &a [{}]\nb: [{}]\n",
            ["x"; 3].join(","),
            ["*a"; 3].join(",")
        );
        assert!(yaml_to_json_with_allowance(&small, 0).is_ok());
        let items = ["x"; 100].join(",");
        let aliases = ["*a"; 100].join(",");
        let more = format!("a: &a [{items}]\nb: [{aliases}]\n");
        assert!(yaml_to_json_with_allowance(&more, 0).is_err());
        assert!(yaml_to_json_with_allowance(&more, 1 << 20).is_ok());
    }

    #[test]
    fn flow_nesting_is_bounded_before_parsing() {
        let deep = "[".repeat(MAX_YAML_FLOW_DEPTH + 1);
        let message = format!(
            "flow collections (`[` and `{{`) nested more than {MAX_YAML_FLOW_DEPTH} levels at byte {MAX_YAML_FLOW_DEPTH}"
        );
        assert_eq!(yaml_to_json(&deep), Err(message.clone()));
        // Closing brackets inside quoted scalars close nothing.
        let hidden = format!("x: {}", "[\"]\", '}', ".repeat(MAX_YAML_FLOW_DEPTH + 1));
        assert!(
            yaml_to_json(&hidden)
                .unwrap_err()
                .starts_with("flow collections")
        );
        // Siblings do not add up, whatever their number and quoting.
        let siblings = "- [a, 'b]', \"c\\\"]\", {d: 'it''s'}, '[[x]]']\n".repeat(1000);
        assert!(yaml_to_json(&siblings).is_ok());
        // Apostrophes in plain scalars only over-estimate.
        assert!(yaml_to_json("a: don't [x]\nb: [y]\n").is_ok());
    }

    /// What fooled the byte-level pre-scan this check replaced: brackets
    /// that look closed but are not, to libyaml. Each is 100,000 levels
    /// deep (what took libyaml 22 s) and refused at the first level past
    /// the limit.
    #[test]
    fn flow_nesting_is_counted_as_libyaml_sees_it() {
        let levels = 100_000;
        let at = |offset: usize| Err(FlowTooDeep { offset });
        // An apostrophe in a plain scalar opens no quote, so the `"]"`
        // strings close nothing and every `[` is a level.
        let apostrophe = format!("x: [a 'b, {}", "[ \"]\", ".repeat(levels));
        assert_eq!(
            check_flow_nesting(&apostrophe),
            at("x: [a 'b, ".len() + "[ \"]\", ".len() * (MAX_YAML_FLOW_DEPTH - 1))
        );
        // A `]` in a comment closes nothing either.
        let comments = format!("x: {}", "[ # ]\n".repeat(levels));
        assert_eq!(
            check_flow_nesting(&comments),
            at("x: ".len() + "[ # ]\n".len() * MAX_YAML_FLOW_DEPTH)
        );
        // A quote that begins after a plain scalar's apostrophe is real.
        let requoted = format!("x: [a 'b, {}", "[ ']', ".repeat(levels));
        assert_eq!(
            check_flow_nesting(&requoted),
            at("x: [a 'b, ".len() + "[ ']', ".len() * (MAX_YAML_FLOW_DEPTH - 1))
        );
        // The message, through the parse.
        assert_eq!(
            yaml_to_json(&comments).unwrap_err(),
            format!(
                "flow collections (`[` and `{{`) nested more than 256 levels at byte {}",
                3 + 6 * 256
            )
        );
    }

    /// Exactly the limit passes the check; brackets that do not nest, or
    /// that are text (quoted, commented, block scalars), count for nothing.
    #[test]
    fn flow_nesting_up_to_the_limit_passes() {
        let limit = MAX_YAML_FLOW_DEPTH;
        let deepest = format!("x: {}{}", "[".repeat(limit), "]".repeat(limit));
        assert_eq!(check_flow_nesting(&deepest), Ok(()));
        let mixed = format!("x: {}{}", "[{a: ".repeat(limit / 2), "}]".repeat(limit / 2));
        assert_eq!(check_flow_nesting(&mixed), Ok(()));
        let over = format!(
            "x: {}{}",
            "[{a: ".repeat(limit / 2 + 1),
            "}]".repeat(limit / 2 + 1)
        );
        assert!(check_flow_nesting(&over).is_err());
        // serde_yaml itself stops at 128 levels, within the limit.
        let parsed = format!("x: {}{}", "[".repeat(100), "]".repeat(100));
        assert!(yaml_to_json(&parsed).is_ok());
        let wide = format!("[{}]", vec!["[x, {y: [z]}]"; 10 * limit].join(", "));
        let text = "[".repeat(2 * limit);
        let hidden = format!("a: '{text}'\n# {text}\nb: |\n  {text}\nc: \"{text}\"\nd: x{text}\n");
        for document in [wide, hidden] {
            assert_eq!(check_flow_nesting(&document), Ok(()), "{document:.40}");
            assert!(yaml_to_json(&document).is_ok(), "{document:.40}");
        }
        // Flow collections inside block ones count from the innermost
        // block level.
        let in_block = format!("a:\n  b:\n  - {}\n", "[".repeat(limit + 1));
        assert_eq!(
            check_flow_nesting(&in_block),
            Err(FlowTooDeep {
                offset: "a:\n  b:\n  - ".len() + limit
            })
        );
    }

    /// Offsets count bytes: of multi-byte characters and of a byte order
    /// mark.
    #[test]
    fn flow_nesting_error_names_the_byte() {
        let deep = "[".repeat(MAX_YAML_FLOW_DEPTH + 1);
        for prefix in ["é: ", "\u{feff}x: ", "---\n# ünïcode\nx: "] {
            assert_eq!(
                check_flow_nesting(&format!("{prefix}{deep}")),
                Err(FlowTooDeep {
                    offset: prefix.len() + MAX_YAML_FLOW_DEPTH
                }),
                "{prefix:?}"
            );
        }
    }

    /// The densest alias-free documents (a node per two bytes, nested empty
    /// lists) fit whatever their size.
    #[test]
    fn documents_without_aliases_always_fit() {
        let dense = format!("[{}]", vec!["1"; 600_000].join(","));
        assert!(yaml_to_json_with_allowance(&dense, 0).is_ok());
        let nested = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(yaml_to_json_with_allowance(&nested, 0).is_ok());
        let nulls = "- \n".repeat(100_000);
        assert!(yaml_to_json_with_allowance(&nulls, 0).is_ok());
        assert!(yaml_to_json_with_allowance("", 0).is_ok());
    }
}
