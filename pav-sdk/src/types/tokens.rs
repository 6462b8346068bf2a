//! The client pod's service-account tokens, which kubelet hands
//! `NodePublishVolume` when the CSIDriver has `tokenRequests` (KEP-5538):
//! parsed from kubelet's JSON, and never printed.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// The client pod's service-account tokens, by audience: one per entry of
/// the CSIDriver's `tokenRequests`, each bound to the pod and valid until
/// its expiration.
///
/// kubelet passes them under `csi.storage.k8s.io/serviceAccount.tokens`;
/// pav-csi parses them into
/// [`StageRequest::service_account_tokens`](crate::StageRequest::service_account_tokens).
/// Like [`Secrets`](crate::Secrets), they have no `Display` and their
/// `Debug` shows audiences and expirations only, so that a request can be
/// logged without leaking a token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ServiceAccountTokens(BTreeMap<String, ServiceAccountToken>);

/// One service-account token and when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountToken {
    token: String,
    expiration_timestamp: String,
}

/// Why kubelet's `csi.storage.k8s.io/serviceAccount.tokens` value was
/// refused. Its message never holds any part of the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokensError {
    /// The value is not JSON of kubelet's shape. serde_json's own message
    /// can quote the input (a token), so only the position is kept.
    #[error(
        "not kubelet's JSON map of audience to token and expirationTimestamp \
         (line {line}, column {column})"
    )]
    Malformed {
        /// The line of the value where parsing stopped, from 1.
        line: usize,
        /// The column of that line, from 1 (0 at the end of the input).
        column: usize,
    },
}

/// A token as kubelet writes it (Kubernetes' `TokenRequestStatus`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeletToken {
    token: String,
    expiration_timestamp: String,
}

impl ServiceAccountTokens {
    /// Parses kubelet's value of `csi.storage.k8s.io/serviceAccount.tokens`:
    /// `{"<audience>": {"token": "<jwt>", "expirationTimestamp":
    /// "<RFC 3339>"}, ...}`.
    ///
    /// ```
    /// use pav_sdk::ServiceAccountTokens;
    ///
    /// let json = r#"{"vault": {"token": "eyJ...", "expirationTimestamp": "2026-05-01T10:00:00Z"}}"#;
    /// let tokens = ServiceAccountTokens::from_kubelet_json(json)?;
    /// let vault = tokens.get("vault").expect("a token for vault");
    /// assert_eq!(vault.expiration_timestamp(), "2026-05-01T10:00:00Z");
    /// assert!(!format!("{tokens:?}").contains("eyJ"));
    /// # Ok::<(), pav_sdk::TokensError>(())
    /// ```
    pub fn from_kubelet_json(json: &str) -> Result<Self, TokensError> {
        let parsed: BTreeMap<String, KubeletToken> =
            serde_json::from_str(json).map_err(|e| TokensError::Malformed {
                line: e.line(),
                column: e.column(),
            })?;
        Ok(parsed
            .into_iter()
            .map(|(audience, t)| {
                let token = ServiceAccountToken::new(t.token, t.expiration_timestamp);
                (audience, token)
            })
            .collect())
    }

    /// The token for `audience`, if kubelet passed one.
    pub fn get(&self, audience: &str) -> Option<&ServiceAccountToken> {
        self.0.get(audience)
    }

    /// Every audience and its token, in audience order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ServiceAccountToken)> {
        self.0
            .iter()
            .map(|(audience, token)| (audience.as_str(), token))
    }

    /// True when kubelet passed no token (the CSIDriver has no
    /// `tokenRequests`, or the call is not a `NodePublishVolume`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, ServiceAccountToken)> for ServiceAccountTokens {
    fn from_iter<I: IntoIterator<Item = (String, ServiceAccountToken)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl ServiceAccountToken {
    /// A token (a JWT) expiring at `expiration_timestamp` (RFC 3339).
    pub fn new(token: impl Into<String>, expiration_timestamp: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            expiration_timestamp: expiration_timestamp.into(),
        }
    }

    /// The token itself: hand it to the storage, never to a log or an
    /// error message.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// When the token expires, as kubelet wrote it (RFC 3339, such as
    /// `2026-05-01T10:00:00Z`).
    pub fn expiration_timestamp(&self) -> &str {
        &self.expiration_timestamp
    }
}

impl fmt::Debug for ServiceAccountToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountToken")
            .field("token", &"<redacted>")
            .field("expiration_timestamp", &self.expiration_timestamp)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubelet's `json.Marshal` of its map of `TokenRequestStatus`
    /// writes, for two audiences.
    const KUBELET: &str = r#"{"storage.example.com":{"token":"eyJhbGciOiJSUzI1NiJ9.c3RvcmFnZQ.c2ln","expirationTimestamp":"2026-05-01T10:00:00Z"},"vault":{"token":"eyJhbGciOiJSUzI1NiJ9.dmF1bHQ.c2ln","expirationTimestamp":"2026-05-01T11:00:00Z"}}"#;

    #[test]
    fn kubelets_value_parses_by_audience() {
        let tokens = ServiceAccountTokens::from_kubelet_json(KUBELET).unwrap();
        let storage = tokens.get("storage.example.com").unwrap();
        assert_eq!(storage.token(), "eyJhbGciOiJSUzI1NiJ9.c3RvcmFnZQ.c2ln");
        assert_eq!(storage.expiration_timestamp(), "2026-05-01T10:00:00Z");
        let vault = tokens.get("vault").unwrap();
        assert_eq!(vault.token(), "eyJhbGciOiJSUzI1NiJ9.dmF1bHQ.c2ln");
        assert_eq!(tokens.get("other"), None);
        let audiences: Vec<&str> = tokens.iter().map(|(audience, _)| audience).collect();
        assert_eq!(audiences, ["storage.example.com", "vault"]);
        assert!(!tokens.is_empty());
        let built: ServiceAccountTokens = tokens
            .iter()
            .map(|(audience, token)| (audience.to_owned(), token.clone()))
            .collect();
        assert_eq!(built, tokens);
    }

    #[test]
    fn an_empty_map_is_no_tokens() {
        let tokens = ServiceAccountTokens::from_kubelet_json("{}").unwrap();
        assert!(tokens.is_empty());
        assert_eq!(tokens, ServiceAccountTokens::default());
    }

    #[test]
    fn fields_kubelet_may_add_are_ignored() {
        let json = r#"{"a":{"token":"t","expirationTimestamp":"2026-05-01T10:00:00Z","new":1}}"#;
        let tokens = ServiceAccountTokens::from_kubelet_json(json).unwrap();
        assert_eq!(tokens.get("a").unwrap().token(), "t");
    }

    #[test]
    fn a_malformed_value_is_refused_with_its_position_only() {
        let cases = [
            // Not JSON.
            ("secret-jwt-value", 1, 1),
            // A token where a map of them is expected.
            (r#""secret-jwt-value""#, 1, 18),
            // A token without its expiration.
            (r#"{"a": {"token": "secret-jwt-value"}}"#, 1, 35),
            // An expiration that is no string.
            (
                r#"{"a": {"token": "secret-jwt-value", "expirationTimestamp": 7}}"#,
                1,
                60,
            ),
            // Cut short.
            (r#"{"a": {"token": "secret-jwt-value""#, 1, 34),
        ];
        for (json, line, column) in cases {
            let error = ServiceAccountTokens::from_kubelet_json(json).unwrap_err();
            assert_eq!(error, TokensError::Malformed { line, column }, "{json}");
            let message = error.to_string();
            assert!(
                message.starts_with("not kubelet's JSON map of audience to token"),
                "{message}"
            );
            for part in ["secret", "jwt", "value"] {
                assert!(!message.contains(part), "{json}: {message}");
            }
        }
    }

    /// A CSIDriver's `audience: ""` asks for the API server's own
    /// audiences; kubelet keys that token by the empty string.
    #[test]
    fn an_empty_audience_is_kubelets_key_for_the_api_servers_audiences() {
        let json = r#"{"": {"token": "jwt-value", "expirationTimestamp": "2026-05-01T10:00:00Z"}}"#;
        let tokens = ServiceAccountTokens::from_kubelet_json(json).unwrap();
        assert_eq!(
            tokens.get("").map(ServiceAccountToken::token),
            Some("jwt-value")
        );
    }

    #[test]
    fn debug_shows_audiences_and_expirations_never_a_token() {
        let tokens = ServiceAccountTokens::from_kubelet_json(KUBELET).unwrap();
        let printed = format!("{tokens:?}");
        assert_eq!(
            printed,
            "{\"storage.example.com\": ServiceAccountToken { token: \"<redacted>\", \
             expiration_timestamp: \"2026-05-01T10:00:00Z\" }, \"vault\": \
             ServiceAccountToken { token: \"<redacted>\", expiration_timestamp: \
             \"2026-05-01T11:00:00Z\" }}"
        );
        let pretty = format!("{tokens:#?}");
        assert!(!pretty.contains("eyJ"), "{pretty}");
        let one = tokens.get("vault").unwrap();
        assert!(!format!("{one:?}").contains("eyJ"));
    }
}
