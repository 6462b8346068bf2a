//! The API requests of the protocol's steps, each mapped to its
//! [`Error`] variant: what `sync` and the steps in the parent module call.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::events::EventType;
use pav_sdk::DataSourceKind;
use serde_json::Value;

use super::error::Error;
use super::plan::{self, ClaimKey};
use super::{Context, POPULATED_FOR_LABEL, reason};

impl Context {
    /// The StorageClass `claim` names, if it exists.
    pub(super) async fn class_of(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Option<StorageClass>, Error> {
        let Some(name) = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
        else {
            return Ok(None);
        };
        let classes = Api::<StorageClass>::all(self.client.clone());
        (classes.get_opt(name).await).map_err(|source| Error::ReadClass {
            class: name.to_owned(),
            source,
        })
    }

    pub(super) async fn patch_claim(
        &self,
        key: &ClaimKey,
        patch: &Value,
    ) -> Result<(), kube::Error> {
        let claims = self.claims(&key.namespace);
        (claims
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(patch))
            .await)
            .map(drop)
    }

    /// Reads the data source, as JSON.
    pub(super) async fn read_source(
        &self,
        namespace: &str,
        kind: &DataSourceKind,
        name: &str,
    ) -> Result<Value, Error> {
        let (resource, capabilities) = self.resource_of(kind).await?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(self.client.clone(), namespace, &resource),
        };
        let names = || (kind.clone(), namespace.to_owned(), name.to_owned());
        match api.get_opt(name).await {
            Ok(Some(mut object)) => {
                // The API server's bookkeeping, not the source's data: it
                // would only make every population's input larger.
                object.metadata.managed_fields = None;
                serde_json::to_value(&object).map_err(|source| {
                    let (kind, namespace, name) = names();
                    Error::EncodeSource {
                        kind,
                        namespace,
                        name,
                        source,
                    }
                })
            }
            Ok(None) => {
                // Perhaps the kind moved (a CRD's version dropped): ask
                // discovery again next time.
                self.resources().remove(kind);
                let (kind, namespace, name) = names();
                Err(Error::SourceMissing {
                    kind,
                    namespace,
                    name,
                })
            }
            Err(kube::Error::Api(status)) if status.is_forbidden() => {
                let (kind, namespace, name) = names();
                Err(Error::SourceForbidden {
                    kind,
                    namespace,
                    name,
                    resource: plan::resource_name(&resource),
                    source: kube::Error::Api(status),
                })
            }
            Err(source) => {
                let (kind, namespace, name) = names();
                Err(Error::ReadSource {
                    kind,
                    namespace,
                    name,
                    source,
                })
            }
        }
    }

    /// The API resource of `kind`, discovered once.
    async fn resource_of(
        &self,
        kind: &DataSourceKind,
    ) -> Result<(ApiResource, ApiCapabilities), Error> {
        if let Some(found) = self.resources().get(kind) {
            return Ok(found.clone());
        }
        let group = match kube::discovery::group(&self.client, &kind.api_group).await {
            Ok(group) => group,
            Err(kube::Error::Discovery(_)) => {
                return Err(Error::KindNotServed { kind: kind.clone() });
            }
            Err(source) => {
                return Err(Error::Discovery {
                    kind: kind.clone(),
                    source,
                });
            }
        };
        let found = (group.recommended_kind(&kind.kind))
            .ok_or_else(|| Error::KindNotServed { kind: kind.clone() })?;
        self.resources().insert(kind.clone(), found.clone());
        Ok(found)
    }

    pub(super) async fn read_volume(&self, name: &str) -> Result<Option<PersistentVolume>, Error> {
        (self.volumes().get_opt(name).await).map_err(|source| Error::ReadVolume {
            volume: name.to_owned(),
            source,
        })
    }

    /// The name of the volume handed over to the claim of `key` already,
    /// once its prime claim is gone.
    pub(super) async fn handed_over(&self, key: &ClaimKey) -> Result<Option<String>, Error> {
        let selector = format!("{POPULATED_FOR_LABEL}={}", key.uid);
        let volumes = (self
            .volumes()
            .list(&ListParams::default().labels(&selector))
            .await)
            .map_err(|source| Error::ListVolumes {
                claim: key.clone(),
                source,
            })?;
        Ok((volumes.items.into_iter())
            .find(|volume| plan::claimed_by(volume, &key.uid))
            .and_then(|volume| volume.metadata.name))
    }

    pub(super) async fn create_prime(
        &self,
        claim: &PersistentVolumeClaim,
        key: &ClaimKey,
    ) -> Result<(), Error> {
        let prime = plan::prime_claim(claim, key, &self.namespace);
        match self.primes().create(&PostParams::default(), &prime).await {
            Ok(_) => {
                let prime = self.prime_of(key);
                tracing::info!(%prime, "prime claim created");
                let note = format!("provisioning an empty volume for {prime}");
                self.event(claim, EventType::Normal, reason::PROVISIONING, note)
                    .await;
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
            Err(source) => Err(Error::CreatePrime {
                prime: self.prime_of(key),
                claim: key.clone(),
                source,
            }),
        }
    }

    /// Deletes the prime claim of `key`, if it exists; in the foreground
    /// when the claim goes, so that the pods it owns (a population pod)
    /// are gone before it is.
    pub(super) async fn delete_prime(&self, key: &ClaimKey, foreground: bool) -> Result<(), Error> {
        let params = DeleteParams {
            propagation_policy: foreground.then_some(PropagationPolicy::Foreground),
            ..DeleteParams::default()
        };
        match self
            .primes()
            .delete(&plan::prime_name(&key.uid), &params)
            .await
        {
            Ok(_) => {
                tracing::debug!(prime = %self.prime_of(key), "prime claim deleted");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(source) => Err(Error::DeletePrime {
                prime: self.prime_of(key),
                source,
            }),
        }
    }

    pub(super) async fn remove_finalizer(
        &self,
        claim: &PersistentVolumeClaim,
        key: &ClaimKey,
    ) -> Result<bool, Error> {
        let Some(patch) = plan::finalizer_patch(claim, false) else {
            return Ok(false);
        };
        match self.patch_claim(key, &patch).await {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
            Err(source) => Err(Error::RemoveFinalizer {
                claim: key.clone(),
                source,
            }),
        }
    }
}
