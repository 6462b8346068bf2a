//! The PavProvisioner's status: the driver's readiness, the `Ready`
//! condition, and writing them.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt as _};
use pav_templates::model::Condition;
use pav_templates::{PavProvisioner, PavProvisionerStatus};

use super::{Context, Error, READY, publish, reason};

/// Whether the driver is available, and a message saying how far it is.
pub fn readiness(name: &str, deployment: &Deployment, daemon_set: &DaemonSet) -> (bool, String) {
    let available = deployment
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    let wanted = deployment.spec.replicas.unwrap_or(1);
    let (ready_nodes, nodes) = daemon_set
        .status
        .as_ref()
        .map(|s| (s.number_ready, s.desired_number_scheduled))
        .unwrap_or((0, 0));
    let ready = available >= 1 && nodes > 0 && ready_nodes >= nodes;
    let message = format!(
        "CSI driver {name}: controller {available}/{wanted} available, node plugin ready on {ready_nodes}/{nodes} nodes"
    );
    (ready, message)
}

/// A `Ready` condition (timestamps filled in by [`next_status`]).
pub fn condition(ready: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: READY.into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: None,
        observed_generation: None,
    }
}

/// The status to write: `condition` (keeping its transition time when the
/// status did not change), the generation and the volume count.
pub fn next_status(
    old: Option<&PavProvisionerStatus>,
    generation: Option<i64>,
    mut condition: Condition,
    volumes: usize,
    now: &str,
) -> PavProvisionerStatus {
    let previous = old.and_then(|s| s.conditions.iter().find(|c| c.type_ == condition.type_));
    condition.observed_generation = generation;
    condition.last_transition_time = match previous {
        Some(c) if c.status == condition.status => c
            .last_transition_time
            .clone()
            .or_else(|| Some(now.to_owned())),
        _ => Some(now.to_owned()),
    };
    let mut conditions: Vec<Condition> = old
        .map(|s| {
            s.conditions
                .iter()
                .filter(|c| c.type_ != condition.type_)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conditions.insert(0, condition);
    PavProvisionerStatus {
        observed_generation: generation,
        conditions,
        volumes: Some(i32::try_from(volumes).unwrap_or(i32::MAX)),
    }
}

pub(super) fn now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// Writes the status if it changed; on a change of the `Ready`
/// condition's reason or message, also records an event of `kind`.
pub(super) async fn update_status(
    p: &PavProvisioner,
    ctx: &Context,
    condition: Condition,
    volumes: usize,
    kind: EventType,
) -> Result<(), Error> {
    let old = p.status.as_ref();
    let status = next_status(old, p.metadata.generation, condition, volumes, &now());
    if old == Some(&status) {
        return Ok(());
    }
    let previous = old.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    let current = &status.conditions[0];
    let changed =
        previous.is_none_or(|c| c.reason != current.reason || c.message != current.message);
    if changed && current.reason != reason::DELETION_BLOCKED {
        // Only the shape of a readiness change, not every count, is news.
        let news = previous.is_none_or(|c| c.reason != current.reason)
            || current.reason == reason::INVALID_SPEC;
        if news {
            publish(ctx, p, kind, &current.reason, &current.message).await;
        }
    }
    let api: Api<PavProvisioner> = Api::all(ctx.client.clone());
    api.patch_status(
        &p.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_controller_and_every_node() {
        let deployment: Deployment = serde_yaml::from_str(
            "spec: { replicas: 1, selector: {}, template: {} }\nstatus: { availableReplicas: 1 }",
        )
        .unwrap();
        let mut daemon_set: DaemonSet = serde_yaml::from_str(
            "spec: { selector: {}, template: {} }\nstatus: { numberReady: 1, desiredNumberScheduled: 2, currentNumberScheduled: 2, numberMisscheduled: 0 }",
        )
        .unwrap();
        let (ready, message) = readiness("hello", &deployment, &daemon_set);
        assert!(!ready);
        assert_eq!(
            message,
            "CSI driver hello: controller 1/1 available, node plugin ready on 1/2 nodes"
        );
        daemon_set.status.as_mut().unwrap().number_ready = 2;
        assert!(readiness("hello", &deployment, &daemon_set).0);
        let mut unavailable = deployment.clone();
        unavailable.status = None;
        assert!(!readiness("hello", &unavailable, &daemon_set).0);
    }

    #[test]
    fn status_keeps_transition_time_while_status_holds() {
        let first = next_status(
            None,
            Some(1),
            condition(false, reason::DRIVER_NOT_READY, "0/1"),
            0,
            "t1",
        );
        assert_eq!(
            first.conditions[0].last_transition_time.as_deref(),
            Some("t1")
        );
        assert_eq!(first.observed_generation, Some(1));
        assert_eq!(first.volumes, Some(0));
        let same = next_status(
            Some(&first),
            Some(2),
            condition(false, reason::INVALID_SPEC, "bad"),
            3,
            "t2",
        );
        assert_eq!(
            same.conditions[0].last_transition_time.as_deref(),
            Some("t1")
        );
        assert_eq!(same.conditions[0].observed_generation, Some(2));
        assert_eq!(same.conditions[0].reason, "InvalidSpec");
        assert_eq!(same.volumes, Some(3));
        let flipped = next_status(
            Some(&same),
            Some(2),
            condition(true, reason::DRIVER_READY, "ok"),
            3,
            "t3",
        );
        assert_eq!(
            flipped.conditions[0].last_transition_time.as_deref(),
            Some("t3")
        );
        assert_eq!(flipped.conditions.len(), 1);
    }
}
