//! Events a driver reports ([`Events`]): a phase that failed, or waits.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use pav_templates::Phase;

use crate::pods::results;

/// The event recorder of one driver.
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub(super) fn new(recorder: Recorder) -> Self {
        Events { recorder }
    }

    /// Reports a failure as a Warning event on `regarding` (a PVC, PV,
    /// client pod or the PavProvisioner), naming the phase and the pod in
    /// `message`.
    pub async fn warn(
        &self,
        regarding: &ObjectReference,
        phase: Phase,
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        self.publish(
            EventType::Warning,
            phase.event_reason(),
            regarding,
            phase,
            message,
            pod,
        )
        .await;
    }

    /// Reports, as a Normal event with `reason` on `regarding`, that
    /// `phase` waits for something (nothing failed), related to `pod`.
    pub async fn note_waiting(
        &self,
        regarding: &ObjectReference,
        (phase, reason): (Phase, &str),
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        self.publish(EventType::Normal, reason, regarding, phase, message, pod)
            .await;
    }

    async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        regarding: &ObjectReference,
        phase: Phase,
        message: &str,
        pod: Option<ObjectReference>,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(results::truncate(message.to_owned())),
            action: phase.field().to_owned(),
            secondary: pod,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %e, "cannot publish event");
        }
    }
}
