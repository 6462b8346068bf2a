//! Where the node service may mount: inside kubelet's directory only.
//!
//! Every `staging_target_path` and `target_path` is resolved as the kernel
//! would resolve it when pav-csi uses it (symlinks in its existing part
//! followed) and must then lie strictly inside the kubelet directory and
//! outside pav-csi's own state directory. The resolved path is what pav-csi
//! mounts on, so a symlink swapped in later is not followed a second time.

use std::path::{Component, Path, PathBuf};

use tonic::Code;

use crate::limits::{self, LimitError};

/// Kubelet's root directory (`--root-dir`) when the builder names none.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

/// The directories a node service may and may not touch.
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    /// Kubelet's root directory: every staging and target path lies in it.
    pub(crate) kubelet_dir: PathBuf,
    /// pav-csi's state directory: no staging or target path lies in it.
    pub(crate) state_dir: PathBuf,
}

/// Why a staging or target path was refused (`INVALID_ARGUMENT`), naming
/// the field and the path as given.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// Missing, or longer than a path may be.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// It does not resolve (see [`Unresolved`]).
    #[error("{field} {value:?} {why}")]
    Unresolved {
        field: String,
        value: String,
        why: Unresolved,
    },
    /// It resolves outside the kubelet directory.
    #[error("{field} {value:?} resolves to {}, outside the kubelet directory {}", resolved.display(), kubelet_dir.display())]
    Outside {
        field: String,
        value: String,
        resolved: PathBuf,
        kubelet_dir: PathBuf,
    },
    /// It lies in, or contains, pav-csi's state directory.
    #[error("{field} {value:?} overlaps the driver's state directory {}", state_dir.display())]
    StateDir {
        field: String,
        value: String,
        state_dir: PathBuf,
    },
}

impl PathError {
    /// The code of a request refused for it: `INVALID_ARGUMENT`.
    pub(crate) fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

/// Why a path does not resolve: the end of a sentence that names it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unresolved {
    #[error("contains a NUL byte")]
    Nul,
    #[error("is not an absolute path")]
    Relative,
    #[error("contains `..`")]
    ParentDir,
    #[error("has a component longer than 255 bytes")]
    LongComponent,
    #[error("does not resolve")]
    Nowhere,
    /// Its longest existing prefix could not be canonicalized.
    #[error("does not resolve ({} : {error})", existing.display())]
    Canonicalize {
        existing: PathBuf,
        error: std::io::Error,
    },
}

impl Confinement {
    /// A required path field, resolved, or an error naming the field when
    /// it is missing, relative, contains `..` or a NUL byte, does not
    /// resolve, or resolves outside the kubelet directory.
    pub(crate) fn path(&self, field: &str, value: &str) -> Result<PathBuf, PathError> {
        let value = limits::required_path(field, value)?;
        let resolved = resolve(value).map_err(|why| PathError::Unresolved {
            field: field.to_owned(),
            value: value.to_owned(),
            why,
        })?;
        if !self.in_kubelet_dir(&resolved) {
            return Err(PathError::Outside {
                field: field.to_owned(),
                value: value.to_owned(),
                resolved,
                kubelet_dir: canonical(&self.kubelet_dir),
            });
        }
        let state = canonical(&self.state_dir);
        if resolved.starts_with(&state) || state.starts_with(&resolved) {
            return Err(PathError::StateDir {
                field: field.to_owned(),
                value: value.to_owned(),
                state_dir: state,
            });
        }
        Ok(resolved)
    }

    /// `value` resolved when it lies inside the kubelet directory, else
    /// `None` (where this driver never mounts anything).
    pub(crate) fn lookup(&self, value: &str) -> Option<PathBuf> {
        let resolved = resolve(value).ok()?;
        self.in_kubelet_dir(&resolved).then_some(resolved)
    }

    /// Whether `resolved` (a path from [`resolve`]) lies strictly inside
    /// the kubelet directory as that resolves now.
    ///
    /// When `resolved` starts with the directory's path as configured, that
    /// path needs no resolving (a readlink per component, on every call):
    /// the existing part of a resolved path is free of symlinks, so the
    /// configured path names itself (or, when it does not exist yet, is
    /// compared as written, as [`canonical`] would) and `resolved` lies in
    /// it. Otherwise (a kubelet directory reached through a symlink, or a
    /// path outside it) the directory is resolved and compared again.
    fn in_kubelet_dir(&self, resolved: &Path) -> bool {
        let inside = |root: &Path| resolved != root && resolved.starts_with(root);
        inside(&self.kubelet_dir) || inside(&canonical(&self.kubelet_dir))
    }
}

/// `path` with symlinks resolved, or itself when it does not exist (yet).
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}

/// Resolves an absolute path without `..`: its longest existing prefix is
/// canonicalized (following symlinks, so a link pointing elsewhere resolves
/// to where it points) and the components that do not exist yet are
/// appended. A dangling symlink does not resolve: creating through it would
/// create its target.
fn resolve(value: &str) -> Result<PathBuf, Unresolved> {
    if value.contains('\0') {
        return Err(Unresolved::Nul);
    }
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(Unresolved::Relative);
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(Unresolved::ParentDir);
    }
    // Linux's NAME_MAX: such a path can never be created, and finding out
    // only when mounting would leave a staging record behind.
    if path.components().any(|c| c.as_os_str().len() > 255) {
        return Err(Unresolved::LongComponent);
    }
    // Without `.`, repeated and trailing slashes.
    let path: PathBuf = path.components().collect();
    let mut existing = path.as_path();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        let (Some(name), Some(parent)) = (existing.file_name(), existing.parent()) else {
            return Err(Unresolved::Nowhere);
        };
        missing.push(name);
        existing = parent;
    }
    let mut resolved = existing
        .canonicalize()
        .map_err(|error| Unresolved::Canonicalize {
            existing: existing.to_owned(),
            error,
        })?;
    resolved.extend(missing.iter().rev());
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confinement(root: &Path) -> Confinement {
        Confinement {
            kubelet_dir: root.join("kubelet"),
            state_dir: root.join("kubelet/plugins/driver"),
        }
    }

    #[test]
    fn paths_must_resolve_inside_the_kubelet_dir() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let c = confinement(&root);
        std::fs::create_dir_all(root.join("kubelet/pods/a")).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("kubelet/pods/out")).unwrap();
        std::os::unix::fs::symlink(root.join("kubelet/pods/a"), root.join("kubelet/pods/in"))
            .unwrap();
        std::os::unix::fs::symlink(root.join("gone"), root.join("kubelet/pods/dangling")).unwrap();
        let ok = |p: &str| c.path("target_path", &format!("{}/{p}", root.display()));

        assert_eq!(
            ok("kubelet/pods/a/new/target").unwrap(),
            root.join("kubelet/pods/a/new/target")
        );
        assert_eq!(
            ok("kubelet/./pods//in/t/").unwrap(),
            root.join("kubelet/pods/a/t")
        );
        for bad in [
            "kubelet/pods/../../elsewhere/t",
            "kubelet/pods/out/t",
            "kubelet/pods/dangling",
            "kubelet/pods/dangling/t",
            "kubelet",
            "elsewhere/t",
            "kubelet/plugins/driver/staged/x",
            "kubelet/plugins",
        ] {
            let err = ok(bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}: {err:?}");
            assert!(err.to_string().starts_with("target_path"), "{err:?}");
        }
        let long_component = format!("kubelet/pods/a/{}/t", "x".repeat(256));
        assert!(
            ok(&long_component)
                .unwrap_err()
                .to_string()
                .contains("longer than 255 bytes")
        );
        assert!(ok(&format!("kubelet/pods/a/{}", "x".repeat(255))).is_ok());
        for bad in ["relative/t", "/etc", "", "/a\0b"] {
            assert!(c.path("target_path", bad).is_err(), "{bad:?}");
        }
        assert!(c.lookup("some/path").is_none());
        assert!(c.lookup("/etc").is_none());
        assert!(
            c.lookup(&format!("{}/kubelet/pods/a", root.display()))
                .is_some()
        );
    }
}
