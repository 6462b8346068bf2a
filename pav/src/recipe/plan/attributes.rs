//! Plans of the phases about a segment's room and a volume's mutable
//! parameters: `spec.storageCapacity` and `spec.volumeModification`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use pav_templates::phase::{Capacity, Modification};
use pav_templates::{
    CapacityContext, CapacityPhase, ModificationContext, ModificationPhase, Phase,
};

use super::{Plan, PlanError, Planner, Result};

/// The topology segment and StorageClass a capacity is asked for.
#[derive(Debug, Clone, Copy)]
pub struct CapacityFor<'a> {
    /// The segment's labels; `None` asks about all the storage.
    pub topology: Option<&'a BTreeMap<String, String>>,
    /// The segment's node, under pav's topology key, when it names one.
    pub node: Option<&'a str>,
    /// The StorageClass parameters.
    pub params: &'a BTreeMap<String, String>,
}

impl CapacityFor<'_> {
    /// What tells one segment and class from another: the capacity pod's
    /// name and the cache key of its answer.
    pub fn key(&self) -> String {
        serde_json::json!([self.topology, self.node, self.params]).to_string()
    }
}

/// A modification planned, with the parameters the volume has once it
/// succeeds (what is recorded on it then).
#[derive(Debug, Clone)]
pub struct ModificationPlan {
    /// Evaluated `spec.volumeModification` and its pod.
    pub plan: Plan<ModificationPhase>,
    /// The recorded parameters with the class's on top.
    pub after: BTreeMap<String, String>,
}

impl Planner {
    /// The room in `segment` for new volumes of its class (dynamic
    /// provisioning only: capacity places volumes being created).
    pub fn capacity(&self, segment: &CapacityFor<'_>) -> Result<Plan<CapacityPhase>> {
        self.require_dynamic(Phase::Capacity)?;
        let context = CapacityContext::new(segment.topology, segment.node, segment.params)
            .with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::Capacity, |c| c.render::<Capacity>(&context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .capacity_pod(template, evaluated.timeout, segment.node, &segment.key())
        });
        Ok(Plan { evaluated, pod })
    }

    /// Setting `requested` (a VolumeAttributesClass's parameters) on the
    /// volume `pv`, bound to `pvc` when it is.
    pub fn modification(
        &self,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        requested: &BTreeMap<String, String>,
    ) -> Result<ModificationPlan> {
        let context = ModificationContext::new(pv, pvc, requested)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::Modification, |c| c.render::<Modification>(&context))?;
        let handle = pv
            .spec
            .as_ref()
            .and_then(|s| s.csi.as_ref())
            .map(|c| c.volume_handle.as_str())
            .unwrap_or_default();
        // Named after the parameters too: a pod left by an earlier change
        // (its deletion interrupted) is not this one.
        let key = serde_json::json!([handle, requested]).to_string();
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().modification_pod(
                template,
                evaluated.timeout,
                &key,
                pv.metadata.name.as_deref().unwrap_or_default(),
            )
        });
        Ok(ModificationPlan {
            plan: Plan { evaluated, pod },
            after: context.mutable_parameters_after().clone(),
        })
    }
}
