//! pav-csi's node path and volume id checks on arbitrary text, against a
//! tree of hostile symlinks.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use pav_csi::fuzzing::Paths;
use pav_sdk::VolumeId;
use tonic::Code;

/// Linux's `PATH_MAX` and `NAME_MAX`.
const MAX_PATH: usize = 4096;
const MAX_NAME: usize = 255;

/// The fixture: a root holding `kubelet/` (with `pods/` and the state
/// directory `plugins/driver/`), `elsewhere/`, and `kl`, a symlink to
/// `kubelet` (a kubelet directory configured through a link), with
/// symlinks below `kubelet/pods/` that lead out, up, into the state
/// directory, nowhere and to themselves. Dropping it removes it.
#[derive(Debug)]
pub struct NodePathTree {
    root: PathBuf,
    kubelet: PathBuf,
    state: PathBuf,
    /// The same directories, configured as written and through `kl`.
    confinements: [Paths; 2],
}

impl NodePathTree {
    /// Builds the tree in a new directory under the temporary directory
    /// (`TMPDIR`; scripts/fuzz points it at a directory it removes).
    pub fn create() -> Self {
        // Unique within the process too: a test may build several.
        static TREES: AtomicUsize = AtomicUsize::new(0);
        let n = TREES.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("pav-fuzz-csi-{}-{n}", std::process::id()));
        // Left behind by an earlier process with the same id.
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let root = root.canonicalize().unwrap();
        let kubelet = root.join("kubelet");
        let state = kubelet.join("plugins/driver");
        for dir in [
            "kubelet/pods/a/volumes",
            "kubelet/plugins/driver/staged",
            "elsewhere/x",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("kubelet/pods/a/file"), "").unwrap();
        let links = [
            ("kl", "kubelet".into()),
            ("kubelet/pods/out", root.join("elsewhere")),
            ("kubelet/pods/rel", "../../elsewhere".into()),
            ("kubelet/pods/in", root.join("kubelet/pods/a")),
            ("kubelet/pods/up", "..".into()),
            ("kubelet/pods/root", "/".into()),
            ("kubelet/pods/state", "../plugins/driver".into()),
            ("kubelet/pods/dangling", root.join("gone")),
            ("kubelet/pods/loop", "loop".into()),
            ("kubelet/pods/a/file-link", "file".into()),
        ];
        for (link, target) in links {
            std::os::unix::fs::symlink::<PathBuf, _>(target, root.join(link)).unwrap();
        }
        let confinements = [kubelet.clone(), root.join("kl")]
            .map(|kubelet_dir| Paths::new(kubelet_dir, state.clone()));
        Self {
            root,
            kubelet,
            state,
            confinements,
        }
    }

    /// [`csi_node_path`]'s checks against this tree.
    pub fn check(&self, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        check_volume_id(text);
        let value = if text.starts_with('/') {
            text.to_owned()
        } else {
            format!("{}/{text}", self.root.display())
        };
        for confinement in &self.confinements {
            check_path(self, confinement, &value);
        }
    }
}

impl Drop for NodePathTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// pav-csi's node path and volume id checks on arbitrary text.
///
/// As a staging or target path (`Paths::path`, what every node RPC
/// calls first), against a fixed tree with symlinks that point out of the
/// kubelet directory, into the driver's state directory, up, nowhere and
/// at themselves; text not starting with `/` is taken below the tree's
/// root, so mutations reach it. Whatever is accepted must be absolute,
/// normalised (no `.`, `..`, repeated or trailing `/`), free of symlinks
/// (mounting on it follows none), strictly inside the kubelet directory
/// and apart from the state directory; and what was given must have been
/// absolute, without `..`, NUL, or a component over 255 bytes, within
/// 4096 bytes.
///
/// As a volume id: `VolumeId::path_component` accepts exactly the single
/// file names (no `/`, NUL, `.` or `..`, 1 to 255 bytes), and what it
/// accepts, joined to a directory, names an entry of that directory.
///
/// The path check is the one every node RPC's check calls, reached
/// through `pav_csi::fuzzing` (cargo feature `fuzzing`).
///
/// The tree is built once per process, on first use, and stays.
pub fn csi_node_path(data: &[u8]) {
    static TREE: OnceLock<NodePathTree> = OnceLock::new();
    TREE.get_or_init(NodePathTree::create).check(data);
}

fn check_path(tree: &NodePathTree, confinement: &Paths, value: &str) {
    const FIELD: &str = "staging_target_path";
    let lookup = confinement.lookup(value);
    if let Some(found) = &lookup {
        assert!(
            inside(found, &tree.kubelet),
            "{value:?}: lookup found {found:?}"
        );
    }
    let resolved = match confinement.path(FIELD, value) {
        Ok(resolved) => resolved,
        Err(status) => {
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{value:?}: {status:?}"
            );
            assert!(status.message().starts_with(FIELD), "{value:?}: {status:?}");
            return;
        }
    };
    // What was given.
    let given = Path::new(value);
    assert!(value.len() <= MAX_PATH, "{} bytes accepted", value.len());
    assert!(!value.contains('\0'), "{value:?}: NUL accepted");
    assert!(given.is_absolute(), "{value:?}: relative accepted");
    assert!(
        given.components().all(|c| c != Component::ParentDir),
        "{value:?}: `..` accepted"
    );
    assert!(
        given.components().all(|c| c.as_os_str().len() <= MAX_NAME),
        "{value:?}: a component over {MAX_NAME} bytes accepted"
    );
    // What it resolved to.
    assert!(resolved.is_absolute(), "{value:?} -> {resolved:?}");
    assert!(
        resolved
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "{value:?} -> {resolved:?}: not normalised"
    );
    assert_eq!(
        resolved.as_os_str().len(),
        resolved.components().collect::<PathBuf>().as_os_str().len(),
        "{value:?} -> {resolved:?}: repeated or trailing `/`"
    );
    assert!(
        inside(&resolved, &tree.kubelet),
        "{value:?} -> {resolved:?}: outside the kubelet directory"
    );
    assert!(
        !resolved.starts_with(&tree.state) && !tree.state.starts_with(&resolved),
        "{value:?} -> {resolved:?}: overlaps the state directory"
    );
    for ancestor in resolved.ancestors() {
        if let Ok(meta) = std::fs::symlink_metadata(ancestor) {
            assert!(
                !meta.file_type().is_symlink(),
                "{value:?} -> {resolved:?}: {ancestor:?} is a symlink"
            );
        }
    }
    // Resolving again changes nothing (unless following a symlink made
    // it longer than a path may be given), and lookup agrees.
    let again = resolved.to_str().expect("UTF-8 in, UTF-8 out");
    if again.len() <= MAX_PATH {
        assert_eq!(
            confinement.path(FIELD, again).ok().as_ref(),
            Some(&resolved)
        );
    }
    assert_eq!(lookup.as_ref(), Some(&resolved), "{value:?}");
}

/// Whether `path` lies strictly inside `dir`.
fn inside(path: &Path, dir: &Path) -> bool {
    path != dir && path.starts_with(dir)
}

fn check_volume_id(text: &str) {
    let single_file_name = !text.is_empty()
        && text != "."
        && text != ".."
        && !text.contains('/')
        && !text.contains('\0')
        && text.len() <= MAX_NAME;
    let id = VolumeId::new(text);
    match id.path_component() {
        Ok(component) => {
            assert!(single_file_name, "{text:?} accepted as a file name");
            assert_eq!(component, text);
            let base = Path::new("/base");
            let joined = base.join(component);
            assert_eq!(joined.parent(), Some(base), "{text:?}");
            assert_eq!(joined.file_name(), Some(OsStr::new(text)), "{text:?}");
        }
        Err(err) => {
            assert!(!single_file_name, "{text:?} refused: {err}");
            // The error names the id (escaped), except a long one.
            let message = err.to_string();
            assert!(
                text.len() > MAX_NAME || message.contains(&format!("{text:?}")) || text.is_empty(),
                "{message}"
            );
        }
    }
}
