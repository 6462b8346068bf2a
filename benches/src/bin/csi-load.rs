//! A CSI load generator: many concurrent callers drive one CSI driver over
//! its Unix socket with the generated tonic client of pav-csi, and every
//! RPC's latency goes into an HDR histogram.
//!
//! One *cycle* is, by `--mix`:
//!
//! * `controller`: CreateVolume of a new name, then DeleteVolume of it;
//! * `node`: NodeStageVolume, NodePublishVolume, NodeUnpublishVolume and
//!   NodeUnstageVolume of a volume the caller created before the run
//!   (untimed) and deletes after it;
//! * `all`: CreateVolume, the four node calls, DeleteVolume;
//! * `probe`: one Identity Probe (no storage work on either side: the gRPC
//!   round trip and the server framework alone);
//! * `floor`: no driver and no socket: the mount system calls a pav-csi node
//!   cycle makes, made here directly and each timed alone, the kernel's part
//!   of the four node RPCs: `mount(bind) stage` (the staged directory,
//!   `--source`, on the staging path; NodeStageVolume), `mount(bind)
//!   publish` (the staging path on the target; NodePublishVolume),
//!   `umount publish` (the target; NodeUnpublishVolume) and `umount stage`
//!   (the staging path; NodeUnstageVolume). The calls are pav-csi's own
//!   (`rustix::mount::mount_bind`: `mount(src, dst, NULL, MS_BIND, NULL)`;
//!   `rustix::mount::unmount(dst, 0)`: `umount2`), without the rest of its
//!   work (mount-point checks, staging record, mkdir/rmdir of the target).
//!   Each caller is an OS thread of its own, as pav-csi's mounts run on
//!   blocking threads, so concurrent callers contend in the kernel as the
//!   driver's would. Needs the privilege to mount (root).
//!
//! Each caller works on its own volumes and paths (under a directory this
//! program makes and removes), as kubelet would: the staging directory and the
//! target's parent exist before the calls; the driver makes the target.
//! Each caller first runs `--warmup` unrecorded cycles; then all callers
//! start together and share `--cycles` (and/or run until `--duration`).
//! The driver is asked for the NodeGetCapabilities STAGE_UNSTAGE capability.
//!
//! Output: a table, then one JSON line (the last line) with requests per
//! second and p50/p99/mean/max latency in microseconds per RPC. Exits
//! non-zero when any RPC failed.
//!
//! ```text
//! csi-load --endpoint /tmp/noop.sock --concurrency 16 --cycles 2000 --mix node
//! csi-load --mix floor --dir /var/lib/kubelet/pods/floor --source /tmp/noop-data
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use pav_csi::csi;
use pav_csi::csi::controller_client::ControllerClient;
use pav_csi::csi::identity_client::IdentityClient;
use pav_csi::csi::node_client::NodeClient;
use tonic::transport::Channel;

/// Drive a CSI driver's controller and node RPCs from many concurrent callers.
#[derive(Debug, Parser)]
#[command(about)]
struct Cli {
    /// The driver's Unix socket (`unix://` prefix accepted); not used by
    /// `--mix floor`.
    #[arg(long)]
    endpoint: Option<String>,
    /// Concurrent callers.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured cycles in all (shared by the callers).
    #[arg(long, default_value_t = 1000)]
    cycles: u64,
    /// Stop the measured phase after this many seconds even if cycles remain.
    #[arg(long)]
    duration: Option<f64>,
    /// Unrecorded cycles per caller before the measured phase.
    #[arg(long, default_value_t = 20)]
    warmup: u64,
    /// Which RPCs a cycle makes.
    #[arg(long, value_enum, default_value_t = Mix::All)]
    mix: Mix,
    /// gRPC connections (HTTP/2) to the socket; callers are spread over
    /// them. Kubelet and the CSI sidecars each hold one.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Directory under which this program makes (and at exit removes) its
    /// staging and target paths; default: a new one in the temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Label copied into the JSON line (e.g. which driver this is).
    #[arg(long, default_value = "")]
    label: String,
    /// Tokio worker threads of this generator (it shares the machine with
    /// the driver under test); `--mix floor` runs a thread per caller instead.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `--mix floor`: the directory bound on each caller's staging path (as
    /// the provisioner's staged directory is by NodeStageVolume); default: a
    /// directory of each caller's own under `--dir`.
    #[arg(long)]
    source: Option<PathBuf>,
}

/// RPCs per cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mix {
    /// CreateVolume + DeleteVolume.
    Controller,
    /// NodeStage + NodePublish + NodeUnpublish + NodeUnstage.
    Node,
    /// All six.
    All,
    /// Identity Probe.
    Probe,
    /// No driver: bind stage, bind publish, umount publish, umount stage.
    Floor,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::Controller => "controller",
            Mix::Node => "node",
            Mix::All => "all",
            Mix::Probe => "probe",
            Mix::Floor => "floor",
        }
    }
}

const RPCS: [&str; 11] = [
    "CreateVolume",
    "NodeStageVolume",
    "NodePublishVolume",
    "NodeUnpublishVolume",
    "NodeUnstageVolume",
    "DeleteVolume",
    "Probe",
    // `Mix::Floor`: system calls, not RPCs.
    "mount(bind) stage",
    "mount(bind) publish",
    "umount publish",
    "umount stage",
];

/// Indices in [`RPCS`] of the floor's system calls.
const BIND_STAGE: usize = 7;
const BIND_PUBLISH: usize = 8;
const UMOUNT_PUBLISH: usize = 9;
const UMOUNT_STAGE: usize = 10;

/// Latency histograms (nanoseconds) and failure counts per RPC.
struct Recorder {
    histograms: Vec<Histogram<u64>>,
    errors: Vec<u64>,
    first_error: Option<String>,
    enabled: bool,
    /// Every RPC made, recorded or not (warmup and setup included).
    issued: u64,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            histograms: RPCS
                .iter()
                .map(|_| Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("bounds"))
                .collect(),
            errors: vec![0; RPCS.len()],
            first_error: None,
            enabled: false,
            issued: 0,
        }
    }

    /// Times `call` as RPC number `rpc`; a failure is counted and returned.
    async fn time<T>(
        &mut self,
        rpc: usize,
        call: impl Future<Output = Result<T, tonic::Status>>,
    ) -> anyhow::Result<T> {
        let start = Instant::now();
        let result = call.await;
        let elapsed = start.elapsed();
        let result = result.map_err(|status| format!("{:?}: {}", status.code(), status.message()));
        self.record(rpc, elapsed, result)
    }

    /// Times the system call `call` as number `rpc`, like [`Recorder::time`].
    fn time_syscall(
        &mut self,
        rpc: usize,
        call: impl FnOnce() -> rustix::io::Result<()>,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let result = call();
        let elapsed = start.elapsed();
        self.record(rpc, elapsed, result.map_err(|errno| errno.to_string()))
    }

    fn record<T>(
        &mut self,
        rpc: usize,
        elapsed: Duration,
        result: Result<T, String>,
    ) -> anyhow::Result<T> {
        self.issued += 1;
        match result {
            Ok(value) => {
                if self.enabled {
                    let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
                    self.histograms[rpc].saturating_record(ns.max(1));
                }
                Ok(value)
            }
            Err(error) => {
                self.errors[rpc] += 1;
                let message = format!("{}: {error}", RPCS[rpc]);
                self.first_error.get_or_insert_with(|| message.clone());
                bail!(message)
            }
        }
    }

    fn merge(&mut self, other: &Recorder) {
        for (mine, theirs) in self.histograms.iter_mut().zip(&other.histograms) {
            mine.add(theirs).expect("same bounds");
        }
        for (mine, theirs) in self.errors.iter_mut().zip(&other.errors) {
            *mine += theirs;
        }
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.issued += other.issued;
    }
}

fn mount_capability() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume::default(),
        )),
    }
}

/// One caller: its clients, paths and the volume it uses for node cycles.
struct Caller {
    id: usize,
    run: String,
    identity: IdentityClient<Channel>,
    controller: ControllerClient<Channel>,
    node: NodeClient<Channel>,
    staging: PathBuf,
    target: PathBuf,
    mix: Mix,
    /// Volume id and context of the node-cycle volume (`Mix::Node`).
    volume: Option<(String, std::collections::HashMap<String, String>)>,
}

impl Caller {
    async fn create(
        &mut self,
        rec: &mut Recorder,
        name: String,
    ) -> anyhow::Result<(String, std::collections::HashMap<String, String>)> {
        let request = csi::CreateVolumeRequest {
            name,
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![mount_capability()],
            ..Default::default()
        };
        let response = rec
            .time(0, self.controller.create_volume(request))
            .await?
            .into_inner();
        let volume = response.volume.context("CreateVolume answered no volume")?;
        Ok((volume.volume_id, volume.volume_context))
    }

    async fn delete(&mut self, rec: &mut Recorder, volume_id: String) -> anyhow::Result<()> {
        let request = csi::DeleteVolumeRequest {
            volume_id,
            ..Default::default()
        };
        rec.time(5, self.controller.delete_volume(request)).await?;
        Ok(())
    }

    async fn node_cycle(
        &mut self,
        rec: &mut Recorder,
        volume_id: &str,
        context: &std::collections::HashMap<String, String>,
    ) -> anyhow::Result<()> {
        let staging = self.staging.to_string_lossy().into_owned();
        let target = self.target.to_string_lossy().into_owned();
        let stage = csi::NodeStageVolumeRequest {
            volume_id: volume_id.to_owned(),
            staging_target_path: staging.clone(),
            volume_capability: Some(mount_capability()),
            volume_context: context.clone(),
            ..Default::default()
        };
        rec.time(1, self.node.node_stage_volume(stage)).await?;
        let publish = csi::NodePublishVolumeRequest {
            volume_id: volume_id.to_owned(),
            staging_target_path: staging.clone(),
            target_path: target.clone(),
            volume_capability: Some(mount_capability()),
            volume_context: context.clone(),
            ..Default::default()
        };
        rec.time(2, self.node.node_publish_volume(publish)).await?;
        let unpublish = csi::NodeUnpublishVolumeRequest {
            volume_id: volume_id.to_owned(),
            target_path: target,
        };
        rec.time(3, self.node.node_unpublish_volume(unpublish))
            .await?;
        let unstage = csi::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_owned(),
            staging_target_path: staging,
        };
        rec.time(4, self.node.node_unstage_volume(unstage)).await?;
        Ok(())
    }

    async fn cycle(&mut self, rec: &mut Recorder, n: u64, warmup: bool) -> anyhow::Result<()> {
        let name = format!(
            "{}-{}-{}{n}",
            self.run,
            self.id,
            if warmup { "w" } else { "" }
        );
        match self.mix {
            Mix::Controller => {
                let (id, _) = self.create(rec, name).await?;
                self.delete(rec, id).await
            }
            Mix::Node => {
                let (id, context) = self.volume.clone().context("no volume")?;
                self.node_cycle(rec, &id, &context).await
            }
            Mix::All => {
                let (id, context) = self.create(rec, name).await?;
                self.node_cycle(rec, &id, &context).await?;
                self.delete(rec, id).await
            }
            Mix::Probe => {
                rec.time(6, self.identity.probe(csi::ProbeRequest {}))
                    .await?;
                Ok(())
            }
            Mix::Floor => bail!("the floor mix makes no RPCs"),
        }
    }

    /// Best effort after a failure: undo what may be left of a node cycle.
    async fn clean_up(&mut self, volume_id: &str) {
        let _ = self
            .node
            .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                volume_id: volume_id.to_owned(),
                target_path: self.target.to_string_lossy().into_owned(),
            })
            .await;
        let _ = self
            .node
            .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                volume_id: volume_id.to_owned(),
                staging_target_path: self.staging.to_string_lossy().into_owned(),
            })
            .await;
    }
}

struct Outcome {
    recorder: Recorder,
    failed: bool,
    /// When this caller's last measured cycle ended.
    ended: Instant,
}

#[allow(clippy::too_many_arguments)]
async fn run_caller(
    mut caller: Caller,
    warmup: u64,
    next: Arc<AtomicU64>,
    cycles: u64,
    deadline: Arc<std::sync::OnceLock<Option<Instant>>>,
    start: Arc<tokio::sync::Barrier>,
) -> Outcome {
    let mut rec = Recorder::new();
    let mut failed = false;
    if caller.mix == Mix::Node {
        let name = format!("{}-{}-node", caller.run, caller.id);
        match caller.create(&mut rec, name).await {
            Ok(volume) => caller.volume = Some(volume),
            Err(_) => failed = true,
        }
    }
    for n in 0..warmup {
        if failed {
            break;
        }
        failed = caller.cycle(&mut rec, n, true).await.is_err();
    }
    rec.errors.iter_mut().for_each(|e| *e = 0);
    // Everyone waits here, failed or not, so the barrier releases.
    start.wait().await;
    rec.enabled = true;
    let deadline = deadline.get().copied().flatten();
    while !failed {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let n = next.fetch_add(1, Ordering::Relaxed);
        if n >= cycles {
            break;
        }
        failed = caller.cycle(&mut rec, n, false).await.is_err();
    }
    rec.enabled = false;
    let ended = Instant::now();
    if failed && let Some((id, _)) = caller.volume.clone() {
        caller.clean_up(&id).await;
    }
    if let Some((id, _)) = caller.volume.take() {
        // Not recorded (`rec` is disabled), but counted as issued.
        if caller.delete(&mut rec, id).await.is_err() {
            failed = true;
        }
    }
    Outcome {
        recorder: rec,
        failed,
        ended,
    }
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.concurrency == 0 || cli.connections == 0 || cli.threads == 0 {
        bail!("--concurrency, --connections and --threads must be at least 1");
    }
    if cli.endpoint.is_none() && cli.mix != Mix::Floor {
        bail!("--endpoint is needed (all mixes but floor talk to a driver)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads)
        .enable_all()
        .build()?;
    let (owned, dir) = match &cli.dir {
        Some(dir) => (false, dir.clone()),
        None => (
            true,
            std::env::temp_dir().join(format!("csi-load.{}", std::process::id())),
        ),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = if cli.mix == Mix::Floor {
        run_floor(&cli, &dir)
    } else {
        runtime.block_on(run(&cli, &dir))
    };
    if owned {
        remove_tree(&dir);
    }
    result
}

/// Removes `dir` unless something is still mounted under it (never crosses
/// into a mount: a leftover bind mount would point at the driver's data).
fn remove_tree(dir: &Path) {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split(' ').nth(4))
                .any(|m| Path::new(m).starts_with(dir))
        })
        .unwrap_or(true);
    if mounted {
        eprintln!(
            "csi-load: something is still mounted under {}; left in place",
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(dir);
    }
}

async fn run(cli: &Cli, dir: &Path) -> anyhow::Result<()> {
    let endpoint = cli.endpoint.as_deref().context("--endpoint is needed")?;
    let socket = PathBuf::from(endpoint.trim_start_matches("unix://"));
    let mut channels = Vec::new();
    for _ in 0..cli.connections {
        channels.push(
            pav_csi::client::connect(&socket)
                .await
                .with_context(|| format!("connecting to {}", socket.display()))?,
        );
    }
    if matches!(cli.mix, Mix::Node | Mix::All) {
        let caps = NodeClient::new(channels[0].clone())
            .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
            .await?
            .into_inner();
        let stages = caps.capabilities.iter().any(|c| {
            matches!(
                &c.r#type,
                Some(csi::node_service_capability::Type::Rpc(rpc))
                    if rpc.r#type == csi::node_service_capability::rpc::Type::StageUnstageVolume as i32
            )
        });
        if !stages {
            bail!("the driver does not advertise STAGE_UNSTAGE_VOLUME");
        }
    }

    let run = format!(
        "load-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Arc::new(std::sync::OnceLock::new());
    let start = Arc::new(tokio::sync::Barrier::new(cli.concurrency + 1));
    let mut tasks = Vec::new();
    for id in 0..cli.concurrency {
        let own = dir.join(format!("caller-{id}"));
        let staging = own.join("staging");
        let target_parent = own.join("pod");
        std::fs::create_dir_all(&staging)?;
        std::fs::create_dir_all(&target_parent)?;
        let channel = channels[id % channels.len()].clone();
        let caller = Caller {
            id,
            run: run.clone(),
            identity: IdentityClient::new(channel.clone()),
            controller: ControllerClient::new(channel.clone()),
            node: NodeClient::new(channel),
            staging,
            target: target_parent.join("mount"),
            mix: cli.mix,
            volume: None,
        };
        tasks.push(tokio::spawn(run_caller(
            caller,
            cli.warmup,
            next.clone(),
            cli.cycles,
            deadline.clone(),
            start.clone(),
        )));
    }
    // Fix the deadline before releasing the callers.
    let _ = deadline.set(
        cli.duration
            .map(|s| Instant::now() + Duration::from_secs_f64(s)),
    );
    start.wait().await;
    let began = Instant::now();
    let mut total = Recorder::new();
    let mut failed = false;
    let mut ended = began;
    for task in tasks {
        let outcome = task.await?;
        failed |= outcome.failed;
        ended = ended.max(outcome.ended);
        total.merge(&outcome.recorder);
    }
    // The measured phase ends when the last caller's last measured cycle
    // does (deleting the node-cycle volumes afterwards is outside it).
    let seconds = ended.duration_since(began).as_secs_f64();
    finish(cli, &total, seconds, failed)
}

/// Reports, and fails when any call did.
fn finish(cli: &Cli, total: &Recorder, seconds: f64, failed: bool) -> anyhow::Result<()> {
    report(cli, total, seconds, failed);
    if failed {
        bail!(
            "some RPCs failed; first: {}",
            total.first_error.as_deref().unwrap_or("(unknown)")
        );
    }
    Ok(())
}

/// One floor caller's paths: what it binds on its staging path, the
/// staging path, the target.
struct FloorPaths {
    source: PathBuf,
    staging: PathBuf,
    target: PathBuf,
}

impl FloorPaths {
    /// The mount system calls of one pav-csi node cycle, each timed alone.
    fn cycle(&self, rec: &mut Recorder) -> anyhow::Result<()> {
        rec.time_syscall(BIND_STAGE, || {
            rustix::mount::mount_bind(&self.source, &self.staging)
        })?;
        rec.time_syscall(BIND_PUBLISH, || {
            rustix::mount::mount_bind(&self.staging, &self.target)
        })?;
        rec.time_syscall(UMOUNT_PUBLISH, || {
            rustix::mount::unmount(&self.target, rustix::mount::UnmountFlags::empty())
        })?;
        rec.time_syscall(UMOUNT_STAGE, || {
            rustix::mount::unmount(&self.staging, rustix::mount::UnmountFlags::empty())
        })
    }

    /// Best effort after a failure: unmounts what a cycle may have left.
    fn clean_up(&self) {
        for path in [&self.target, &self.staging] {
            while rustix::mount::unmount(path, rustix::mount::UnmountFlags::empty()).is_ok() {}
        }
    }
}

/// `--mix floor`: a thread per caller, on its own directories under `dir`.
fn run_floor(cli: &Cli, dir: &Path) -> anyhow::Result<()> {
    let mut callers = Vec::new();
    for id in 0..cli.concurrency {
        let own = dir.join(format!("caller-{id}"));
        let paths = FloorPaths {
            source: cli.source.clone().unwrap_or_else(|| own.join("staged")),
            staging: own.join("staging"),
            target: own.join("pod").join("mount"),
        };
        for path in [&paths.source, &paths.staging, &paths.target] {
            std::fs::create_dir_all(path)
                .with_context(|| format!("creating {}", path.display()))?;
        }
        callers.push(paths);
    }
    let next = AtomicU64::new(0);
    let start = std::sync::Barrier::new(cli.concurrency + 1);
    let deadline = std::sync::OnceLock::new();
    let (outcomes, began) = std::thread::scope(|scope| {
        let threads: Vec<_> = callers
            .iter()
            .map(|paths| {
                let (next, start, deadline) = (&next, &start, &deadline);
                scope.spawn(move || {
                    let mut rec = Recorder::new();
                    let mut failed = false;
                    for _ in 0..cli.warmup {
                        if failed {
                            break;
                        }
                        failed = paths.cycle(&mut rec).is_err();
                    }
                    rec.errors.iter_mut().for_each(|e| *e = 0);
                    // Everyone waits here, failed or not, so the barrier releases.
                    start.wait();
                    rec.enabled = true;
                    let deadline: Option<Instant> = deadline.get().copied().flatten();
                    while !failed {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            break;
                        }
                        if next.fetch_add(1, Ordering::Relaxed) >= cli.cycles {
                            break;
                        }
                        failed = paths.cycle(&mut rec).is_err();
                    }
                    rec.enabled = false;
                    let ended = Instant::now();
                    if failed {
                        paths.clean_up();
                    }
                    Outcome {
                        recorder: rec,
                        failed,
                        ended,
                    }
                })
            })
            .collect();
        let _ = deadline.set(
            cli.duration
                .map(|s| Instant::now() + Duration::from_secs_f64(s)),
        );
        start.wait();
        let began = Instant::now();
        let outcomes: Vec<_> = threads
            .into_iter()
            .map(|t| t.join().expect("a floor caller panicked"))
            .collect();
        (outcomes, began)
    });
    let mut total = Recorder::new();
    let mut failed = false;
    let mut ended = began;
    for outcome in &outcomes {
        failed |= outcome.failed;
        ended = ended.max(outcome.ended);
        total.merge(&outcome.recorder);
    }
    finish(
        cli,
        &total,
        ended.duration_since(began).as_secs_f64(),
        failed,
    )
}

fn report(cli: &Cli, rec: &Recorder, seconds: f64, failed: bool) {
    let mut rpcs = BTreeMap::new();
    let mut all = 0u64;
    println!(
        "{:<22} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "rpc", "count", "rps", "p50 us", "p99 us", "mean us", "max us"
    );
    for (i, name) in RPCS.iter().enumerate() {
        let h = &rec.histograms[i];
        if h.is_empty() && rec.errors[i] == 0 {
            continue;
        }
        all += h.len();
        let rps = h.len() as f64 / seconds.max(1e-9);
        let (p50, p99) = (
            micros(h.value_at_quantile(0.5)),
            micros(h.value_at_quantile(0.99)),
        );
        println!(
            "{:<22} {:>8} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            name,
            h.len(),
            rps,
            p50,
            p99,
            h.mean() / 1000.0,
            micros(h.max())
        );
        rpcs.insert(
            *name,
            serde_json::json!({
                "count": h.len(),
                "errors": rec.errors[i],
                "rps": rps,
                "p50_us": p50,
                "p99_us": p99,
                "mean_us": h.mean() / 1000.0,
                "max_us": micros(h.max()),
            }),
        );
    }
    let rps = all as f64 / seconds.max(1e-9);
    println!(
        "{:<22} {:>8} {:>10.0}   ({} callers, {:.2} s)",
        "all", all, rps, cli.concurrency, seconds
    );
    let line = serde_json::json!({
        "label": cli.label,
        "mix": cli.mix.name(),
        "concurrency": cli.concurrency,
        "connections": cli.connections,
        "seconds": seconds,
        "rpcs_total": all,
        "rpcs_issued": rec.issued,
        "rps": rps,
        "errors": rec.errors.iter().sum::<u64>(),
        "failed": failed,
        "rpcs": rpcs,
    });
    println!("{line}");
}
