//! The pure half of the recipe: a phase's [`Plan`], from the objects the
//! phase is about to what its templates evaluate to and the pod that
//! carries it out. Nothing here talks to the API server except a
//! template's `get_pvc` (through the planner's [`PvcLookup`]), so the
//! driver plans on a blocking thread ([`Planner::blocking`]) and `pav
//! render` plans the same way with the objects given to it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use pav_templates::phase::DEFAULT_HEALTH_CHECK_EVERY;
use pav_templates::phase::{
    Attach, Creation, Deletion, Detach, Expansion, GroupSnapshotCreation, GroupSnapshotDeletion,
    Health, NodeExpansion, SnapshotCreation, SnapshotDeletion, Staging, Unstaging, Validation,
};
use pav_templates::{
    CompiledProvisioner, CreationContext, CreationPhase, ExpansionContext, ExpansionPhase,
    GroupMember, GroupSnapshotContext, GroupSnapshotCreationPhase, HealthPhase, OptionalPodPhase,
    Phase, ProvisioningMode, PvcLookup, SnapshotContext, SnapshotCreationPhase, Source,
    StagingContext, StagingPhase, ValidationContext, ValidationPhase,
};

use crate::driver_error::DriverError;

mod attributes;
mod refusals;

pub use self::attributes::{CapacityFor, ModificationPlan};
pub use self::refusals::{
    ParametersRefused, TooSmall, UnknownAccessMode, claim_access_modes, grown,
};
use crate::pods::{PodOrigin, Publication, claim_name};

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

/// The creation phase planned, with the context it was evaluated in: a
/// creation that fails is undone by the deletion phase of that context.
#[derive(Debug, Clone)]
pub struct CreationPlan {
    /// Evaluated `spec.volumeCreation` and its pod.
    pub plan: Plan<CreationPhase>,
    /// The context of the evaluation.
    pub context: CreationContext,
}

/// A client pod's use of a volume, as staging is asked for it.
#[derive(Debug, Clone, Copy)]
pub struct StagingFor<'a> {
    /// The volume handle.
    pub handle: &'a str,
    /// The kubelet target path the volume is published at.
    pub target_path: &'a str,
    /// The client pod's namespace, name and UID.
    pub client: (&'a str, &'a str, &'a str),
    /// Whether the volume is staged read-only.
    pub read_only: bool,
    /// What the attach pod wrote (`publishContext`); empty without one.
    pub publish_context: &'a std::collections::BTreeMap<String, String>,
}

/// The CSI volume handle of `pv` (empty for a volume of no CSI driver,
/// which no phase is planned for).
fn handle_of(pv: &PersistentVolume) -> &str {
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

type Result<T> = std::result::Result<T, PlanError>;

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

    /// Evaluates `phase` with `render`, naming the phase in its error.
    fn render<T>(
        &self,
        phase: Phase,
        render: impl FnOnce(&CompiledProvisioner) -> pav_templates::Result<T>,
    ) -> Result<T> {
        render(&self.compiled).map_err(|error| PlanError::Render { phase, error })
    }

    /// The validation of a dynamically provisioned claim `pvc` of class `sc`.
    pub fn validation(
        &self,
        pvc: &PersistentVolumeClaim,
        sc: &StorageClass,
    ) -> Result<Plan<ValidationPhase>> {
        // Dynamic validation belongs to creating a volume: that is what
        // a provisioner without Dynamic lacks.
        self.require_dynamic(Phase::Creation)?;
        let context = ValidationContext::dynamic(pvc, sc).map_err(PlanError::Context)?;
        self.validation_in(context, pvc)
    }

    /// The validation of the statically provisioned volume `pv`, for its
    /// claim `pvc`.
    pub fn static_validation(
        &self,
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Plan<ValidationPhase>> {
        let context = ValidationContext::static_pv(pv).map_err(PlanError::Context)?;
        self.validation_in(context, pvc)
    }

    fn validation_in(
        &self,
        context: ValidationContext,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Plan<ValidationPhase>> {
        let context = context.with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::Validation, |c| c.render::<Validation>(&context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .claim_pod(Phase::Validation, template, evaluated.timeout, pvc)
        });
        Ok(Plan { evaluated, pod })
    }

    /// The creation of claim `pvc`'s volume, of class `sc`, on one of
    /// `topology_nodes` (preferred first), from `source` if any, with the
    /// claim's VolumeAttributesClass parameters `mutable`.
    pub fn creation(
        &self,
        pvc: &PersistentVolumeClaim,
        sc: &StorageClass,
        topology_nodes: &[String],
        source: Option<&Source>,
        mutable: &std::collections::BTreeMap<String, String>,
    ) -> Result<CreationPlan> {
        self.require_dynamic(Phase::Creation)?;
        let mut context = CreationContext::new(pvc, sc)
            .map_err(PlanError::Context)?
            .with_topology_nodes(topology_nodes)
            .with_mutable_parameters(mutable)
            .with_pvc_lookup(self.lookup.clone());
        if let Some(source) = source {
            context = context.with_source(source);
        }
        let evaluated = self.render(Phase::Creation, |c| c.render::<Creation>(&context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .claim_pod(Phase::Creation, template, evaluated.timeout, pvc)
        });
        Ok(CreationPlan {
            plan: Plan { evaluated, pod },
            context,
        })
    }

    /// The deletion of claim `pvc`'s volume in `context`: the creation's
    /// (undoing a failed creation) or one naming the volume's handle.
    pub fn deletion(
        &self,
        context: &CreationContext,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Plan<OptionalPodPhase>> {
        let evaluated = self.render(Phase::Deletion, |c| c.render::<Deletion>(context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .claim_pod(Phase::Deletion, template, evaluated.timeout, pvc)
        });
        Ok(Plan { evaluated, pod })
    }

    /// The deletion of the volume `handle` of claim `pvc` and class `sc`
    /// (as the volume's records keep them), as DeleteVolume asks for it.
    pub fn volume_deletion(
        &self,
        pvc: &PersistentVolumeClaim,
        sc: &StorageClass,
        handle: &str,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = CreationContext::new(pvc, sc)
            .map_err(PlanError::Context)?
            .with_handle(handle)
            .with_pvc_lookup(self.lookup.clone());
        self.deletion(&context, pvc)
    }

    /// The staging context of claim `pvc`, bound to `pv`, on `node`.
    fn staging_context(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
    ) -> Result<StagingContext> {
        Ok(StagingContext::new(pvc, pv, node, read_only)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup.clone()))
    }

    /// The staging of claim `pvc`'s volume `pv` on `node` for a client
    /// pod. The unstaging phase is evaluated now too and recorded on the
    /// staging pod, for unstaging after the claim or volume is gone.
    pub fn staging(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        staging: &StagingFor<'_>,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = self
            .staging_context(pvc, pv, node, staging.read_only)?
            .attached_with(staging.publish_context);
        let evaluated = self.render(Phase::Staging, |c| c.render::<Staging>(&context))?;
        let unstaging = self.compiled.render::<Unstaging>(&context).ok();
        let claim = claim_name(pvc);
        let pod = self.origin().staging_pod(
            &evaluated,
            unstaging.as_ref(),
            &Publication {
                handle: staging.handle,
                target_path: staging.target_path,
                node: node.metadata.name.as_deref().unwrap_or_default(),
                claim: &claim,
                pv: pv.metadata.name.as_deref().unwrap_or_default(),
                client: staging.client,
                read_only: staging.read_only,
            },
        );
        Ok(Plan { evaluated, pod })
    }

    /// The staging of an ephemeral inline volume with the pod's
    /// `attributes` and `size` on `node` for a client pod.
    pub fn ephemeral_staging(
        &self,
        attributes: &std::collections::BTreeMap<String, String>,
        size: Option<u64>,
        node: &Node,
        staging: &StagingFor<'_>,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context =
            StagingContext::ephemeral(staging.handle, attributes, size, node, staging.read_only);
        let evaluated = self.render(Phase::Staging, |c| c.render::<Staging>(&context))?;
        let unstaging = self.compiled.render::<Unstaging>(&context).ok();
        let pod = self.origin().staging_pod(
            &evaluated,
            unstaging.as_ref(),
            &Publication {
                handle: staging.handle,
                target_path: staging.target_path,
                node: node.metadata.name.as_deref().unwrap_or_default(),
                claim: "",
                pv: "",
                client: staging.client,
                read_only: staging.read_only,
            },
        );
        Ok(Plan { evaluated, pod })
    }

    /// The unstaging of claim `pvc`'s volume `pv` on `node`, after the
    /// staging pod whose volume label is `staging_label`.
    pub fn unstaging(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
        staging_label: &str,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = self.staging_context(pvc, pv, node, read_only)?;
        let evaluated = self.render(Phase::Unstaging, |c| c.render::<Unstaging>(&context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().unstaging_pod(
                template,
                staging_label,
                node.metadata.name.as_deref().unwrap_or_default(),
                &claim_name(pvc),
            )
        });
        Ok(Plan { evaluated, pod })
    }

    /// The expansion of volume `pv` (of claim `pvc`, if it still has one)
    /// to at least `requested` bytes and at most `limit`.
    pub fn expansion(
        &self,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
        requested: u64,
        limit: Option<u64>,
    ) -> Result<Plan<ExpansionPhase>> {
        let context = ExpansionContext::new(pv, pvc, requested, limit)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::Expansion, |c| c.render::<Expansion>(&context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().expansion_pod(
                template,
                evaluated.timeout,
                handle_of(pv),
                requested,
                pv.metadata.name.as_deref().unwrap_or_default(),
            )
        });
        Ok(Plan { evaluated, pod })
    }

    /// The node expansion of claim `pvc`'s volume `pv`, staged on `node`
    /// by the pod named `staging_pod`, grown to `capacity` bytes.
    pub fn node_expansion(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
        staging_pod: &str,
        capacity: u64,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = self
            .staging_context(pvc, pv, node, read_only)?
            .expanded_to(capacity);
        let evaluated = self.render(Phase::NodeExpansion, |c| {
            c.render::<NodeExpansion>(&context)
        })?;
        let pod = self.origin().node_expansion_pod(
            &evaluated,
            staging_pod,
            capacity,
            node.metadata.name.as_deref().unwrap_or_default(),
            &claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }

    /// The attachment of claim `pvc`'s volume `pv` to `node`.
    pub fn attach(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
    ) -> Result<Plan<StagingPhase, Pod>> {
        let context = self.staging_context(pvc, pv, node, read_only)?;
        let evaluated = self.render(Phase::Attach, |c| c.render::<Attach>(&context))?;
        let pod = self.origin().attachment_pod(
            Phase::Attach,
            &evaluated.pod_template,
            evaluated.timeout,
            (
                handle_of(pv),
                node.metadata.name.as_deref().unwrap_or_default(),
            ),
            &claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }

    /// The detachment of claim `pvc`'s volume `pv` from `node`.
    pub fn detach(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context = self.staging_context(pvc, pv, node, false)?;
        let evaluated = self.render(Phase::Detach, |c| c.render::<Detach>(&context))?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().attachment_pod(
                Phase::Detach,
                template,
                evaluated.timeout,
                (
                    handle_of(pv),
                    node.metadata.name.as_deref().unwrap_or_default(),
                ),
                &claim_name(pvc),
            )
        });
        Ok(Plan { evaluated, pod })
    }

    /// The health check of claim `pvc`'s volume `pv`, staged on `node` by
    /// the pod named `staging_pod`, at `now`: its pod is named after the
    /// check's round (`now` in units of `every`), which the calls of one
    /// round share.
    pub fn health(
        &self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        node: &Node,
        read_only: bool,
        staging_pod: &str,
        now: std::time::SystemTime,
    ) -> Result<Plan<HealthPhase, Pod>> {
        let context = self.staging_context(pvc, pv, node, read_only)?;
        let evaluated = self.render(Phase::Health, |c| c.render::<Health>(&context))?;
        let every = evaluated.every.unwrap_or(DEFAULT_HEALTH_CHECK_EVERY);
        let since_epoch = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let round = since_epoch.as_secs() / every.as_secs().max(1);
        let pod = self.origin().health_pod(
            &evaluated,
            staging_pod,
            round,
            node.metadata.name.as_deref().unwrap_or_default(),
            &claim_name(pvc),
        );
        Ok(Plan { evaluated, pod })
    }

    /// The snapshot named `name` of volume `pv` (of claim `pvc`, if it
    /// still has one), with the VolumeSnapshotClass's `parameters`.
    pub fn snapshot_creation(
        &self,
        name: &str,
        parameters: &std::collections::BTreeMap<String, String>,
        pv: &PersistentVolume,
        pvc: Option<&PersistentVolumeClaim>,
    ) -> Result<Plan<SnapshotCreationPhase>> {
        let context = SnapshotContext::creation(name, parameters, pv, pvc)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::SnapshotCreation, |c| {
            c.render::<SnapshotCreation>(&context)
        })?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .snapshot_pod(Phase::SnapshotCreation, template, evaluated.timeout, name)
        });
        Ok(Plan { evaluated, pod })
    }

    /// The group snapshot named `name` of `members`, with the
    /// VolumeGroupSnapshotClass's `parameters`.
    pub fn group_snapshot_creation(
        &self,
        name: &str,
        parameters: &std::collections::BTreeMap<String, String>,
        members: &[GroupMember<'_>],
    ) -> Result<Plan<GroupSnapshotCreationPhase, Pod>> {
        let context = GroupSnapshotContext::creation(name, parameters, members)
            .map_err(PlanError::Context)?
            .with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::GroupSnapshotCreation, |c| {
            c.render::<GroupSnapshotCreation>(&context)
        })?;
        let pod = self.origin().snapshot_pod(
            Phase::GroupSnapshotCreation,
            &evaluated.pod_template,
            evaluated.timeout,
            name,
        );
        Ok(Plan { evaluated, pod })
    }

    /// The deletion of group snapshot `handle` and its members
    /// `snapshots` (each snapshot's handle, and its source's when known).
    pub fn group_snapshot_deletion(
        &self,
        handle: &str,
        snapshots: &[(String, Option<String>)],
    ) -> Result<Plan<OptionalPodPhase>> {
        let context =
            GroupSnapshotContext::deletion(handle, snapshots).with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::GroupSnapshotDeletion, |c| {
            c.render::<GroupSnapshotDeletion>(&context)
        })?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin().snapshot_pod(
                Phase::GroupSnapshotDeletion,
                template,
                evaluated.timeout,
                handle,
            )
        });
        Ok(Plan { evaluated, pod })
    }

    /// The deletion of snapshot `handle`, taken of the volume `source`
    /// when that is known.
    pub fn snapshot_deletion(
        &self,
        handle: &str,
        source: Option<&str>,
    ) -> Result<Plan<OptionalPodPhase>> {
        let context =
            SnapshotContext::deletion(handle, source).with_pvc_lookup(self.lookup.clone());
        let evaluated = self.render(Phase::SnapshotDeletion, |c| {
            c.render::<SnapshotDeletion>(&context)
        })?;
        let pod = evaluated.pod_template.as_ref().map(|template| {
            self.origin()
                .snapshot_pod(Phase::SnapshotDeletion, template, evaluated.timeout, handle)
        });
        Ok(Plan { evaluated, pod })
    }
}
