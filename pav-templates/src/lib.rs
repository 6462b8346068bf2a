//! PaV's templating: the evaluation of a PavProvisioner spec exactly as the
//! PaV user guide defines it, on [minijinja].
//!
//! Every string field under `spec` except `provisioningModes` is a Jinja
//! template. [`CompiledProvisioner`] checks an object against the guide's
//! rules and compiles all its templates once; its
//! [`render`](CompiledProvisioner::render) then evaluates one phase (a
//! [`phase::Section`], such as [`phase::Staging`]) for one volume, in a
//! sandbox bounded by fuel, recursion depth and output size.
//!
//! Rendering asks no particular stack of its caller: each render runs with
//! [`engine::RENDER_STACK_BYTES`] of stack, enough for the deepest value
//! its fuel can build, on the calling thread's own stack when that has so
//! much left, else on one mapped for the call. Threads that render often
//! (the pav drivers' runtime threads) are best made that large, which
//! costs address space only.
//!
//! ```
//! use pav_templates::phase::Staging;
//! use pav_templates::{CompiledProvisioner, samples};
//!
//! let provisioner = CompiledProvisioner::from_yaml(r#"
//! apiVersion: pav.albertofaria.github.io/v1alpha1
//! kind: PavProvisioner
//! metadata: { name: hello-world }
//! spec:
//!   provisioningModes: [Dynamic]
//!   volumeCreation:
//!     capacity: "{{ requestedMinCapacity }}"
//!   volumeStaging:
//!     podTemplate:
//!       spec:
//!         restartPolicy: Never
//!         containers:
//!           - name: greeter
//!             image: busybox
//!             command:
//!               - sh
//!               - -c
//!               - |
//!                 {% set greeting = params.greeting | default('Hello world!') %}
//!                 mkdir /pav/volume && echo {{ greeting | tobash }} > /pav/volume/greeting
//! "#).unwrap();
//!
//! let staging = provisioner.render::<Staging>(&samples::staging_context()).unwrap();
//! let command = staging.pod_template.spec.unwrap().containers[0].command.clone().unwrap();
//! assert_eq!(command[2], "mkdir /pav/volume && echo 'Hello world!' > /pav/volume/greeting");
//! ```
//!
//! | rule | where |
//! |---|---|
//! | templates must yield strings or numbers; undefined output is an error | [`engine`] |
//! | `{% set yaml = true %}` parses the output as YAML (not recursively) | [`CompiledProvisioner`] |
//! | a line holding only a `{% ... %}` block disappears (trim and lstrip blocks) | [`engine`] |
//! | filters `tobash`, `tojson`; function `get_pvc(name, namespace)` | [`engine`], [`context::PvcLookup`] |
//! | per-phase variables | [`context`] |
//! | defaults and rules of each field | each phase's module in [`phase`] ([`phase::validation`] and siblings) |
//! | every error names provisioner, field path and template line | [`Error`] |

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

pub mod context;
pub mod duration;
pub mod engine;
pub mod error;
pub mod model;
pub mod phase;
mod provisioner;
pub mod quantity;
pub mod samples;
pub mod volume;
pub mod yaml;

pub use context::{
    CapacityContext, CreationContext, ExpansionContext, GroupMember, GroupSnapshotContext,
    ModificationContext, PopulationContext, PvcLookup, PvcMap, SnapshotContext, Source,
    StagingContext, ValidationContext,
};
pub use error::{Error, Location, Result};
pub use model::{
    LifecycleMode, PavProvisioner, PavProvisionerSpec, PavProvisionerStatus, Phases, PopulatedKind,
    ProvisioningMode, StagingPer, TokenRequest, token_file_name,
};
pub use phase::{
    CapacityPhase, CreationPhase, ExpansionPhase, GroupSnapshotCreationPhase, HealthPhase,
    ModificationPhase, OptionalPodPhase, Phase, SnapshotCreationPhase, StagingPhase,
    ValidationPhase,
};
pub use provisioner::{CompiledProvisioner, Problems};
pub use volume::{AccessMode, DataSourceKind, VolumeMode};
