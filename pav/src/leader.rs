//! Leader election for `pav controller` on a `coordination.k8s.io` Lease,
//! so a rolling update never runs two controllers at once.
//!
//! The holder renews the Lease every [`RENEW`]; a candidate takes it over
//! once it has not been renewed for [`LEASE_DURATION`]. Writes use the
//! Lease's resourceVersion, so two candidates cannot both win. A leader
//! that cannot renew within [`RENEW_DEADLINE`] exits the process (its
//! replacement contends again), and a leader shutting down releases the
//! Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// How long a Lease stays valid without renewal. Long enough that the
/// API server's restart (20 to 40 s on the test cluster) or etcd's pause
/// costs no restart of the controller: one that exited there went into
/// the kubelet's CrashLoopBackOff, minutes without a controller after a
/// few such faults. The CSI controller's sidecars take the same durations
/// (`pav manifests`).
pub const LEASE_DURATION: Duration = Duration::from_secs(60);
/// How long the leader goes on failing to renew before it exits: it stops
/// well before another candidate may take the Lease.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(45);
const _: () = assert!(
    RENEW_DEADLINE.as_secs() + RENEW.as_secs() < LEASE_DURATION.as_secs(),
    "a leader must give up, even one renewal late, before its Lease expires"
);
/// How often the leader renews.
pub const RENEW: Duration = Duration::from_secs(5);

/// A held Lease.
#[derive(Debug)]
pub struct Leadership {
    api: Api<Lease>,
    name: String,
    identity: String,
}

/// Whether a candidate `identity` may take `lease` at `now`.
pub fn may_take(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = spec else { return true };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration = spec
        .lease_duration_seconds
        .map_or(LEASE_DURATION.as_secs() as i64, i64::from);
    match &spec.renew_time {
        Some(MicroTime(renewed)) => now.as_second() > renewed.as_second() + duration,
        None => true,
    }
}

fn spec_for(identity: &str, old: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
    let same_holder = old.and_then(|s| s.holder_identity.as_deref()) == Some(identity);
    let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
        acquire_time: if same_holder {
            old.and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if same_holder || old.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..LeaseSpec::default()
    }
}

/// This process's identity in a Lease: its pod's name (`POD_NAME`, else
/// `HOSTNAME`), or `fallback` and its process id outside a pod.
pub fn identity(fallback: &str) -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("{fallback}-{}", std::process::id()))
}

impl Leadership {
    /// Waits until this process holds Lease `name` in `namespace`.
    pub async fn acquire(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        let api: Api<Lease> = Api::namespaced(client, namespace);
        let mut waiting_logged = false;
        loop {
            match Self::try_take(&api, name, identity).await {
                Ok(true) => {
                    tracing::info!(lease = name, identity, "became leader");
                    return Self {
                        api,
                        name: name.to_owned(),
                        identity: identity.to_owned(),
                    };
                }
                Ok(false) => {
                    if !waiting_logged {
                        tracing::info!(lease = name, "another controller leads; waiting");
                        waiting_logged = true;
                    }
                }
                Err(err) => tracing::warn!(lease = name, error = %err, "leader election"),
            }
            tokio::time::sleep(RENEW).await;
        }
    }

    async fn try_take(api: &Api<Lease>, name: &str, identity: &str) -> kube::Result<bool> {
        let now = Timestamp::now();
        match api.get_opt(name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec_for(identity, None, now)),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(err) => Err(err),
                }
            }
            Some(mut lease) => {
                if !may_take(lease.spec.as_ref(), identity, now) {
                    return Ok(false);
                }
                lease.spec = Some(spec_for(identity, lease.spec.as_ref(), now));
                // resourceVersion is kept: a concurrent writer makes this fail.
                match api.replace(name, &PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(err) => Err(err),
                }
            }
        }
    }

    /// Renews the Lease forever; exits the process when leadership is lost
    /// or cannot be renewed within [`RENEW_DEADLINE`].
    pub async fn keep(&self) {
        let mut last = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(RENEW).await;
            match Self::try_take(&self.api, &self.name, &self.identity).await {
                Ok(true) => last = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.name, "leadership lost; exiting");
                    std::process::exit(1);
                }
                Err(err) => {
                    tracing::warn!(lease = %self.name, error = %err, "cannot renew lease");
                    if last.elapsed() >= RENEW_DEADLINE {
                        tracing::error!(lease = %self.name, "lease not renewed in time; exiting");
                        std::process::exit(1);
                    }
                }
            }
        }
    }

    /// Gives the Lease up, so a successor need not wait for it to expire.
    /// A failure is logged, not returned: the process is stopping anyway,
    /// and the successor takes the Lease once it expires.
    pub async fn release(&self) {
        let mut lease = match self.api.get_opt(&self.name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(e) => return self.not_released(&e),
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(e) = (self.api)
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            self.not_released(&e);
        }
    }

    /// Says why the Lease stays held until it expires (after `helm
    /// uninstall`, say, whose RoleBinding goes before the controller).
    fn not_released(&self, error: &kube::Error) {
        tracing::warn!(lease = %self.name, error = %error, "cannot release the leader Lease: a successor waits for it to expire");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn takes_free_own_or_expired_leases_only() {
        let now = Timestamp::from_second(1000).unwrap();
        assert!(may_take(None, "me", now));
        assert!(may_take(Some(&held("", 999)), "me", now));
        assert!(may_take(Some(&held("me", 999)), "me", now));
        assert!(!may_take(Some(&held("other", 990)), "me", now));
        assert!(may_take(Some(&held("other", 980)), "me", now));
    }

    #[test]
    fn transitions_count_changes_of_holder() {
        let now = Timestamp::from_second(1000).unwrap();
        let first = spec_for("a", None, now);
        assert_eq!(first.lease_transitions, Some(0));
        let renewed = spec_for("a", Some(&first), now);
        assert_eq!(renewed.lease_transitions, Some(0));
        assert_eq!(renewed.acquire_time, first.acquire_time);
        let taken = spec_for("b", Some(&renewed), now);
        assert_eq!(taken.lease_transitions, Some(1));
    }
}
