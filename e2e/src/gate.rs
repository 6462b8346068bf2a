//! Where a scenario's PaV pods record each run and wait for the test: a
//! host directory of each node, mounted at [`MOUNT`] in the pods. A pod of
//! phase P appends its name to `P.runs` when it starts, then blocks until
//! `P.release` exists. So the test knows a fault landed (or a request
//! came) while the phase's pod ran, and how many pods of each phase
//! started, however briefly (a watch can miss a pod that comes and goes
//! while it lags). Dropping the gate (a test that ends, or panics) opens it
//! for every phase, so that no pod is left waiting; the directories stay
//! until the scenario's next gate, as pods may still be using them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{LocalNode, wait_until};

/// Where the pods see the gate.
pub const MOUNT: &str = "/e2e";

/// The name of the gate's volume in a pod.
const VOLUME: &str = "e2e-gate";

/// A scenario's gate on some nodes; opened for every phase when dropped.
pub struct Gate {
    /// The gate's directory on each node, as this host sees it.
    dirs: Vec<PathBuf>,
}

impl Gate {
    /// The gate's directory of scenario `name` on a node: what a pod
    /// mounts as a `hostPath`.
    pub fn dir_of(name: &str) -> PathBuf {
        Path::new("/var/lib/pav-e2e-gates").join(name)
    }

    /// The pod volume of scenario `name`'s gate (a `hostPath` of
    /// [`Gate::dir_of`]), for [`Gate::volume_mount`].
    pub fn volume(name: &str) -> serde_json::Value {
        serde_json::json!({
            "name": VOLUME,
            "hostPath": { "path": Self::dir_of(name), "type": "DirectoryOrCreate" },
        })
    }

    /// A container's mount of [`Gate::volume`] at [`MOUNT`], where
    /// [`Gate::script`] looks.
    pub fn volume_mount() -> serde_json::Value {
        serde_json::json!({ "name": VOLUME, "mountPath": MOUNT })
    }

    /// An empty gate for scenario `name` on this host's node.
    pub fn new(name: &str) -> Gate {
        Self::on(name, [Path::new("/")])
    }

    /// An empty gate for scenario `name` on each of `nodes`.
    pub fn on_nodes(name: &str, nodes: &[LocalNode]) -> Gate {
        Self::on(name, nodes.iter().map(|node| node.root.as_path()))
    }

    fn on<'a>(name: &str, roots: impl IntoIterator<Item = &'a Path>) -> Gate {
        let relative = Self::dir_of(name);
        let relative = relative.strip_prefix("/").expect("an absolute path");
        let dirs: Vec<PathBuf> = roots.into_iter().map(|root| root.join(relative)).collect();
        for dir in &dirs {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        Gate { dirs }
    }

    /// The shell a pod of `phase` runs first.
    pub fn script(phase: &str) -> String {
        format!(
            "echo \"$HOSTNAME\" >> {MOUNT}/{phase}.runs; \
             until [ -e {MOUNT}/{phase}.release ] || [ -e {MOUNT}/{OPEN} ]; do sleep 0.2; done"
        )
    }

    /// The pods of `phase` that started, in order on each node.
    pub fn runs(&self, phase: &str) -> Vec<String> {
        self.dirs
            .iter()
            .map(|dir| {
                std::fs::read_to_string(dir.join(format!("{phase}.runs"))).unwrap_or_default()
            })
            .collect::<String>()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Waits until `count` pods of `phase` have started (and so wait at
    /// the gate).
    pub async fn wait_started(
        &self,
        phase: &str,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        wait_until(
            &format!("{count} {phase} pod(s) at the gate"),
            timeout,
            || async { Ok((self.runs(phase).len() >= count).then_some(())) },
        )
        .await
    }

    /// Lets the pods of `phase` go on, now and when they start.
    pub fn release(&self, phase: &str) {
        self.write(&format!("{phase}.release"));
    }

    /// Creates file `name` in the gate's directory on every node.
    fn write(&self, name: &str) {
        for dir in &self.dirs {
            let file = dir.join(name);
            std::fs::write(&file, "").unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
        }
    }
}

/// The file that releases every phase.
const OPEN: &str = "open";

impl Drop for Gate {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::write(dir.join(OPEN), "");
        }
    }
}
