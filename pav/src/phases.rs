//! Every phase of a PavProvisioner, one module each, holding all pav knows
//! about planning it: its [`Planner`] method(s) and the types only it uses,
//! the pod only it builds (pods several phases share are built in
//! [`crate::pods`]), and how `pav render` shows it (its `example`, which
//! plans the phase with the driver's [`Planner`] from the objects given).
//!
//! This module is the registry: the modules, and the one match from
//! [`Phase`] to a phase's example. A new phase is one more module and one
//! more arm here. Planning needs no cluster: nothing here uses the driver
//! (`csi`), and what the phases share ([`crate::recipe`], [`crate::pods`])
//! uses nothing here.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use pav_templates::{CompiledProvisioner, Phase, PvcMap};

use crate::recipe::Planner;

pub mod attach;
pub mod capacity;
pub mod creation;
pub mod deletion;
pub mod detach;
mod example;
pub mod expansion;
pub mod group_snapshot_creation;
pub mod group_snapshot_deletion;
pub mod health;
pub mod modification;
pub mod node_expansion;
pub mod population;
pub mod snapshot_creation;
pub mod snapshot_deletion;
pub mod staging;
pub mod unstaging;
pub mod validation;

pub use self::capacity::CapacityFor;
pub use self::creation::CreationPlan;
pub(crate) use self::example::{
    Objects, Origin, Origins, RecordedSnapshot, RenderOptions, sample_client_pod,
};
pub use self::modification::ModificationPlan;
pub use self::staging::StagingFor;

/// `phase` of the PavProvisioner in `text` as `pav render` prints it,
/// planned by the driver's planner with `objects` where the driver reads
/// the API server.
pub(crate) fn render(
    text: &str,
    phase: Phase,
    objects: &Objects,
    options: &RenderOptions,
) -> anyhow::Result<String> {
    let provisioner =
        CompiledProvisioner::from_yaml(text).map_err(|problems| anyhow::anyhow!("{problems}"))?;
    let name = provisioner.name().to_owned();
    let lookup = Arc::new(PvcMap::from_iter(
        std::iter::once(objects.pvc.clone()).chain(objects.claims.iter().cloned()),
    ));
    // The driver's planner, with the objects given instead of the API server's.
    let planner = Planner::new(
        Arc::new(provisioner),
        provisioner_owner(text),
        options.namespace.clone(),
        lookup,
    );
    let example = example::Example::new(&name, phase, objects, options);
    match phase {
        Phase::Validation => validation::example(&example, &planner),
        Phase::Creation => creation::example(&example, &planner),
        Phase::Deletion => deletion::example(&example, &planner),
        Phase::Staging => staging::example(&example, &planner),
        Phase::Unstaging => unstaging::example(&example, &planner),
        Phase::Expansion => expansion::example(&example, &planner),
        Phase::NodeExpansion => node_expansion::example(&example, &planner),
        Phase::SnapshotCreation => snapshot_creation::example(&example, &planner),
        Phase::SnapshotDeletion => snapshot_deletion::example(&example, &planner),
        Phase::Capacity => capacity::example(&example, &planner),
        Phase::Modification => modification::example(&example, &planner),
        Phase::Health => health::example(&example, &planner),
        Phase::Attach => attach::example(&example, &planner),
        Phase::Detach => detach::example(&example, &planner),
        Phase::GroupSnapshotCreation => group_snapshot_creation::example(&example, &planner),
        Phase::GroupSnapshotDeletion => group_snapshot_deletion::example(&example, &planner),
        Phase::Population => population::example(&example, &planner),
    }
}

/// The owner reference of the PavProvisioner in `text`, when it has the
/// UID of a live object (a file fetched from the cluster); `None` otherwise.
fn provisioner_owner(text: &str) -> Option<OwnerReference> {
    use kube::Resource as _;
    let json = pav_templates::yaml::yaml_to_json(text).ok()?;
    let object: pav_templates::PavProvisioner = serde_json::from_value(json).ok()?;
    object.owner_ref(&())
}
