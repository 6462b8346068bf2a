//! Capacity (`spec.storageCapacity`): GetCapacity measures the room for
//! new volumes of a StorageClass in one topology segment (a node), which
//! external-provisioner publishes as CSIStorageCapacity. Its optional pod
//! is named and labelled after the segment and the class's parameters,
//! and runs on the segment's node when it names one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use pav_templates::phase;
use pav_templates::{CapacityContext, CapacityPhase, Phase};

use super::example::Example;
use crate::pods::PodOrigin;
use crate::recipe::plan::Result;
use crate::recipe::{Plan, Planner};

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

impl Planner {
    /// The room in `segment` for new volumes of its class (dynamic
    /// provisioning only: capacity places volumes being created).
    pub fn capacity(&self, segment: &CapacityFor<'_>) -> Result<Plan<CapacityPhase>> {
        self.require_dynamic(Phase::Capacity)?;
        let context = CapacityContext::new(segment.topology, segment.node, segment.params)
            .with_pvc_lookup(self.lookup());
        let evaluated = self.render::<phase::Capacity>(&context)?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .capacity_pod(template, evaluated.timeout, segment.node, &segment.key())
        });
        Ok(Plan { evaluated, pod })
    }
}

impl PodOrigin<'_> {
    /// The capacity pod measuring the room on `node` (when the segment
    /// names one: it runs there) for the segment and class `key` stands
    /// for.
    pub fn capacity_pod(
        &self,
        template: &PodTemplateSpec,
        timeout: Option<std::time::Duration>,
        node: Option<&str>,
        key: &str,
    ) -> Pod {
        self.phase_pod(template, timeout, Phase::Capacity, key, node, Vec::new())
    }
}

/// `pav render --phase capacity`: the room in the node's segment, as its
/// node plugin reports it, for the class's volumes.
pub(crate) fn example(example: &Example<'_>, planner: &Planner) -> anyhow::Result<String> {
    let node = &example.node_name;
    let topology = BTreeMap::from([(crate::recipe::TOPOLOGY_KEY.to_owned(), node.clone())]);
    let params = example.objects.sc.parameters.clone().unwrap_or_default();
    let segment = CapacityFor {
        topology: Some(&topology),
        node: Some(node),
        params: &params,
    };
    example.to_yaml(example.planned(planner.capacity(&segment))?)
}
