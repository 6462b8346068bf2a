//! `pav check`, `pav render` and `pav crd`: the commands that need no cluster.
//! `pav render` reads its flags and files here and shows the phase as its
//! module of [`crate::phases`] does.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use pav_templates::{CompiledProvisioner, Phase, samples};

use crate::phases::{Objects, Origin, Origins, RecordedSnapshot, RenderOptions, sample_client_pod};

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
        #[arg(long, value_parser = phase_parser())]
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
        /// The Node (default: `sample-node`); storage capacity is evaluated
        /// for its topology segment.
        #[arg(long)]
        node: Option<PathBuf>,
        /// The VolumeAttributesClass whose `parameters` the claim asks
        /// for: `mutableParams` at creation, and the parameters a
        /// modification sets (default: none; `mode: ro` for modification).
        #[arg(long)]
        vac: Option<PathBuf>,
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
        /// The client pod that uses the volume, for staging and unstaging
        /// (default: a sample pod in the claim's namespace).
        #[arg(long)]
        client_pod: Option<PathBuf>,
        /// The kubelet target path the volume is published at, for staging
        /// and unstaging (default: kubelet's path for the client pod and
        /// volume).
        #[arg(long)]
        target_path: Option<String>,
        /// The VolumeSnapshotContent (snapshot phases) or
        /// VolumeGroupSnapshotContent (group snapshot phases) as the cluster
        /// records it: the name csi-snapshotter gives the snapshot, its
        /// handle and source, a group's members (default: a snapshot of
        /// the claim's volume named after the claim's UID).
        #[arg(long)]
        snapshot_content: Option<PathBuf>,
        /// The VolumeSnapshotClass or VolumeGroupSnapshotClass whose
        /// `parameters` a snapshot is taken with (default: none).
        #[arg(long)]
        snapshot_class: Option<PathBuf>,
        /// The object the claim's `dataSourceRef` names, for population
        /// (default: an object of that kind with only a name).
        #[arg(long)]
        data_source: Option<PathBuf>,
        /// When the health check runs, as RFC 3339 (default: the Unix
        /// epoch): its pod is named after the round of `every` this is in.
        #[arg(long, value_parser = parse_time)]
        time: Option<std::time::SystemTime>,
        /// Namespace of pods whose template names none, as the driver's
        /// `--namespace`.
        #[arg(long, default_value = crate::pods::DEFAULT_NAMESPACE)]
        namespace: String,
    },
    /// Print the PavProvisioner CustomResourceDefinition, generated from the
    /// Rust types.
    Crd,
    /// Print everything `kubectl apply -f` needs to install pav: namespace,
    /// CRD, RBAC and the controller Deployment.
    Manifests(crate::manifests::Args),
    /// Run the controller that turns PavProvisioner objects into CSI drivers.
    Controller(crate::operator::Args),
    /// Run the CSI controller service of one PavProvisioner (creation,
    /// deletion and validation pods).
    CsiController(crate::csi::ControllerArgs),
    /// Run the CSI node service of one PavProvisioner on this node (staging
    /// and unstaging pods, bind mounts).
    CsiNode(crate::csi::NodeArgs),
    /// Exit 1, naming them and the `kubectl delete` to run, while
    /// PavProvisioners the controller serves exist: the Helm chart's
    /// pre-delete hook, so `helm uninstall` cannot strand their drivers.
    UninstallCheck(crate::uninstall_check::Args),
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
            vac,
            static_provisioning,
            read_only,
            claims,
            client_pod,
            target_path,
            snapshot_content,
            snapshot_class,
            data_source,
            time,
            namespace,
        } => {
            let objects = Objects {
                pvc: load_or(pvc.as_deref(), samples::pvc)?,
                sc: load_or(sc.as_deref(), samples::storage_class)?,
                pv: load_or(pv.as_deref(), samples::pv)?,
                node: load_or(node.as_deref(), samples::node)?,
                client_pod: load_or(client_pod.as_deref(), sample_client_pod)?,
                mutable_parameters: match vac.as_deref() {
                    Some(path) => load_or(Some(path), VolumeAttributesClass::default)?
                        .parameters
                        .unwrap_or_default(),
                    None => Default::default(),
                },
                vac_given: vac.is_some(),
                target_path,
                snapshot: match snapshot_content.as_deref() {
                    Some(path) => Some(load_content(path)?),
                    None => None,
                },
                snapshot_parameters: match snapshot_class.as_deref() {
                    Some(path) => {
                        crate::snapshots::requested_parameters(&load_class_parameters(path)?)
                    }
                    None => Default::default(),
                },
                data_source: match data_source.as_deref() {
                    Some(path) => Some(parse_document::<serde_json::Value>(
                        path,
                        None,
                        "object",
                        &read_text(path)?,
                    )?),
                    None => None,
                },
                claims: claims
                    .iter()
                    .map(|path| load_all::<PersistentVolumeClaim>(path))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .flatten()
                    .collect(),
                origins: Origins {
                    pvc: pvc.map(|path| Origin::new("--pvc", path)),
                    sc: sc.map(|path| Origin::new("--sc", path)),
                    pv: pv.map(|path| Origin::new("--pv", path)),
                    node: node.map(|path| Origin::new("--node", path)),
                },
            };
            let options = RenderOptions {
                static_provisioning,
                read_only,
                namespace,
                time: time.unwrap_or(std::time::UNIX_EPOCH),
            };
            let yaml = crate::phases::render(&read_text(&file)?, phase, &objects, &options)?;
            out.write_all(yaml.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Manifests(args) => {
            out.write_all(crate::manifests::render(&args)?.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Controller(args) => {
            runtime()?.block_on(crate::operator::run(args))?;
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
        Command::UninstallCheck(args) => {
            Ok(runtime()?.block_on(crate::uninstall_check::run(args, out))?)
        }
        Command::Crd => {
            let crd = pav_templates::PavProvisioner::definition();
            out.write_all(serde_yaml::to_string(&crd)?.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The drivers' runtime. Its threads, the blocking ones where templates
/// are rendered included, have the stack a render needs and 2 MiB (tokio's
/// default) for the rest, so renders run on them without mapping a stack
/// each time. Only the pages a thread touches take memory. Memory freed
/// after a burst goes back to the system ([`crate::memory`]).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    crate::memory::limit_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(pav_templates::engine::RENDER_STACK_BYTES + (2 << 20))
        .enable_all()
        .build()?;
    runtime.spawn(crate::memory::trim_periodically(crate::memory::TRIM_PERIOD));
    Ok(runtime)
}

fn check(files: &[PathBuf], out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut problems = 0usize;
    for file in files {
        let text = read_text(file)?;
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

/// The most pav reads from one input file (a PavProvisioner or an object
/// given to `pav render`): far more than any real object, little enough to
/// hold in memory several times over.
const MAX_INPUT_FILE_BYTES: u64 = 4 << 20;

/// Why an object file given to `pav render` cannot be used.
#[derive(Debug, thiserror::Error)]
enum ObjectFileError {
    /// The file cannot be read (or is not UTF-8).
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_INPUT_FILE_BYTES`].
    #[error("{} is larger than {MAX_INPUT_FILE_BYTES} bytes, the most pav reads from a file", path.display())]
    TooLarge { path: PathBuf },
    /// A document is not YAML, or expands past the alias budget or nests
    /// past the flow depth limit of pav-templates.
    #[error("{}{}: not a valid YAML {kind}: {message}", path.display(), document_label(*document))]
    Yaml {
        path: PathBuf,
        /// 1-based document number, in files that may hold several.
        document: Option<usize>,
        kind: &'static str,
        message: String,
    },
    /// A document does not deserialize as the expected kind.
    #[error("{}{}: not a valid {kind}", path.display(), document_label(*document))]
    Parse {
        path: PathBuf,
        /// 1-based document number, in files that may hold several.
        document: Option<usize>,
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// An object of another kind than the option reads.
    #[error("{}: a {found}, not a {expected}", path.display())]
    Kind {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
    /// An object without `metadata.name`: `{}` deserializes as an empty
    /// object, which would render as if a real claim had been given.
    #[error(
        "{}{}: the {kind} has no metadata.name (is this a {kind}?)",
        path.display(),
        document_label(*document)
    )]
    Unnamed {
        path: PathBuf,
        document: Option<usize>,
        kind: &'static str,
    },
}

fn document_label(document: Option<usize>) -> String {
    document
        .map(|n| format!(", document {n}"))
        .unwrap_or_default()
}

/// Reads a YAML file. A leading UTF-8 byte order mark, which editors on
/// Windows write, is dropped: YAML allows one there, but the document
/// splitting below and serde_yaml would take it for content.
fn read_text(path: &Path) -> Result<String, ObjectFileError> {
    use std::io::Read;
    let read_error = |source| ObjectFileError::Read {
        path: path.to_owned(),
        source,
    };
    let mut text = String::new();
    // One byte more than allowed tells a file at the limit from a larger
    // one (or an endless one, such as /dev/zero) without reading it all.
    std::fs::File::open(path)
        .map_err(read_error)?
        .take(MAX_INPUT_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_INPUT_FILE_BYTES {
        return Err(ObjectFileError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Parses one object of kind `T` and requires it to be named.
fn parse_object<T>(path: &Path, document: Option<usize>, text: &str) -> Result<T, ObjectFileError>
where
    T: serde::de::DeserializeOwned + k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    let object: T = parse_document(path, document, T::KIND, text)?;
    require_name(object.metadata(), path, document, T::KIND)?;
    Ok(object)
}

/// Parses one document as `kind`, `T` (a typed object, or a dynamic one
/// for a CRD's kinds).
fn parse_document<T: serde::de::DeserializeOwned>(
    path: &Path,
    document: Option<usize>,
    kind: &'static str,
    text: &str,
) -> Result<T, ObjectFileError> {
    // Through pav-templates' parser, so aliases and nesting are bounded as
    // in a PavProvisioner.
    let value =
        pav_templates::yaml::yaml_to_json(text).map_err(|message| ObjectFileError::Yaml {
            path: path.to_owned(),
            document,
            kind,
            message,
        })?;
    serde_json::from_value(value).map_err(|source| ObjectFileError::Parse {
        path: path.to_owned(),
        document,
        kind,
        source,
    })
}

fn require_name(
    metadata: &ObjectMeta,
    path: &Path,
    document: Option<usize>,
    kind: &'static str,
) -> Result<(), ObjectFileError> {
    match metadata.name.as_deref() {
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(ObjectFileError::Unnamed {
            path: path.to_owned(),
            document,
            kind,
        }),
    }
}

/// Reads a named object of a CRD, of one of two kinds (`expected` names
/// both in errors).
fn load_dynamic(
    path: &Path,
    [kind, other]: [&'static str; 2],
    expected: &'static str,
) -> Result<DynamicObject, ObjectFileError> {
    let object: DynamicObject = parse_document(path, None, expected, &read_text(path)?)?;
    let found = object
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default();
    if found != kind && found != other {
        return Err(ObjectFileError::Kind {
            path: path.to_owned(),
            expected,
            found: found.to_owned(),
        });
    }
    require_name(&object.metadata, path, None, expected)?;
    Ok(object)
}

/// `--snapshot-content`: the snapshot or group snapshot it records.
fn load_content(path: &Path) -> Result<RecordedSnapshot, ObjectFileError> {
    let content = load_dynamic(
        path,
        ["VolumeSnapshotContent", "VolumeGroupSnapshotContent"],
        "VolumeSnapshotContent or VolumeGroupSnapshotContent",
    )?;
    let driver = (content.data.pointer("/spec/driver"))
        .and_then(|d| d.as_str())
        .unwrap_or_default();
    let group = crate::snapshots::is_group(&content);
    let recorded = if group {
        crate::snapshots::recorded_group(&content, driver).map(|g| (g.handle, g.members))
    } else {
        crate::snapshots::recorded_snapshot(&content, driver)
            .map(|snapshot| (snapshot.handle.clone(), vec![snapshot]))
    };
    let (handle, members) = recorded.unwrap_or_default();
    Ok(RecordedSnapshot {
        path: path.to_owned(),
        group,
        name: crate::snapshots::requested_name(&content),
        handle: Some(handle).filter(|h| !h.is_empty()),
        members: (members.into_iter())
            .map(|m| (m.handle, Some(m.source).filter(|s| !s.is_empty())))
            .collect(),
    })
}

/// `--snapshot-class`: its `parameters`.
fn load_class_parameters(path: &Path) -> Result<BTreeMap<String, String>, ObjectFileError> {
    let class = load_dynamic(
        path,
        ["VolumeSnapshotClass", "VolumeGroupSnapshotClass"],
        "VolumeSnapshotClass or VolumeGroupSnapshotClass",
    )?;
    let parameters = class.data.get("parameters").cloned().unwrap_or_default();
    serde_json::from_value::<Option<BTreeMap<String, String>>>(parameters)
        .map(Option::unwrap_or_default)
        .map_err(|source| ObjectFileError::Parse {
            path: path.to_owned(),
            document: None,
            kind: "snapshot class's parameters",
            source,
        })
}

/// `--time`: an RFC 3339 time.
fn parse_time(text: &str) -> Result<std::time::SystemTime, String> {
    let time: k8s_openapi::jiff::Timestamp = text
        .parse()
        .map_err(|e| format!("not an RFC 3339 time ({e})"))?;
    Ok(time.into())
}

fn load_or<T>(path: Option<&Path>, sample: fn() -> T) -> Result<T, ObjectFileError>
where
    T: serde::de::DeserializeOwned + k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    match path {
        None => Ok(sample()),
        Some(path) => parse_object(path, None, &read_text(path)?),
    }
}

fn load_all<T>(path: &Path) -> Result<Vec<T>, ObjectFileError>
where
    T: serde::de::DeserializeOwned + k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    split_documents(&read_text(path)?)
        .iter()
        .enumerate()
        .map(|(index, document)| parse_object(path, Some(index + 1), document))
        .collect()
}

/// Parses `--phase`, listing every phase (from [`Phase::ALL`]) in `--help`
/// and in the error for an unknown one.
fn phase_parser() -> impl clap::builder::TypedValueParser<Value = Phase> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Phase::ALL.map(Phase::name))
        .map(|name| name.parse::<Phase>().expect("one of Phase::ALL's names"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use pav_templates::phase::{Staging, Unstaging};

    const HELLO_WORLD: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/hello-world/provisioner.yaml"
    );

    /// Runs `pav ARGS`, returning its output or its error as `{:#}` prints it.
    fn pav(args: &[&str]) -> Result<String, String> {
        let cli = Cli::try_parse_from(std::iter::once("pav").chain(args.iter().copied()))
            .expect("arguments parse");
        let mut out = Vec::new();
        match run(cli, &mut out) {
            Ok(_) => Ok(String::from_utf8(out).unwrap()),
            Err(err) => Err(format!("{err:#}")),
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    const BOM: &str = "\u{feff}";
    const CLAIM: &str = "metadata: {name: data, namespace: ns, uid: 5d2c8b1a}\nspec: {resources: {requests: {storage: 1Gi}}}\n";

    /// A byte order mark was taken for content: with `---` after it, for a
    /// second document.
    #[test]
    fn a_byte_order_mark_is_not_content() {
        let dir = tempfile::tempdir().unwrap();
        let provisioner = std::fs::read_to_string(HELLO_WORLD).unwrap();
        for text in [
            format!("{BOM}{provisioner}"),
            format!("{BOM}---\n{provisioner}"),
        ] {
            let file = write(dir.path(), "provisioner.yaml", &text);
            assert_eq!(
                pav(&["check", &file]).unwrap(),
                format!("{file}: provisioner \"hello-world\" is valid\n")
            );
            pav(&["render", &file, "--phase", "creation"]).unwrap();
        }
        for text in [format!("{BOM}{CLAIM}"), format!("{BOM}---\n{CLAIM}")] {
            let claim = write(dir.path(), "claim.yaml", &text);
            pav(&[
                "render",
                HELLO_WORLD,
                "--phase",
                "creation",
                "--pvc",
                &claim,
            ])
            .unwrap();
            pav(&[
                "render",
                HELLO_WORLD,
                "--phase",
                "creation",
                "--claims",
                &claim,
            ])
            .unwrap();
        }
    }

    /// `{}` is a valid, empty PersistentVolumeClaim to serde; staging
    /// rendered against it without a word.
    #[test]
    fn an_unnamed_object_is_refused_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = write(dir.path(), "empty.yaml", "{}\n");
        for phase in ["validation", "creation", "staging", "unstaging"] {
            assert_eq!(
                pav(&["render", HELLO_WORLD, "--phase", phase, "--pvc", &empty]),
                Err(format!(
                    "{empty}: the PersistentVolumeClaim has no metadata.name (is this a PersistentVolumeClaim?)"
                )),
                "{phase}"
            );
        }
        assert_eq!(
            pav(&[
                "render",
                HELLO_WORLD,
                "--phase",
                "staging",
                "--node",
                &empty
            ]),
            Err(format!(
                "{empty}: the Node has no metadata.name (is this a Node?)"
            ))
        );
        let claims = write(dir.path(), "claims.yaml", &format!("{CLAIM}---\n{{}}\n"));
        assert_eq!(
            pav(&[
                "render",
                HELLO_WORLD,
                "--phase",
                "creation",
                "--claims",
                &claims
            ]),
            Err(format!(
                "{claims}, document 2: the PersistentVolumeClaim has no metadata.name (is this a PersistentVolumeClaim?)"
            ))
        );
    }

    /// An object file went through serde_yaml alone: a 1 MB anchor aliased
    /// 4,000 times ran out of memory. And `pav check /dev/zero` read
    /// without end.
    #[test]
    fn object_files_have_the_alias_budget_and_a_size_limit() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = "x".repeat(1 << 20);
        let aliases = "*a, ".repeat(4000);
        let bomb = write(
            dir.path(),
            "bomb.yaml",
            &format!(
                "metadata: {{name: data, labels: {{a: &a {anchor}}}}}
spec: {{x: [{aliases}]}}
"
            ),
        );
        let err = pav(&["render", HELLO_WORLD, "--phase", "creation", "--pvc", &bomb]).unwrap_err();
        assert!(
            err.starts_with(&format!("{bomb}: not a valid YAML PersistentVolumeClaim")),
            "{err}"
        );
        assert!(err.contains("alias"), "{err}");

        let err = pav(&["check", "/dev/zero"]).unwrap_err();
        assert_eq!(
            err,
            format!(
                "/dev/zero is larger than {MAX_INPUT_FILE_BYTES} bytes, the most pav reads from a file"
            )
        );
        let just_over = write(
            dir.path(),
            "big.yaml",
            &"#".repeat(MAX_INPUT_FILE_BYTES as usize + 1),
        );
        assert!(
            pav(&["check", &just_over])
                .unwrap_err()
                .contains("is larger than")
        );
    }

    /// Errors about a claim named it `provisioner "PersistentVolumeClaim …"`.
    #[test]
    fn errors_about_an_object_name_its_file_not_a_provisioner() {
        let dir = tempfile::tempdir().unwrap();
        let no_uid = write(
            dir.path(),
            "no-uid.yaml",
            "metadata: {name: data}\nspec: {resources: {requests: {storage: 1Gi}}}\n",
        );
        assert_eq!(
            pav(&[
                "render",
                HELLO_WORLD,
                "--phase",
                "creation",
                "--pvc",
                &no_uid
            ]),
            Err(format!(
                "--pvc {no_uid}: PersistentVolumeClaim data, field metadata.uid: is required to name the volume"
            ))
        );
        let spaced = write(
            dir.path(),
            "spaced.yaml",
            "metadata: {name: data, uid: u}\nspec: {resources: {requests: {storage: \"1Gi \"}}}\n",
        );
        let error = pav(&[
            "render",
            HELLO_WORLD,
            "--phase",
            "creation",
            "--pvc",
            &spaced,
        ])
        .unwrap_err();
        assert!(
            error.starts_with(&format!(
                "--pvc {spaced}: PersistentVolumeClaim data, field spec.resources.requests.storage: \"1Gi \" is not a valid quantity: it contains whitespace"
            )),
            "{error}"
        );
        let missing = dir.path().join("missing.yaml");
        let missing = missing.to_str().unwrap();
        let error = pav(&[
            "render",
            HELLO_WORLD,
            "--phase",
            "creation",
            "--pvc",
            missing,
        ])
        .unwrap_err();
        assert!(
            error.starts_with(&format!("cannot read {missing}: ")),
            "{error}"
        );
    }

    /// `pav render` named the staging pod after the handle, the node
    /// plugin after the staging key (handle and target path): the preview
    /// was not the pod that runs.
    #[test]
    fn render_builds_the_staging_pod_the_node_plugin_builds() {
        let dir = tempfile::tempdir().unwrap();
        let client = write(
            dir.path(),
            "client.yaml",
            "metadata: {name: web-0, namespace: apps, uid: u-web}\n",
        );
        let rendered = pav(&[
            "render",
            HELLO_WORLD,
            "--phase",
            "staging",
            "--client-pod",
            &client,
            "--target-path",
            "/var/lib/kubelet/pods/u-web/volumes/kubernetes.io~csi/v/mount",
            "--namespace",
            "pav-system",
        ])
        .unwrap();
        let rendered: serde_json::Value = serde_yaml::from_str(&rendered).unwrap();
        let pod: Pod = serde_json::from_value(rendered["pods"][0].clone()).unwrap();

        let text = std::fs::read_to_string(HELLO_WORLD).unwrap();
        let provisioner = CompiledProvisioner::from_yaml(&text).unwrap();
        let context = samples::staging_context();
        let staging = provisioner.render::<Staging>(&context).unwrap();
        let unstaging = provisioner.render::<Unstaging>(&context).unwrap();
        let pv = samples::pv();
        let handle = pv.spec.unwrap().csi.unwrap().volume_handle;
        let claim = crate::pods::claim_name(&samples::pvc());
        let expected = crate::pods::PodOrigin {
            provisioner: "hello-world",
            owner: None,
            default_namespace: "pav-system",
        }
        .staging_pod(
            &staging,
            Some(&unstaging),
            &crate::pods::Publication {
                handle: &handle,
                target_path: "/var/lib/kubelet/pods/u-web/volumes/kubernetes.io~csi/v/mount",
                node: "sample-node",
                claim: &claim,
                pv: &pv.metadata.name.unwrap(),
                client: Some(("apps", "web-0", "u-web")),
                read_only: false,
                moved_to: None,
            },
        );
        assert_eq!(pod, expected);
        assert_eq!(pod.metadata.namespace.as_deref(), Some("pav-system"));
    }

    /// A provisioner whose snapshot, group snapshot and health pods echo
    /// what their context holds.
    const SNAPSHOTTING: &str = r#"
apiVersion: pav.albertofaria.github.io/v1alpha1
kind: PavProvisioner
metadata: {name: snapshotting}
spec:
  provisioningModes: [Dynamic]
  volumeCreation: {capacity: "{{ requestedMinCapacity }}"}
  volumeStaging:
    podTemplate:
      spec:
        containers: [{name: c, image: i}]
  snapshotCreation:
    podTemplate:
      spec:
        containers: [{name: c, image: i, command: ["{{ snapshotName }} {{ params | tojson }}"]}]
  snapshotDeletion:
    podTemplate:
      spec:
        containers: [{name: c, image: i, command: ["{{ snapshotHandle }} of {{ sourceHandle }}"]}]
  groupSnapshotCreation:
    podTemplate:
      spec:
        containers: [{name: c, image: i, command: ["{{ groupSnapshotName }} {{ params | tojson }}"]}]
  groupSnapshotDeletion:
    podTemplate:
      spec:
        containers: [{name: c, image: i, command: ["{{ groupSnapshotHandle }}: {{ snapshots | tojson }}"]}]
  volumeHealth:
    every: 1h
    podTemplate:
      spec:
        containers: [{name: c, image: i}]
"#;

    const CONTENT: &str = "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotContent\nmetadata: {name: snapcontent-1}\nspec:\n  driver: snapshotting\n  source: {volumeHandle: vol-1}\n  volumeSnapshotRef: {name: snap, namespace: ns, uid: 11111111-aaaa}\nstatus: {snapshotHandle: snap-handle-1}\n";
    const GROUP_CONTENT: &str = "apiVersion: groupsnapshot.storage.k8s.io/v1\nkind: VolumeGroupSnapshotContent\nmetadata: {name: groupcontent-1}\nspec:\n  driver: snapshotting\n  source: {volumeHandles: [vol-1, vol-2]}\n  volumeGroupSnapshotRef: {name: group, namespace: ns, uid: 22222222-bbbb}\nstatus:\n  volumeGroupSnapshotHandle: group-handle-1\n  volumeSnapshotInfoList:\n    - {snapshotHandle: member-1, volumeHandle: vol-1}\n    - {snapshotHandle: member-2, volumeHandle: vol-2}\n";
    const CLASS: &str = "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata: {name: class}\ndriver: snapshotting\ndeletionPolicy: Delete\nparameters:\n  note: kept\n  csi.storage.k8s.io/snapshotter-secret-name: left-to-csi-snapshotter\n";

    /// The first container's command of `pav render`'s one pod.
    fn rendered_command(args: &[&str]) -> String {
        let printed: serde_json::Value = serde_yaml::from_str(&pav(args).unwrap()).unwrap();
        printed["pods"][0]["spec"]["containers"][0]["command"][0]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// `--snapshot-content` and `--snapshot-class` give the snapshot
    /// phases what csi-snapshotter gives the driver: its name for the
    /// snapshot (prefix and the VolumeSnapshot's UID), the class's
    /// parameters without csi-snapshotter's own keys, the recorded handle,
    /// source and a group's members in the content's order.
    #[test]
    fn render_takes_snapshots_from_their_contents_and_classes() {
        let dir = tempfile::tempdir().unwrap();
        let provisioner = write(dir.path(), "provisioner.yaml", SNAPSHOTTING);
        let content = write(dir.path(), "content.yaml", CONTENT);
        let group = write(dir.path(), "group.yaml", GROUP_CONTENT);
        let class = write(dir.path(), "class.yaml", CLASS);
        let render = |phase: &str, more: &[&str]| {
            let args = [&["render", &provisioner, "--phase", phase][..], more].concat();
            rendered_command(&args)
        };
        assert_eq!(
            render(
                "snapshot-creation",
                &["--snapshot-content", &content, "--snapshot-class", &class]
            ),
            r#"snapshot-11111111-aaaa {"note": "kept"}"#
        );
        assert_eq!(
            render("snapshot-deletion", &["--snapshot-content", &content]),
            "snap-handle-1 of vol-1"
        );
        assert_eq!(
            render(
                "group-snapshot-creation",
                &["--snapshot-content", &group, "--snapshot-class", &class]
            ),
            r#"groupsnapshot-22222222-bbbb {"note": "kept"}"#
        );
        assert_eq!(
            render("group-snapshot-deletion", &["--snapshot-content", &group]),
            r#"group-handle-1: [{"handle": "member-1", "sourceHandle": "vol-1"}, {"handle": "member-2", "sourceHandle": "vol-2"}]"#
        );

        // A content of the other kind, or one not taken yet for a
        // deletion, is refused.
        let err = pav(&[
            "render",
            &provisioner,
            "--phase",
            "group-snapshot-deletion",
            "--snapshot-content",
            &content,
        ])
        .unwrap_err();
        assert_eq!(
            err,
            format!(
                "--snapshot-content {content}: a VolumeSnapshotContent, but --phase group-snapshot-deletion reads a VolumeGroupSnapshotContent"
            )
        );
        let pending = write(
            dir.path(),
            "pending.yaml",
            CONTENT.split("status:").next().unwrap(),
        );
        let err = pav(&[
            "render",
            &provisioner,
            "--phase",
            "snapshot-deletion",
            "--snapshot-content",
            &pending,
        ])
        .unwrap_err();
        assert!(
            err.ends_with("records no handle (the snapshot was not taken)"),
            "{err}"
        );

        // A file of another kind is refused, naming both.
        let err = pav(&[
            "render",
            &provisioner,
            "--phase",
            "snapshot-creation",
            "--snapshot-content",
            &class,
        ])
        .unwrap_err();
        assert_eq!(
            err,
            format!(
                "{class}: a VolumeSnapshotClass, not a VolumeSnapshotContent or VolumeGroupSnapshotContent"
            )
        );
    }

    /// `--time` names the health pod after its round of `every`: the same
    /// pod within an hour, another one an hour later; the pod says when its
    /// round began, the time that prints it again.
    #[test]
    fn render_names_the_health_pod_after_the_time_given() {
        let dir = tempfile::tempdir().unwrap();
        let provisioner = write(dir.path(), "provisioner.yaml", SNAPSHOTTING);
        let pod_at = |time: &str| {
            let printed =
                pav(&["render", &provisioner, "--phase", "health", "--time", time]).unwrap();
            let printed: serde_json::Value = serde_yaml::from_str(&printed).unwrap();
            printed["pods"][0]["metadata"].clone()
        };
        let name = |metadata: &serde_json::Value| metadata["name"].clone();
        let round = |metadata: &serde_json::Value| {
            metadata["annotations"][crate::pods::ANNOTATION_HEALTH_ROUND].clone()
        };
        let first = pod_at("2026-11-29T05:00:00Z");
        let later = pod_at("2026-11-29T05:59:59Z");
        assert_eq!(name(&first), name(&later));
        assert_eq!(round(&later), "2026-11-29T05:00:00Z");
        assert_eq!(pod_at(round(&later).as_str().unwrap()), later);
        assert_ne!(name(&first), name(&pod_at("2026-11-29T06:00:00Z")));
        let refused = Cli::try_parse_from([
            "pav", "render", "p.yaml", "--phase", "health", "--time", "noon",
        ]);
        assert!(
            refused
                .unwrap_err()
                .to_string()
                .contains("not an RFC 3339 time")
        );
    }
}
