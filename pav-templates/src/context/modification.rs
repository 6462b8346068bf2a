//! Context of `spec.volumeModification`: a volume whose claim moved to
//! another VolumeAttributesClass.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use minijinja::value::Value;

use std::sync::Arc;

use super::{
    PvcLookup, Vars, object_value, pv_capacity, pv_csi, recorded_mutable_parameters, string_map,
    volume_mode, volume_params,
};
use crate::error::Result;

/// Context of `spec.volumeModification`.
#[derive(Clone)]
pub struct ModificationContext {
    vars: Vars,
    value: Value,
    after: BTreeMap<String, String>,
}

context_common!(ModificationContext);

impl ModificationContext {
    /// Setting `requested` (the new class's parameters) on the volume
    /// `pv`, bound to `pvc` when it is. Keys `requested` does not name
    /// keep their recorded values (the CSI spec forbids acting on absent
    /// keys).
    pub fn new(
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        requested: &BTreeMap<String, String>,
    ) -> Result<Self> {
        let capacity = pv_capacity(pv)?;
        let csi = pv_csi(pv)?;
        let previous = recorded_mutable_parameters(pv);
        let mut after = previous.clone();
        after.extend(requested.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut vars = Vars::new(pvc);
        vars.set("handle", Value::from(csi.volume_handle.as_str()));
        vars.set("capacity", Value::from(capacity));
        vars.set("volumeMode", Value::from(volume_mode(pv)));
        vars.set("params", volume_params(csi));
        vars.set("mutableParams", string_map(Some(&after)));
        vars.set("previousMutableParams", string_map(Some(&previous)));
        vars.set("requestedMutableParams", string_map(Some(requested)));
        vars.set("pv", object_value(pv));
        vars.set("pvc", pvc.map_or(Value::from(()), object_value));
        let value = vars.to_value();
        Ok(ModificationContext { vars, value, after })
    }

    /// The mutable parameters the volume has once the change succeeds:
    /// what is recorded on it then.
    pub fn mutable_parameters_after(&self) -> &BTreeMap<String, String> {
        &self.after
    }
}
