//! Fault injection into the local test cluster's own processes (those
//! `scripts/cluster-up` started; their pids are in `<state>/pids/*.pid`,
//! their output in `<state>/logs/*.log`).

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

fn pid_file(component: &str) -> PathBuf {
    crate::cluster_state_dir()
        .join("pids")
        .join(format!("{component}.pid"))
}

/// Process id of a cluster component (`etcd`, `kube-apiserver`, ...).
pub fn pid_of(component: &str) -> anyhow::Result<u32> {
    let file = pid_file(component);
    let pid = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
    let pid: u32 = pid
        .trim()
        .parse()
        .with_context(|| format!("{}", file.display()))?;
    if !running(pid) {
        bail!("{component} (pid {pid}) is not running");
    }
    Ok(pid)
}

/// Whether process `pid` still runs. A process this test restarted earlier
/// is the test's child and stays a zombie (state `Z`) once it exits, as
/// nothing waits for it: that counts as gone.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) to process `pid`.
pub fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()?;
    if !status.success() {
        bail!("kill -{signal} {pid}: {status}");
    }
    Ok(())
}

/// Stops `component` with SIGTERM (SIGKILL after 20 s) and starts it again
/// with the same command line, environment and working directory, its
/// output appended to its log and its new pid recorded, so
/// `scripts/cluster-down` still finds it. Returns once the new process runs;
/// readiness is the caller's to wait for.
pub fn restart(component: &str) -> anyhow::Result<u32> {
    let pid = pid_of(component)?;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .filter(|part| !part.is_empty())
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect()
    };
    let argv = split(std::fs::read(proc_dir.join("cmdline"))?);
    let environment = split(std::fs::read(proc_dir.join("environ"))?);
    let cwd = std::fs::read_link(proc_dir.join("cwd"))?;
    let Some((program, args)) = argv.split_first() else {
        bail!("{component} (pid {pid}) has an empty command line");
    };

    signal(pid, "TERM")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut killed = false;
    while running(pid) {
        if Instant::now() > deadline && !killed {
            signal(pid, "KILL")?;
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    let log = OpenOptions::new().create(true).append(true).open(
        crate::cluster_state_dir()
            .join("logs")
            .join(format!("{component}.log")),
    )?;
    // A session of its own, as cluster-up's setsid gives the components:
    // it must outlive the test process and whatever ends that process's
    // session (a CI step, a terminal). setsid(1) execs the program in
    // place (the child is no group leader), so the pid is the program's.
    let child = Command::new("setsid")
        .arg(program)
        .args(args)
        .env_clear()
        .envs(environment.iter().filter_map(|kv| kv.split_once('=')))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    std::fs::write(pid_file(component), format!("{}\n", child.id()))?;
    Ok(child.id())
}

/// Freezes `component` (SIGSTOP) for `duration`, then lets it go on
/// (SIGCONT): every request it gets meanwhile waits, as with a very slow
/// disk under etcd.
pub async fn freeze(component: &str, duration: Duration) -> anyhow::Result<()> {
    let pid = pid_of(component)?;
    signal(pid, "STOP")?;
    tokio::time::sleep(duration).await;
    signal(pid, "CONT")
}

/// Makes `component` slow for `duration` rather than stopped: in every
/// `period` it is frozen (SIGSTOP) for `stopped`, so each request it
/// serves meanwhile waits up to `stopped` and its throughput drops to
/// `1 - stopped / period`, as with a disk that answers late under etcd.
pub async fn slow(
    component: &str,
    stopped: Duration,
    period: Duration,
    duration: Duration,
) -> anyhow::Result<()> {
    let pid = pid_of(component)?;
    let until = tokio::time::Instant::now() + duration;
    let mut result = Ok(());
    while result.is_ok() && tokio::time::Instant::now() < until {
        result = signal(pid, "STOP");
        tokio::time::sleep(stopped).await;
        // Always let it go on, whatever happened to the STOP.
        let resumed = signal(pid, "CONT");
        result = result.and(resumed);
        tokio::time::sleep(period.saturating_sub(stopped)).await;
    }
    result
}

/// Host pids of the processes whose command line contains `args` in a row
/// (a container's process too: the tests run as root on the node).
pub fn pids_running(args: &[&str]) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let wanted: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            argv.windows(wanted.len()).any(|w| w == wanted.as_slice())
        })
        .collect()
}

/// Runs `scripts/cluster/node ACTION K` (`stop`, `start`, `remove`) on
/// extra node K of the test cluster: `stop` stops its kubelet and
/// containerd (its containers keep running, as on a machine whose kubelet
/// died), `start` brings them back and waits until the node is Ready.
pub fn node(action: &str, k: u32) -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster/node");
    let status = Command::new("bash")
        .args([script, action, &k.to_string()])
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("{script} {action} {k}"))?;
    if !status.success() {
        bail!("scripts/cluster/node {action} {k}: {status}");
    }
    Ok(())
}
