//! A client pod's service-account tokens (`spec.tokenRequests`) as files
//! of its staging pod: `/pav/tokens/<audience>`, written before the pod
//! starts and replaced at each republish with the renewed tokens.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use pav_sdk::ServiceAccountTokens;
use pav_templates::token_file_name;

/// The directory under a staging pod's `/pav` that holds its tokens.
const TOKENS_DIR: &str = "tokens";

/// Why the tokens could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// Making the tokens' directory.
    #[error("making {}", dir.display())]
    MakeDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The pod's `/pav/tokens` is there but not a directory of its own
    /// (a symbolic link, say): nothing is written through it.
    #[error("{} is not a directory", dir.display())]
    NotDirectory { dir: PathBuf },
    /// Writing one token's file.
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Writes each of `tokens` to `pod_dir/tokens/<token_file_name(audience)>`
/// (readable by root only), each file replaced whole, so that the pod
/// never reads half a token. Nothing without tokens.
pub(super) fn write_tokens(
    pod_dir: &Path,
    tokens: &ServiceAccountTokens,
) -> Result<(), TokenFileError> {
    if tokens.is_empty() {
        return Ok(());
    }
    let dir = pod_dir.join(TOKENS_DIR);
    let made = DirBuilder::new().recursive(true).mode(0o700).create(&dir);
    made.map_err(|source| TokenFileError::MakeDir {
        dir: dir.clone(),
        source,
    })?;
    // The pod writes in its /pav too: a link it left there is not followed.
    let is_dir = fs::symlink_metadata(&dir).is_ok_and(|meta| meta.is_dir());
    if !is_dir {
        return Err(TokenFileError::NotDirectory { dir });
    }
    for (audience, token) in tokens.iter() {
        let path = dir.join(token_file_name(audience));
        replace(&path, token.token().as_bytes())
            .map_err(|source| TokenFileError::Write { path, source })?;
    }
    Ok(())
}

/// Replaces `path` with a file holding `bytes`: written to a new file
/// beside it (never an existing one, nor through a link), then renamed.
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    match fs::remove_file(&partial) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = (OpenOptions::new().write(true).create_new(true))
        .mode(0o600)
        .open(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&partial, path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use pav_sdk::ServiceAccountToken;

    use super::*;

    fn tokens(pairs: &[(&str, &str)]) -> ServiceAccountTokens {
        (pairs.iter())
            .map(|(audience, token)| {
                let token = ServiceAccountToken::new(*token, "2026-12-01T00:00:00Z");
                ((*audience).to_owned(), token)
            })
            .collect()
    }

    #[test]
    fn each_token_is_a_file_named_after_its_audience_and_renewals_replace_it() {
        let pod_dir = tempfile::tempdir().unwrap();
        let first = tokens(&[
            ("sts.example.com", "jwt-1"),
            ("https://id.example/x", "jwt-2"),
        ]);
        write_tokens(pod_dir.path(), &first).unwrap();
        let dir = pod_dir.path().join("tokens");
        let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(read("sts.example.com"), "jwt-1");
        assert_eq!(read("https___id.example_x"), "jwt-2");
        let mode = fs::metadata(dir.join("sts.example.com"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        write_tokens(pod_dir.path(), &tokens(&[("sts.example.com", "jwt-3")])).unwrap();
        assert_eq!(read("sts.example.com"), "jwt-3");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no partial file left: {names:?}");
    }

    #[test]
    fn no_tokens_write_nothing_and_a_link_is_not_followed() {
        let pod_dir = tempfile::tempdir().unwrap();
        write_tokens(pod_dir.path(), &ServiceAccountTokens::default()).unwrap();
        assert!(!pod_dir.path().join("tokens").exists());

        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), pod_dir.path().join("tokens")).unwrap();
        let err = write_tokens(pod_dir.path(), &tokens(&[("a", "jwt")])).unwrap_err();
        assert!(matches!(err, TokenFileError::NotDirectory { .. }), "{err}");
        assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
