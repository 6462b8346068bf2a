//! The sections pav adds to PaV: expansion, node expansion, snapshots,
//! data sources and topology: what `pav check` refuses, what each context
//! holds, and how each phase evaluates.

mod common;
use common::provisioner;

use pav_templates::phase::{
    Creation, Expansion, NodeExpansion, SnapshotCreation, SnapshotDeletion,
};
use pav_templates::{
    CompiledProvisioner, CreationContext, DataSourceKind, ExpansionContext, PopulationContext,
    SnapshotContext, Source, StagingContext, samples,
};

const BASE: &str = "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi}\nvolumeStaging: {podTemplate: {}}\n";

fn problems(extra: &str) -> Vec<String> {
    common::problems(&format!("{BASE}{extra}"))
}

fn compiled(extra: &str) -> CompiledProvisioner {
    provisioner(&format!("{BASE}{extra}")).unwrap_or_else(|p| panic!("unexpected problems:\n{p}"))
}

#[test]
fn sections_that_need_another_are_refused_without_it() {
    assert_eq!(
        problems("volumeNodeExpansion: {podTemplate: {}}\n"),
        [
            "provisioner \"p\", field spec.volumeNodeExpansion: may only be specified together with spec.volumeExpansion"
        ]
    );
    assert_eq!(
        problems("snapshotDeletion: {}\n"),
        [
            "provisioner \"p\", field spec.snapshotDeletion: may only be specified together with spec.snapshotCreation"
        ]
    );
    assert_eq!(
        problems("dataSources: [VolumeSnapshot]\n"),
        [
            "provisioner \"p\", field spec.dataSources: lists VolumeSnapshot, which needs spec.snapshotCreation (the snapshots restored are the ones it takes)"
        ]
    );
    assert_eq!(
        problems("volumeExpansion: {}\nvolumeNodeExpansion: {timeout: 1m}\n"),
        ["provisioner \"p\", field spec.volumeNodeExpansion.podTemplate: is required"]
    );
    assert!(problems("volumeExpansion: {}\nvolumeNodeExpansion: {podTemplate: {}}\nsnapshotCreation: {}\nsnapshotDeletion: {}\ndataSources: [VolumeSnapshot, PersistentVolumeClaim]\n").is_empty());
}

#[test]
fn data_sources_are_a_literal_list_of_kinds() {
    assert_eq!(
        problems("dataSources: [PersistentVolumeClaim, Volume, PersistentVolumeClaim]\n"),
        [
            "provisioner \"p\", field spec.dataSources[1]: \"Volume\" is not one of VolumeSnapshot, PersistentVolumeClaim",
            "provisioner \"p\", field spec.dataSources[2]: is listed twice",
        ]
    );
    assert_eq!(
        problems("dataSources: \"{{ x }}\"\n"),
        [
            "provisioner \"p\", field spec.dataSources: must be a non-empty list of VolumeSnapshot and/or PersistentVolumeClaim (it is not a template), not \"{{ x }}\""
        ]
    );
    let static_only = provisioner(
        "provisioningModes: [Static]\nvolumeStaging: {podTemplate: {}}\ndataSources: [PersistentVolumeClaim]\n",
    )
    .unwrap_err();
    assert_eq!(
        static_only.to_string(),
        "provisioner \"p\", field spec.dataSources: may only be specified if spec.provisioningModes contains Dynamic"
    );
    assert_eq!(
        compiled("dataSources: [PersistentVolumeClaim]\n").data_sources(),
        [DataSourceKind::PersistentVolumeClaim]
    );
}

#[test]
fn topology_is_node_names_checked_when_literal_and_when_evaluated() {
    let refused = provisioner(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi, topology: [node-a, Node_B]}\nvolumeStaging: {podTemplate: {}}\n",
    )
    .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "provisioner \"p\", field spec.volumeCreation.topology: \"Node_B\" is not a node name (a DNS subdomain: at most 253 lowercase alphanumerics, '-' or '.')"
    );
    // The sample claim carries no selected node: a template that names
    // none evaluates to nothing a node could be.
    let provisioner = provisioner(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: 1Gi, topology: \"{% set yaml = true %}[{{ selectedNode | tojson }}]\"}\nvolumeStaging: {podTemplate: {}}\n",
    )
    .unwrap();
    let error = provisioner
        .render::<Creation>(&samples::creation_context())
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "provisioner \"p\", field spec.volumeCreation.topology: must be a node name or a list of node names, not null"
    );
    let mut pvc = samples::pvc();
    pvc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("volume.kubernetes.io/selected-node".into(), "node-7".into());
    let context = CreationContext::new(&pvc, &samples::storage_class()).unwrap();
    let creation = provisioner.render::<Creation>(&context).unwrap();
    assert_eq!(creation.topology, Some(vec!["node-7".to_owned()]));
}

#[test]
fn the_creation_context_has_its_source() {
    let provisioner = provisioner(
        "provisioningModes: [Dynamic]\nvolumeCreation: {capacity: \"{{ source.capacity if source else 1 }}\", handle: \"{{ source.kind if source else 'empty' }}-{{ source.handle if source else '' }}\"}\nvolumeStaging: {podTemplate: {}}\n",
    )
    .unwrap();
    let context = samples::creation_context();
    let empty = provisioner.render::<Creation>(&context).unwrap();
    assert_eq!(empty.handle.as_deref(), Some("empty-"));
    let restored = provisioner
        .render::<Creation>(&context.with_source(&Source {
            kind: DataSourceKind::VolumeSnapshot,
            handle: "snap-1".into(),
            capacity: 5 << 20,
        }))
        .unwrap();
    assert_eq!(restored.handle.as_deref(), Some("VolumeSnapshot-snap-1"));
    assert_eq!(restored.capacity, Some(5 << 20));
}

#[test]
fn expansion_evaluates_its_capacity_from_the_request_and_the_volume() {
    let provisioner = compiled(
        "volumeExpansion:\n  capacity: \"{{ [requestedMinCapacity, capacity * 2] | max }}\"\n  podTemplate: {spec: {containers: [{name: c, image: i, args: [\"{{ handle }}\", \"{{ pvc.metadata.name }}\", \"{{ volumeMode }}\"]}]}}\n",
    );
    let pv = samples::pv();
    let capacity = pav_templates::context::pv_capacity(&pv).unwrap();
    let context = ExpansionContext::new(&pv, Some(&samples::pvc()), capacity + 1, None).unwrap();
    let expansion = provisioner.render::<Expansion>(&context).unwrap();
    assert_eq!(expansion.capacity, Some(capacity * 2));
    let args = expansion.pod_template.unwrap().spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    let handle = pv.spec.unwrap().csi.unwrap().volume_handle;
    assert_eq!(
        args,
        [
            handle,
            samples::pvc().metadata.name.unwrap(),
            "Filesystem".to_owned()
        ]
    );
    // A volume without a claim: `pvc` is none.
    let orphan = ExpansionContext::new(&samples::pv(), None, capacity + 1, None).unwrap();
    let error = provisioner.render::<Expansion>(&orphan).unwrap_err();
    assert!(error.to_string().contains("podTemplate"), "{error}");
}

#[test]
fn node_expansion_sees_the_new_capacity() {
    let provisioner = compiled(
        "volumeExpansion: {}\nvolumeNodeExpansion: {podTemplate: {spec: {containers: [{name: c, image: i, args: [\"{{ capacity }}\"]}]}}}\n",
    );
    let context = StagingContext::new(&samples::pvc(), &samples::pv(), &samples::node(), false)
        .unwrap()
        .expanded_to(12345);
    let phase = provisioner.render::<NodeExpansion>(&context).unwrap();
    assert_eq!(
        phase.pod_template.spec.unwrap().containers[0].args,
        Some(vec!["12345".to_owned()])
    );
}

#[test]
fn snapshots_see_their_source_and_defaults() {
    let provisioner = compiled(
        "snapshotCreation:\n  handle: \"{{ defaultHandle }}.{{ sourceHandle }}\"\n  size: \"{{ sourceCapacity }}\"\n  podTemplate: {spec: {containers: [{name: c, image: i, args: [\"{{ snapshotName }}\", \"{{ params.tier }}\"]}]}}\nsnapshotDeletion:\n  podTemplate: {spec: {containers: [{name: c, image: i, args: [\"{{ snapshotHandle }}\", \"{{ sourceHandle or 'unknown' }}\"]}]}}\n",
    );
    let pv = samples::pv();
    let handle = pv.spec.clone().unwrap().csi.unwrap().volume_handle;
    let params = [("tier".to_owned(), "cold".to_owned())].into();
    let context = SnapshotContext::creation("snapshot-1", &params, &pv, None).unwrap();
    let creation = provisioner.render::<SnapshotCreation>(&context).unwrap();
    assert_eq!(creation.handle, Some(format!("snapshot-1.{handle}")));
    assert_eq!(
        creation.size,
        Some(pav_templates::context::pv_capacity(&pv).unwrap())
    );
    assert_eq!(
        creation.pod_template.unwrap().spec.unwrap().containers[0].args,
        Some(vec!["snapshot-1".to_owned(), "cold".to_owned()])
    );
    let deletion = provisioner
        .render::<SnapshotDeletion>(&SnapshotContext::deletion("snap-9", None))
        .unwrap();
    assert_eq!(
        deletion.pod_template.unwrap().spec.unwrap().containers[0].args,
        Some(vec!["snap-9".to_owned(), "unknown".to_owned()])
    );
}

#[test]
fn token_requests_are_distinct_audiences_of_distinct_files_staged_per_pod() {
    compiled("tokenRequests: [{audience: sts.example.com, expirationSeconds: 3600}]\n");
    compiled("tokenRequests: [{audience: a}, {audience: 'https://b.example/x'}]\n");
    let field = |path: &str| format!("provisioner \"p\", field spec.tokenRequests{path}: ");
    let cases = [
        (
            "tokenRequests: []\n",
            vec![format!(
                "{}must list at least one audience when present",
                field("")
            )],
        ),
        (
            "tokenRequests: [{audience: a, expirationSeconds: 60}]\n",
            vec![format!(
                "{}must be at least 600 (10 minutes), not 60",
                field("[0].expirationSeconds")
            )],
        ),
        (
            "tokenRequests: [{audience: ''}]\n",
            vec![format!("{}must be 1 to 253 bytes", field("[0].audience"))],
        ),
        (
            "tokenRequests: [{audience: a}, {audience: a}]\n",
            vec![format!("{}repeats audience \"a\"", field("[1]"))],
        ),
        (
            "tokenRequests: [{audience: 'x/y'}, {audience: 'x:y'}]\n",
            vec![format!(
                "{}audiences \"x/y\" and \"x:y\" would share the file /pav/tokens/x_y",
                field("[1]")
            )],
        ),
        (
            "tokenRequests: [{audience: a, lifetime: 1h}]\n",
            vec![format!(
                "{}must be a list of {{audience, expirationSeconds}} (it is not a template), not a list",
                field("")
            )],
        ),
        (
            "stagingPer: Node\ntokenRequests: [{audience: a}]\n",
            vec![format!(
                "{}needs stagingPer: Pod: kubelet gives tokens with each client pod's publish, which a volume staged per node does not stage",
                field("")
            )],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(problems(spec), want, "{spec}");
    }
}

const POPULATION: &str =
    "volumePopulation: {podTemplate: {spec: {containers: [{name: c, image: i}]}}}\n";

#[test]
fn populated_from_names_distinct_kinds_and_comes_with_volume_population() {
    let populating = compiled(&format!(
        "populatedFrom: [{{apiGroup: example.com, kind: Files}}, {{apiGroup: example.com, kind: Seed}}]\n{POPULATION}"
    ));
    let kinds: Vec<(&str, &str)> = (populating.populated_from().iter())
        .map(|k| (k.api_group.as_str(), k.kind.as_str()))
        .collect();
    assert_eq!(kinds, [("example.com", "Files"), ("example.com", "Seed")]);
    assert!(compiled("").populated_from().is_empty());

    let field = |path: &str| format!("provisioner \"p\", field spec.populatedFrom{path}: ");
    let cases = [
        (
            POPULATION.to_owned(),
            vec![format!(
                "{}is required with spec.volumePopulation: it names the kinds of object volumes are filled from",
                field("")
            )],
        ),
        (
            "populatedFrom: [{apiGroup: example.com, kind: Files}]\n".to_owned(),
            vec![format!(
                "{}may only be specified together with spec.volumePopulation",
                field("")
            )],
        ),
        (
            format!("populatedFrom: []\n{POPULATION}"),
            vec![format!(
                "{}must list at least one kind when present",
                field("")
            )],
        ),
        (
            format!(
                "populatedFrom: [{{apiGroup: a.io, kind: F}}, {{apiGroup: a.io, kind: F}}]\n{POPULATION}"
            ),
            vec![format!("{}repeats a kind", field("[1]"))],
        ),
        (
            format!(
                "populatedFrom: [{{apiGroup: a.io, kind: 'Config Map'}}, {{apiGroup: Example.COM, kind: X}}]\n{POPULATION}"
            ),
            vec![
                format!(
                    "{}\"Config Map\" is no kind: 1 to 63 ASCII letters and digits, a letter first",
                    field("[0].kind")
                ),
                format!("{}\"Example.COM\" is no API group", field("[1].apiGroup")),
            ],
        ),
        (
            format!("populatedFrom: [{{kind: ConfigMap}}]\n{POPULATION}"),
            vec![format!(
                "{}must name an API group: a claim's dataSourceRef names no kind of the core group but PersistentVolumeClaim",
                field("[0].apiGroup")
            )],
        ),
        (
            format!(
                "populatedFrom: [{{apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot}}]\n{POPULATION}"
            ),
            vec![format!(
                "{}VolumeSnapshots are spec.dataSources: volume creation restores them",
                field("[0]")
            )],
        ),
        (
            format!("populatedFrom: ConfigMap\n{POPULATION}"),
            vec![format!(
                "{}must be a list of {{apiGroup, kind}} (it is not a template), not \"ConfigMap\"",
                field("")
            )],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(problems(&spec), want, "{spec}");
    }
    assert_eq!(
        problems("populatedFrom: [{apiGroup: a.io, kind: F}]\nvolumePopulation: {timeout: 1m}\n"),
        ["provisioner \"p\", field spec.volumePopulation.podTemplate: is required"]
    );
}

#[test]
fn population_sees_the_volume_its_claim_and_the_data_source() {
    let provisioner = compiled(
        "populatedFrom: [{apiGroup: a.io, kind: F}]\n\
         volumePopulation:\n  podTemplate:\n    spec:\n      containers:\n        - name: c\n          image: i\n          args:\n            - '{{ handle }} {{ capacity }} {{ pvc.metadata.name }} {{ dataSource.kind }} {{ dataSource.spec.greeting }}'\n",
    );
    let source = serde_json::json!({
        "apiVersion": "a.io/v1",
        "kind": "F",
        "metadata": {"name": "seed", "namespace": "default"},
        "spec": {"greeting": "hello"},
    });
    let context = PopulationContext::new(&samples::pv(), &samples::pvc(), &source).unwrap();
    let evaluated = provisioner
        .render::<pav_templates::phase::Population>(&context)
        .unwrap();
    let args = evaluated.pod_template.spec.unwrap().containers[0]
        .args
        .clone();
    let handle = samples::pv().spec.unwrap().csi.unwrap().volume_handle;
    let claim = samples::pvc().metadata.name.unwrap();
    assert_eq!(
        args,
        Some(vec![format!("{handle} 1073741824 {claim} F hello")])
    );
}
