//! The pure half of the recipe: a phase's [`Plan`], from the objects the
//! phase is about to what its templates evaluate to and the pod that
//! carries it out. Nothing here talks to the API server except a
//! template's `get_pvc` (through the planner's [`PvcLookup`]), so the
//! driver plans on a blocking thread ([`Planner::blocking`]) and `pav
//! render` plans the same way with the objects given to it.
//!
//! This module holds what every phase's plan shares: the [`Planner`],
//! [`Plan`], [`PlanError`] and the steps several phases take. Each
//! phase's own method of [`Planner`] lives in its module of
//! [`crate::phases`], beside its pod and its `pav render` example.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use pav_templates::phase::Section;
use pav_templates::{CompiledProvisioner, Phase, ProvisioningMode, PvcLookup, StagingContext};

use crate::driver_error::DriverError;

mod refusals;

pub use self::refusals::{
    ParametersRefused, TooSmall, UnknownAccessMode, claim_access_modes, grown,
};
use crate::pods::PodOrigin;

/// What every plan of one PavProvisioner starts from: its compiled
/// templates, what its pods are built with, and `get_pvc`.
#[derive(Clone)]
pub struct Planner {
    compiled: Arc<CompiledProvisioner>,
    owner: Option<OwnerReference>,
    default_namespace: String,
    lookup: Arc<dyn PvcLookup>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("provisioner", &self.compiled.name())
            .field("default_namespace", &self.default_namespace)
            .finish()
    }
}

/// A phase planned: what its templates evaluated to, and the pod that
/// carries it out (`Option<Pod>` for phases whose pod is optional, `Pod`
/// for staging and node expansion, whose pod is mandatory).
#[derive(Debug, Clone)]
pub struct Plan<Evaluated, P = Option<Pod>> {
    /// The phase's fields, evaluated.
    pub evaluated: Evaluated,
    /// The pod PaV creates for it.
    pub pod: P,
}

impl<Evaluated> Plan<Evaluated, Pod> {
    /// The same plan, its mandatory pod typed as other phases' optional one.
    pub fn optional(self) -> Plan<Evaluated> {
        Plan {
            evaluated: self.evaluated,
            pod: Some(self.pod),
        }
    }
}

/// The CSI volume handle of `pv` (empty for a volume of no CSI driver,
/// which no phase is planned for).
pub(crate) fn handle_of(pv: &PersistentVolume) -> &str {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.volume_handle.as_str())
        .unwrap_or_default()
}

/// Why a phase could not be planned. Each RPC's error enum carries it as
/// one variant; [`From<PlanError> for pav_sdk::Error`] is the common
/// mapping to CSI codes, which an RPC overrides where the objects are its
/// own records rather than the request's (a context they cannot make is
/// then `INTERNAL`).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The PavProvisioner is missing, not listed yet or invalid.
    #[error(transparent)]
    Provisioner(DriverError),
    /// The phase belongs to dynamic provisioning, which the PavProvisioner
    /// does not do.
    #[error(
        "PavProvisioner {provisioner} has no {phase} phase: spec.provisioningModes does not contain Dynamic"
    )]
    NotDynamic {
        /// Its name.
        provisioner: String,
        /// The phase asked for.
        phase: Phase,
    },
    /// The objects do not make a template context.
    #[error(transparent)]
    Context(pav_templates::Error),
    /// Evaluating the phase's templates (the message truncated, as events
    /// and CSI replies show it; the error itself is kept whole).
    #[error("{}", crate::telemetry::truncate(error.to_string()))]
    Render {
        /// The phase evaluated.
        phase: Phase,
        /// What the templates did wrong.
        error: pav_templates::Error,
    },
    /// The blocking thread that evaluates templates panicked or was
    /// cancelled.
    #[error(transparent)]
    Thread(tokio::task::JoinError),
}

impl From<PlanError> for pav_sdk::Error {
    /// A provisioner that is missing or invalid keeps the code of the
    /// driver's error; a phase it does not have, objects that make no
    /// context and templates that fail on them are the request's fault
    /// (its claim's or class's): `INVALID_ARGUMENT`; a lost thread
    /// `INTERNAL`.
    fn from(error: PlanError) -> Self {
        let message = pav_csi::error_chain(&error);
        match error {
            PlanError::Provisioner(e) => e.into(),
            PlanError::NotDynamic { .. } | PlanError::Context(_) | PlanError::Render { .. } => {
                pav_sdk::Error::InvalidArgument(message)
            }
            PlanError::Thread(_) => pav_sdk::Error::Internal(message),
        }
    }
}

/// What planning a phase gives.
pub(crate) type Result<T> = std::result::Result<T, PlanError>;

impl Planner {
    /// Plans `compiled`'s phases; its pods are owned by `owner` (the
    /// PavProvisioner object, when known) and go to `default_namespace`
    /// when their template names none.
    pub fn new(
        compiled: Arc<CompiledProvisioner>,
        owner: Option<OwnerReference>,
        default_namespace: String,
        lookup: Arc<dyn PvcLookup>,
    ) -> Self {
        Planner {
            compiled,
            owner,
            default_namespace,
            lookup,
        }
    }

    /// The compiled PavProvisioner, for what its spec declares (phases,
    /// provisioning modes, data sources).
    pub fn compiled(&self) -> &CompiledProvisioner {
        &self.compiled
    }

    /// What every pod of the provisioner is built with (also for a pod
    /// from a template recorded earlier rather than evaluated now).
    pub fn origin(&self) -> PodOrigin<'_> {
        PodOrigin {
            provisioner: self.compiled.name(),
            owner: self.owner.as_ref(),
            default_namespace: &self.default_namespace,
        }
    }

    /// `get_pvc`, for the context of every phase: each one's templates may
    /// look up claims.
    pub(crate) fn lookup(&self) -> Arc<dyn PvcLookup> {
        self.lookup.clone()
    }

    /// Runs `plan` on a blocking thread, where `get_pvc` may block.
    pub async fn blocking<T: Send + 'static>(
        &self,
        plan: impl FnOnce(&Planner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let planner = self.clone();
        tokio::task::spawn_blocking(move || plan(&planner))
            .await
            .map_err(PlanError::Thread)?
    }

    /// Refuses `phase`, of dynamic provisioning, unless
    /// `spec.provisioningModes` lists `Dynamic`.
    pub fn require_dynamic(&self, phase: Phase) -> Result<()> {
        if self
            .compiled
            .provisioning_modes()
            .contains(&ProvisioningMode::Dynamic)
        {
            Ok(())
        } else {
            Err(PlanError::NotDynamic {
                provisioner: self.compiled.name().to_owned(),
                phase,
            })
        }
    }

    /// Evaluates phase `S` in `context`, naming the phase in its error.
    pub(crate) fn render<S: Section>(&self, context: &S::Context) -> Result<S::Evaluated> {
        (self.compiled.render::<S>(context)).map_err(|error| PlanError::Render {
            phase: S::DEFINITION.phase,
            error,
        })
    }

    /// The staging context of claim `pvc`, bound to `pv`, on `node`: what
    /// every phase of a volume on a node (staging, unstaging, node
    /// expansion, attach, detach, health) is evaluated in.
    pub(crate) fn staging_context(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
    ) -> Result<StagingContext> {
        Ok(StagingContext::new(pvc, pv, node, read_only)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup()))
    }
}
