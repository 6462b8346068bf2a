//! Context of `spec.storageCapacity`: one topology segment of one
//! StorageClass, as external-provisioner asks about it.

use std::collections::BTreeMap;

use minijinja::value::Value;

use std::sync::Arc;

use super::{PvcLookup, Vars, string_map};

/// Context of `spec.storageCapacity`.
#[derive(Clone)]
pub struct CapacityContext {
    vars: Vars,
    value: Value,
}

context_common!(CapacityContext);

impl CapacityContext {
    /// The room in the segment `topology` (its labels; `None` asks about
    /// all the storage), whose node is `node` when the segment names one,
    /// for new volumes of a StorageClass with `params`.
    pub fn new(
        topology: Option<&BTreeMap<String, String>>,
        node: Option<&str>,
        params: &BTreeMap<String, String>,
    ) -> Self {
        let mut vars = Vars::new(None);
        vars.set(
            "topology",
            topology.map_or(Value::from(()), |t| string_map(Some(t))),
        );
        vars.set("nodeName", node.map_or(Value::from(()), Value::from));
        vars.set("params", string_map(Some(params)));
        let value = vars.to_value();
        CapacityContext { vars, value }
    }
}
