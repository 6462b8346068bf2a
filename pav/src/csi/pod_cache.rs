//! The process-wide cache of one provisioner's PaV pods: a reflector store
//! kept by a single watch, and the waits for a pod that read it (no request
//! of their own). See [`PavPods::start_cache`](super::context::PavPods::start_cache).

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use pav_templates::Phase;
use tokio::sync::watch;

use crate::driver_error::DriverError;
use crate::pods::results::{self, PodState};
use crate::pods::{LABEL_PROVISIONER, label_value};

/// The label selector of every pod of `provisioner` (see
/// [`PodTarget::labels`](crate::pods::PodTarget::labels)).
pub(super) fn provisioner_selector(provisioner: &str) -> String {
    format!("{LABEL_PROVISIONER}={}", label_value(provisioner))
}

/// The pods of one provisioner as one watch sees them: a reflector store,
/// and a channel bumped after every change to it, so waiters wake up.
pub(super) struct PodCache {
    pub(super) store: Store<Pod>,
    pub(super) changed: watch::Receiver<()>,
}

/// What [`PodCache::wait_pod`] waits for.
pub(super) struct PodWait<'a> {
    pub(super) phase: Phase,
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    /// Used unless the pod records its own.
    pub(super) timeout: Duration,
    pub(super) timing: Timing,
}

/// The periods of [`PodCache::wait_pod`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// How often `check` is asked without a change of the pod.
    tick: Duration,
    /// How long a pod may be missing from the cache before the API server
    /// is asked whether it exists at all.
    unseen_grace: Duration,
}

impl Timing {
    pub(super) const DEFAULT: Timing = Timing {
        tick: Duration::from_secs(1),
        unseen_grace: Duration::from_secs(10),
    };
}

impl PodCache {
    /// Watches the pods of `provisioner` (on `node` only, if given) in a
    /// task of its own that retries with backoff for the process' life.
    pub(super) fn start(client: Client, provisioner: &str, node: Option<&str>) -> PodCache {
        let mut config = watcher::Config::default()
            .labels(&provisioner_selector(provisioner))
            .any_semantic();
        if let Some(node) = node {
            config = config.fields(&format!("spec.nodeName={node}"));
        }
        let (store, writer) = reflector::store();
        let (bump, changed) = watch::channel(());
        let stream = watcher(Api::<Pod>::all(client), config)
            .default_backoff()
            .modify(crate::cached::without_managed_fields)
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    // The reflector has applied the event to the store.
                    Ok(_) => {
                        bump.send_replace(());
                    }
                    Err(e) => tracing::warn!(error = %e, "watching PaV pods"),
                }
            }
        });
        PodCache { store, changed }
    }

    /// Waits for the first complete list, at most `within`.
    pub(super) async fn ready(&self, within: Duration) -> Result<(), DriverError> {
        match tokio::time::timeout(within, self.store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(DriverError::Watch("the watch of PaV pods stopped".into())),
            Err(_) => Err(DriverError::Watch(format!(
                "no list of PaV pods from the API server within {}s",
                within.as_secs()
            ))),
        }
    }

    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// [`PavPods::wait`](super::context::PavPods::wait) on this cache. A pod not (yet) in the cache is
    /// not taken as deleted: a pod created just now shows up a moment
    /// later. Only a pod once seen and then gone was deleted, or one still
    /// not seen after `unseen_grace` that `absent` (asking the API server)
    /// confirms does not exist; an error of `absent` is logged and the wait
    /// goes on.
    pub(super) async fn wait_pod<T, F>(
        &self,
        wait: PodWait<'_>,
        mut check: impl FnMut(&Pod) -> Option<T>,
        mut absent: impl FnMut() -> F,
    ) -> Result<T, DriverError>
    where
        F: std::future::Future<Output = Result<bool, DriverError>>,
    {
        let PodWait {
            phase,
            namespace,
            name,
            mut timeout,
            timing,
        } = wait;
        let started = tokio::time::Instant::now();
        let mut deadline = started + timeout;
        let mut changed = self.changed.clone();
        let mut tick = tokio::time::interval(timing.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<Arc<Pod>> = None;
        let mut unseen_since = started;
        let deleted = || {
            DriverError::PodDeleted(format!(
                "{phase} pod {namespace}/{name} was deleted before it finished"
            ))
        };
        loop {
            // Marked before reading, so a change after this read wakes us.
            changed.borrow_and_update();
            match self.get(namespace, name) {
                Some(pod) => {
                    // The phase's own `timeout`, recorded on the pod.
                    if let Some(own) = crate::pods::timeout_of(&pod) {
                        timeout = own;
                        deadline = started + own;
                    }
                    if let Some(result) = check(&pod) {
                        return Ok(result);
                    }
                    last = Some(pod);
                }
                None if last.is_some() => return Err(deleted()),
                None => {
                    let now = tokio::time::Instant::now();
                    if now - unseen_since >= timing.unseen_grace {
                        match absent().await {
                            Ok(true) => return Err(deleted()),
                            Ok(false) => {}
                            Err(e) => tracing::warn!(
                                pod = name, namespace, error = %pav_csi::error_chain(&e),
                                "the pod is not in the pod cache, nor can the API server say whether it exists"
                            ),
                        }
                        unseen_since = tokio::time::Instant::now();
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    let state = last.as_deref().map(PodState::of);
                    return Err(DriverError::TimedOut(results::pod_timeout(
                        phase, namespace, name, timeout, state.as_ref(),
                    )));
                }
                result = changed.changed() => if result.is_err() {
                    return Err(DriverError::Watch("pod watch ended".into()));
                },
                _ = tick.tick() => {}
            }
        }
    }

    /// [`DriverContext::wait_gone`] on this cache.
    pub(super) async fn wait_gone(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<(), DriverError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = self.changed.clone();
        loop {
            changed.borrow_and_update();
            if self.get(namespace, name).is_none() {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(DriverError::TimedOut(format!(
                        "pod {namespace}/{name} was not deleted within {}s",
                        timeout.as_secs()
                    )));
                }
                result = changed.changed() => if result.is_err() {
                    return Err(DriverError::Watch(format!(
                        "waiting for pod {namespace}/{name} to be deleted: the pod watch ended"
                    )));
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use kube::runtime::reflector::store::Writer;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// A cache fed by hand, as the watch would feed it, and what feeds it.
    struct Fed {
        writer: Writer<Pod>,
        bump: watch::Sender<()>,
    }

    impl Fed {
        fn event(&mut self, event: watcher::Event<Pod>) {
            self.writer.apply_watcher_event(&event);
            self.bump.send_replace(());
        }
    }

    fn fed_cache() -> (PodCache, Fed) {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let (bump, changed) = watch::channel(());
        (PodCache { store, changed }, Fed { writer, bump })
    }

    fn pod(phase: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        });
        pod
    }

    /// Ticks that never come, so only the cache's notification wakes a wait.
    const NO_TICK: Timing = Timing {
        tick: Duration::from_secs(3600),
        unseen_grace: Duration::from_secs(3600),
    };

    fn wait(timeout: Duration, timing: Timing) -> PodWait<'static> {
        PodWait {
            phase: Phase::Creation,
            namespace: "ns",
            name: "p",
            timeout,
            timing,
        }
    }

    fn succeeded(pod: &Pod) -> Option<&'static str> {
        PodState::of(pod).is_terminated().then_some("done")
    }

    async fn exists() -> Result<bool, DriverError> {
        Ok(false)
    }

    #[tokio::test]
    async fn a_pod_not_yet_in_the_cache_is_waited_for_and_changes_wake_the_wait() {
        let (cache, mut fed) = fed_cache();
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            fed.event(watcher::Event::Apply(pod("Pending")));
            tokio::time::sleep(Duration::from_millis(50)).await;
            fed.event(watcher::Event::Apply(pod("Succeeded")));
            fed
        });
        let started = Instant::now();
        let result = cache
            .wait_pod(
                wait(Duration::from_secs(30), NO_TICK),
                succeeded,
                || async { panic!("the pod was not missing for long") },
            )
            .await;
        assert_eq!(result.unwrap(), "done");
        assert!(started.elapsed() < Duration::from_secs(5));
        let _fed = feeder.await.unwrap();
    }

    #[tokio::test]
    async fn a_pod_seen_and_then_gone_was_deleted() {
        let (cache, mut fed) = fed_cache();
        fed.event(watcher::Event::Apply(pod("Running")));
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            fed.event(watcher::Event::Delete(pod("Running")));
            fed
        });
        let err = cache
            .wait_pod(wait(Duration::from_secs(30), NO_TICK), succeeded, exists)
            .await
            .unwrap_err();
        assert!(matches!(err, DriverError::PodDeleted(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "creation pod ns/p was deleted before it finished"
        );
        let _fed = feeder.await.unwrap();
    }

    #[tokio::test]
    async fn a_pod_never_seen_is_taken_as_deleted_only_when_the_api_server_says_so() {
        let (cache, _fed) = fed_cache();
        let timing = Timing {
            tick: Duration::from_millis(20),
            unseen_grace: Duration::from_millis(100),
        };
        let asked = AtomicUsize::new(0);
        let started = Instant::now();
        let err = cache
            .wait_pod(wait(Duration::from_secs(30), timing), succeeded, || {
                let n = asked.fetch_add(1, Ordering::SeqCst);
                async move {
                    match n {
                        0 => Ok(false),
                        1 => Err(DriverError::Watch("API server down".into())),
                        _ => Ok(true),
                    }
                }
            })
            .await
            .unwrap_err();
        assert!(matches!(err, DriverError::PodDeleted(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "creation pod ns/p was deleted before it finished"
        );
        // Asked a grace apart: told it exists, then an error (the wait goes
        // on), then that it does not.
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_pod_that_does_not_finish_times_out_with_its_last_state() {
        let (cache, mut fed) = fed_cache();
        fed.event(watcher::Event::Apply(pod("Running")));
        let err = cache
            .wait_pod(wait(Duration::from_millis(200), NO_TICK), succeeded, exists)
            .await
            .unwrap_err();
        assert!(matches!(err, DriverError::TimedOut(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            results::pod_timeout(
                Phase::Creation,
                "ns",
                "p",
                Duration::from_millis(200),
                Some(&PodState::Running)
            )
        );
    }

    #[tokio::test]
    async fn the_timeout_recorded_on_the_pod_overrides_the_default() {
        // Longer: the pod finishes after the default timeout but within its own.
        let (cache, mut fed) = fed_cache();
        let mut running = pod("Running");
        crate::pods::set_timeout(&mut running, Some(Duration::from_secs(5)));
        fed.event(watcher::Event::Apply(running.clone()));
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut done = running;
            done.status.as_mut().unwrap().phase = Some("Succeeded".into());
            fed.event(watcher::Event::Apply(done));
            fed
        });
        let result = cache
            .wait_pod(wait(Duration::from_millis(100), NO_TICK), succeeded, exists)
            .await;
        assert_eq!(result.unwrap(), "done");
        let _fed = feeder.await.unwrap();

        // Shorter: the pod's 1 s applies, not the default 60 s.
        let (cache, mut fed) = fed_cache();
        let mut running = pod("Running");
        crate::pods::set_timeout(&mut running, Some(Duration::from_secs(1)));
        fed.event(watcher::Event::Apply(running));
        let started = Instant::now();
        let err = cache
            .wait_pod(wait(Duration::from_secs(60), NO_TICK), succeeded, exists)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.to_string()
                .contains("did not finish within 1s: it is still running"),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn check_is_asked_again_on_each_tick_without_a_change() {
        let (cache, mut fed) = fed_cache();
        fed.event(watcher::Event::Apply(pod("Running")));
        let timing = Timing {
            tick: Duration::from_millis(20),
            unseen_grace: Duration::from_secs(3600),
        };
        let mut asked = 0;
        let result = cache
            .wait_pod(
                wait(Duration::from_secs(30), timing),
                |_| {
                    asked += 1;
                    (asked == 5).then_some(asked)
                },
                exists,
            )
            .await;
        assert_eq!(result.unwrap(), 5);
    }

    #[tokio::test]
    async fn wait_gone_returns_at_once_for_a_pod_not_in_the_cache() {
        let (cache, _fed) = fed_cache();
        let started = Instant::now();
        cache
            .wait_gone("ns", "p", Duration::from_secs(30))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn wait_gone_waits_for_the_deletion() {
        let (cache, mut fed) = fed_cache();
        let mut deleting = pod("Running");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        fed.event(watcher::Event::Apply(deleting.clone()));
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            fed.event(watcher::Event::Delete(deleting));
            fed
        });
        let started = Instant::now();
        cache
            .wait_gone("ns", "p", Duration::from_secs(30))
            .await
            .unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        let _fed = feeder.await.unwrap();
    }

    #[tokio::test]
    async fn wait_gone_times_out() {
        let (cache, mut fed) = fed_cache();
        fed.event(watcher::Event::Apply(pod("Running")));
        let err = cache
            .wait_gone("ns", "p", Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "pod ns/p was not deleted within 0s");
    }

    #[tokio::test]
    async fn a_stopped_watch_ends_the_waits() {
        let (cache, mut fed) = fed_cache();
        fed.event(watcher::Event::Apply(pod("Running")));
        drop(fed);
        let err = cache
            .wait_pod(wait(Duration::from_secs(30), NO_TICK), succeeded, exists)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "pod watch ended");
        let err = cache
            .wait_gone("ns", "p", Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("the pod watch ended"), "{err:?}");
    }

    #[test]
    fn the_cache_selects_the_label_pods_are_built_with() {
        let target = crate::pods::PodTarget {
            provisioner: "a/b",
            phase: Phase::Staging,
            volume: "v",
            node: Some("n"),
        };
        let labels = target.labels();
        let selector = provisioner_selector("a/b");
        let (key, value) = selector.split_once('=').unwrap();
        assert_eq!(labels.get(key).map(String::as_str), Some(value));
    }

    /// Against the fake API server, which selects by field as a real one.
    mod served {
        use super::*;
        use crate::csi::fixtures::ApiServer;
        use kube::api::PostParams;
        use serde_json::json;

        fn pod_on(name: &str, node: &str) -> serde_json::Value {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": name, "namespace": "pav",
                    "labels": {crate::pods::LABEL_PROVISIONER: label_value("p")},
                },
                "spec": {"nodeName": node, "containers": []},
            })
        }

        fn names(cache: &PodCache) -> Vec<String> {
            let mut names: Vec<_> = (cache.store.state().iter())
                .map(|pod| pod.metadata.name.clone().unwrap_or_default())
                .collect();
            names.sort();
            names
        }

        /// Waits (up to 10 s) until the cache holds pod `name`.
        async fn until_cached(cache: &PodCache, name: &str) {
            for _ in 0..1000 {
                if cache.get("pav", name).is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("pod {name} never reached the cache: {:?}", names(cache));
        }

        async fn create(client: &Client, pod: serde_json::Value) {
            let pod: Pod = serde_json::from_value(pod).unwrap();
            let api = Api::<Pod>::namespaced(client.clone(), "pav");
            api.create(&PostParams::default(), &pod).await.unwrap();
        }

        /// A node plugin's cache holds its node's pods only, listed and
        /// watched: the field selector is the API server's to apply.
        #[tokio::test]
        async fn a_node_cache_holds_the_pods_of_its_node_only() {
            let (server, client) = ApiServer::start();
            server.serve_pods(|_| Vec::new());
            server.put_pod(pod_on("listed-a", "a"));
            server.put_pod(pod_on("listed-b", "b"));
            let cache = PodCache::start(client.clone(), "p", Some("a"));
            cache.ready(Duration::from_secs(10)).await.unwrap();
            create(&client, pod_on("watched-b", "b")).await;
            create(&client, pod_on("watched-a", "a")).await;
            until_cached(&cache, "watched-a").await;
            // watched-b was created first: had it been sent, it would be here.
            assert_eq!(names(&cache), ["listed-a", "watched-a"]);
        }

        /// A watch the API server ends with 410 Gone is followed by a new
        /// list, and the cache goes on seeing new pods.
        #[tokio::test]
        async fn after_its_watch_expires_the_cache_lists_again() {
            let (server, client) = ApiServer::start();
            server.serve_pods(|_| Vec::new());
            let cache = PodCache::start(client.clone(), "p", None);
            cache.ready(Duration::from_secs(10)).await.unwrap();
            create(&client, pod_on("before", "a")).await;
            until_cached(&cache, "before").await;
            server.expire_watches();
            create(&client, pod_on("after", "a")).await;
            until_cached(&cache, "after").await;
            let lists = (server.requests().iter())
                .filter(|r| r.path == "/api/v1/pods" && !r.is_watch())
                .count();
            assert!(
                lists >= 2,
                "{lists} lists: the expired watch was not followed by one"
            );
            assert_eq!(names(&cache), ["after", "before"]);
        }
    }

    /// The cache keeps pods without their managedFields (the API server's
    /// bookkeeping of who wrote which field), which nothing of pav reads.
    #[tokio::test]
    async fn cached_pods_lose_their_managed_fields() {
        let (server, client) = crate::csi::fixtures::ApiServer::start();
        server.serve_pods(|_| Vec::new());
        server.put_pod(serde_json::json!({
            "metadata": {
                "name": "stage-1", "namespace": "pav",
                "labels": {LABEL_PROVISIONER: "p"},
                "managedFields": [{"manager": "pav", "operation": "Apply", "fieldsType": "FieldsV1"}],
            },
            "spec": {"containers": []},
        }));
        let cache = PodCache::start(client, "p", None);
        cache.ready(Duration::from_secs(10)).await.unwrap();
        let pod = cache.get("pav", "stage-1").expect("the pod was listed");
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(
            (pod.metadata.labels.as_ref())
                .and_then(|l| l.get(LABEL_PROVISIONER))
                .map(String::as_str),
            Some("p")
        );
    }
}
