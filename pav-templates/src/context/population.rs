//! Context of `spec.volumePopulation`: a new volume filled from the object
//! its claim's `dataSourceRef` names.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use minijinja::value::Value;

use std::sync::Arc;

use super::{
    PvcLookup, Vars, object_value, pv_capacity, pv_csi, to_value, volume_mode, volume_params,
};
use crate::error::Result;

/// Context of `spec.volumePopulation`.
#[derive(Clone)]
pub struct PopulationContext {
    vars: Vars,
    value: Value,
}

context_common!(PopulationContext);

impl PopulationContext {
    /// Filling volume `pv` for claim `pvc` (the user's, whose
    /// `dataSourceRef` names `source`) from `source`, the object as the
    /// API server returned it. The claim's owner wrote `source`: the
    /// templates see it as any other value, read in linear time.
    pub fn new(
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
        source: &serde_json::Value,
    ) -> Result<Self> {
        let capacity = pv_capacity(pv)?;
        let csi = pv_csi(pv)?;
        let mut vars = Vars::new(Some(pvc));
        vars.set("handle", Value::from(csi.volume_handle.as_str()));
        vars.set("capacity", Value::from(capacity));
        vars.set("volumeMode", Value::from(volume_mode(pv)));
        vars.set("params", volume_params(csi));
        vars.set("pv", object_value(pv));
        vars.set("pvc", object_value(pvc));
        vars.set("dataSource", to_value(source));
        let value = vars.to_value();
        Ok(PopulationContext { vars, value })
    }
}
