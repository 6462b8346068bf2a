//! `pav check`, `pav render` and `pav crd`: the commands that need no cluster.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::{
    CompiledProvisioner, CreationContext, Phase, ProvisioningMode, PvcMap, StagingContext,
    ValidationContext, samples,
};
use serde::Serialize;

use crate::pods::{PodTarget, build_pod};

/// Pods-as-Volumes: volume provisioners written as pod templates.
#[derive(Debug, Parser)]
#[command(name = "pav", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check PavProvisioner files: schema, the guide's rules, and that every
    /// template compiles. Prints each problem with its field path; exits 1 on
    /// any problem.
    Check {
        /// PavProvisioner YAML files (several documents per file allowed).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Evaluate one phase of a PavProvisioner and print it as YAML, with the
    /// complete pods PaV would create. Objects not given are built-in samples.
    Render {
        /// The PavProvisioner YAML file.
        file: PathBuf,
        /// Which phase to evaluate.
        /// (validation, creation, deletion, staging or unstaging)
        #[arg(long)]
        phase: Phase,
        /// The PersistentVolumeClaim (default: a 1Gi ReadWriteOnce sample claim).
        #[arg(long)]
        pvc: Option<PathBuf>,
        /// The StorageClass (default: a sample class without parameters).
        #[arg(long)]
        sc: Option<PathBuf>,
        /// The PersistentVolume (default: the sample claim's volume).
        #[arg(long)]
        pv: Option<PathBuf>,
        /// The Node (default: `sample-node`).
        #[arg(long)]
        node: Option<PathBuf>,
        /// Evaluate validation for static provisioning (from --pv) rather
        /// than dynamic (implied when the provisioner is Static only).
        #[arg(long = "static")]
        static_provisioning: bool,
        /// Stage read-only.
        #[arg(long)]
        read_only: bool,
        /// More claims that `get_pvc()` may return (YAML, several documents allowed).
        #[arg(long = "claims")]
        claims: Vec<PathBuf>,
    },
    /// Print the PavProvisioner CustomResourceDefinition, generated from the
    /// Rust types.
    Crd,
    /// Print everything `kubectl apply -f` needs to install pav: namespace,
    /// CRD, RBAC and the controller Deployment.
    Manifests(crate::manifests::Args),
    /// Run the controller that turns PavProvisioner objects into CSI drivers.
    Controller(crate::controller::Args),
    /// Run the CSI controller service of one PavProvisioner (creation,
    /// deletion and validation pods).
    CsiController(crate::csi::ControllerArgs),
    /// Run the CSI node service of one PavProvisioner on this node (staging
    /// and unstaging pods, bind mounts).
    CsiNode(crate::csi::NodeArgs),
}

/// Runs a command, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check { files } => check(&files, out),
        Command::Render {
            file,
            phase,
            pvc,
            sc,
            pv,
            node,
            static_provisioning,
            read_only,
            claims,
        } => {
            let objects = Objects {
                pvc: load_or(pvc.as_deref(), samples::pvc)?,
                sc: load_or(sc.as_deref(), samples::storage_class)?,
                pv: load_or(pv.as_deref(), samples::pv)?,
                node: load_or(node.as_deref(), samples::node)?,
                claims: claims
                    .iter()
                    .map(|path| load_all::<PersistentVolumeClaim>(path))
                    .collect::<anyhow::Result<Vec<_>>>()?
                    .into_iter()
                    .flatten()
                    .collect(),
            };
            render(&file, phase, &objects, static_provisioning, read_only, out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Manifests(args) => {
            out.write_all(crate::manifests::render(&args)?.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Controller(args) => {
            runtime()?.block_on(crate::controller::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CsiController(args) => {
            runtime()?.block_on(crate::csi::run_controller(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CsiNode(args) => {
            runtime()?.block_on(crate::csi::run_node(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crd => {
            let crd = pav_templates::PavProvisioner::definition();
            out.write_all(serde_yaml::to_string(&crd)?.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn check(files: &[PathBuf], out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut problems = 0usize;
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let documents = split_documents(&text);
        if documents.is_empty() {
            writeln!(out, "{}: no PavProvisioner in file", file.display())?;
            problems += 1;
        }
        for document in documents {
            match CompiledProvisioner::from_yaml(&document) {
                Ok(provisioner) => writeln!(
                    out,
                    "{}: provisioner {:?} is valid",
                    file.display(),
                    provisioner.name()
                )?,
                Err(found) => {
                    for problem in &found.0 {
                        writeln!(out, "{}: {problem}", file.display())?;
                    }
                    problems += found.0.len();
                }
            }
        }
    }
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Splits a YAML stream into its non-empty documents.
fn split_documents(text: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            documents.push(String::new());
            continue;
        }
        let current = documents.last_mut().expect("never empty");
        current.push_str(line);
        current.push('\n');
    }
    documents
        .into_iter()
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .collect()
}

/// The Kubernetes objects a phase is evaluated against.
struct Objects {
    pvc: PersistentVolumeClaim,
    sc: StorageClass,
    pv: PersistentVolume,
    node: Node,
    claims: Vec<PersistentVolumeClaim>,
}

fn load_or<T: serde::de::DeserializeOwned>(
    path: Option<&Path>,
    sample: fn() -> T,
) -> anyhow::Result<T> {
    match path {
        None => Ok(sample()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            serde_yaml::from_str(&text).with_context(|| {
                format!(
                    "{} is not a valid {}",
                    path.display(),
                    std::any::type_name::<T>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("object")
                )
            })
        }
    }
}

fn load_all<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    split_documents(&text)
        .iter()
        .map(|document| {
            serde_yaml::from_str(document)
                .with_context(|| format!("{}: invalid object", path.display()))
        })
        .collect()
}

/// What `pav render` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rendered<T: Serialize> {
    provisioner: String,
    phase: String,
    evaluated: T,
    pods: Vec<Pod>,
}

fn render(
    file: &Path,
    phase: Phase,
    objects: &Objects,
    static_provisioning: bool,
    read_only: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let provisioner =
        CompiledProvisioner::from_yaml(&text).map_err(|problems| anyhow::anyhow!("{problems}"))?;
    let name = provisioner.name().to_owned();
    let lookup = Arc::new(PvcMap::from_iter(
        std::iter::once(objects.pvc.clone()).chain(objects.claims.iter().cloned()),
    ));
    let claim_uid = objects.pvc.metadata.uid.clone().unwrap_or_default();
    let handle = objects
        .pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.volume_handle.clone())
        .unwrap_or_default();
    let node_name = objects.node.metadata.name.clone().unwrap_or_default();
    let pods_for = |template: Option<&PodTemplateSpec>| -> Vec<Pod> {
        let (volume, node) = match phase {
            Phase::Staging | Phase::Unstaging => (handle.as_str(), Some(node_name.as_str())),
            _ => (claim_uid.as_str(), None),
        };
        let target = PodTarget {
            provisioner: &name,
            phase,
            volume,
            node,
        };
        template
            .map(|t| build_pod(t, &target))
            .into_iter()
            .collect()
    };

    let yaml = match phase {
        Phase::Validation => {
            let static_only = !provisioner
                .provisioning_modes()
                .contains(&ProvisioningMode::Dynamic);
            let context = if static_provisioning || static_only {
                ValidationContext::static_pv(&objects.pv)?
            } else {
                ValidationContext::dynamic(&objects.pvc, &objects.sc)?
            }
            .with_pvc_lookup(lookup);
            let evaluated = provisioner.render_validation(&context)?;
            let pods = pods_for(evaluated.pod_template.as_ref());
            to_yaml(&name, phase, evaluated, pods)?
        }
        Phase::Creation | Phase::Deletion => {
            if !provisioner
                .provisioning_modes()
                .contains(&ProvisioningMode::Dynamic)
            {
                bail!(
                    "provisioner {name:?} has no {phase} phase: spec.provisioningModes does not contain Dynamic"
                );
            }
            let context = CreationContext::new(&objects.pvc, &objects.sc)?.with_pvc_lookup(lookup);
            if phase == Phase::Creation {
                let evaluated = provisioner.render_creation(&context)?;
                let pods = pods_for(evaluated.pod_template.as_ref());
                to_yaml(&name, phase, evaluated, pods)?
            } else {
                let evaluated = provisioner.render_deletion(&context)?;
                let pods = pods_for(evaluated.pod_template.as_ref());
                to_yaml(&name, phase, evaluated, pods)?
            }
        }
        Phase::Staging | Phase::Unstaging => {
            let context = StagingContext::new(&objects.pvc, &objects.pv, &objects.node, read_only)?
                .with_pvc_lookup(lookup);
            if phase == Phase::Staging {
                let evaluated = provisioner.render_staging(&context)?;
                let pods = pods_for(Some(&evaluated.pod_template));
                to_yaml(&name, phase, evaluated, pods)?
            } else {
                let evaluated = provisioner.render_unstaging(&context)?;
                let pods = pods_for(evaluated.pod_template.as_ref());
                to_yaml(&name, phase, evaluated, pods)?
            }
        }
    };
    out.write_all(yaml.as_bytes())?;
    Ok(())
}

fn to_yaml<T: Serialize>(
    provisioner: &str,
    phase: Phase,
    evaluated: T,
    pods: Vec<Pod>,
) -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(&Rendered {
        provisioner: provisioner.to_owned(),
        phase: phase.name().to_owned(),
        evaluated,
        pods,
    })?)
}
