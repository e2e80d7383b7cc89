//! Tenancy (SPEC §9), end to end with a real tenant identity: a ServiceAccount token whose Role
//! allows Secrets in its own namespace only. No copy lands in a namespace that did not consent,
//! the platform's sources win names a tenant took first, and nothing a tenant can read names
//! objects it could not (not even a CopyRule Event, read with `view` on `default`).

use crate::common;

use std::collections::BTreeMap;

use common::{tenant::Tenant, *};
use copyrator::{
    copyrule::{CopyRuleSpec, DeletionPolicy},
    marks,
    model::Kind,
};
use k8s_openapi::{
    ByteString,
    api::{
        core::v1::{Event, Namespace, Secret},
        rbac::v1::{RoleBinding, RoleRef, Subject},
    },
};
use kube::{
    Api,
    api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// copyrator for `env`, trusting only `namespaces`.
async fn copyrator_trusting(env: TestEnv, namespaces: &str) -> Harness {
    Harness::start_in(
        env,
        Options {
            extra: vec![format!("--trusted-namespaces={namespaces}")],
            ..Default::default()
        },
    )
    .await
}

fn cacerts(value: &str, annotations: &[(&str, &str)]) -> Secret {
    secret(
        "cacerts",
        &[(marks::SOURCE_LABEL, "true")],
        annotations,
        &[("ca.crt", value)],
    )
}

async fn copy_value(env: &TestEnv, ns: &str) -> Option<String> {
    let s = env.secrets(ns).get_opt("cacerts").await.ok()??;
    secret_value(&s, "ca.crt")
}

async fn assert_no_copy(env: &TestEnv, namespaces: &[&str]) {
    for ns in namespaces {
        assert!(
            env.secrets(ns).get_opt("cacerts").await.unwrap().is_none(),
            "no copy may land in {ns}"
        );
    }
}

/// A predicate for the waits: a Warning Event with `reason` on the source `cacerts` whose
/// message satisfies `check` (the sign that copyrator planned the source and decided, before
/// asserting what it did not write).
fn source_event(reason: &str, check: impl Fn(&str) -> bool) -> impl Fn(&Event) -> bool {
    let reason = reason.to_string();
    move |e| source_warning(e, &reason) && e.message.as_deref().is_some_and(&check)
}

/// A Warning Event with `reason` on the source `cacerts`.
fn source_warning(e: &Event, reason: &str) -> bool {
    e.involved_object.name.as_deref() == Some("cacerts")
        && e.reason.as_deref() == Some(reason)
        && e.type_.as_deref() == Some("Warning")
}

async fn annotate(env: &TestEnv, ns: &str, accept_from: Option<&str>) {
    Api::<Namespace>::all(env.client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                marks::ACCEPT_FROM_ANNOTATION: accept_from
            }}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_tenant_cannot_push_into_namespaces_that_did_not_consent() {
    // The API server verified: kubectl's warnings, which turn on consent, are its (SPEC §9.8).
    let Some(client_ca) = client_ca_arg() else {
        return;
    };
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let istio = env.namespace("istio-system", &[]).await;
    let labelled = env.namespace("labelled", &[("registry", "enabled")]).await;
    let t = Harness::start_in(
        env,
        Options {
            extra: vec![format!("--trusted-namespaces={platform}"), client_ca],
            ..Default::default()
        },
    )
    .await;

    // The identity is real: the API server refuses the tenant outside its namespace.
    let refused = tenant
        .secrets(&istio)
        .create(&PostParams::default(), &cacerts("x", &[]))
        .await
        .expect_err("the tenant may not write in istio-system");
    assert!(refused.to_string().contains("forbidden"), "{refused}");

    // Explicit push: kubectl shows why at once; no copy lands.
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cacerts\n  namespace: {}\n  labels:\n    {}: \"true\"\n  annotations:\n    {}: {istio}\nstringData:\n  ca.crt: tenant\n",
        tenant.namespace,
        marks::SOURCE_LABEL,
        marks::NAMESPACES_ANNOTATION
    );
    let (ok, stderr) = tenant.kubectl_apply(&manifest).await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "Warning: namespace {istio} does not accept copies from {}",
            tenant.namespace
        )),
        "kubectl shows the refusal: {stderr}"
    );
    let note = t
        .wait_for_any::<Event>(
            &tenant.namespace,
            "a CopyRefused Event on cacerts",
            source_event("CopyRefused", |m| {
                m.starts_with("namespaces it names that do not accept copies from")
            }),
        )
        .await
        .message
        .unwrap();
    // It names no namespace but the tenant's own, and counts none.
    assert_eq!(
        note,
        format!(
            "namespaces it names that do not accept copies from {0} get no copy (each needs the annotation {1}: {0})",
            tenant.namespace,
            marks::ACCEPT_FROM_ANNOTATION
        )
    );
    assert_no_copy(&t, &[&istio]).await;

    // A match-all selector: refused everywhere, also in namespaces that match by label; the
    // Event says so without counting the namespaces (a tenant cannot see them).
    tenant
        .secrets(&tenant.namespace)
        .patch(
            "cacerts",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                marks::NAMESPACES_ANNOTATION: null,
                marks::NAMESPACE_SELECTOR_ANNOTATION: "!no-such-label",
            }}})),
        )
        .await
        .unwrap();
    t.wait_for_any::<Event>(
        &tenant.namespace,
        "a CopyRefused Event on cacerts",
        source_event("CopyRefused", |m| {
            m.starts_with("no namespace that accepts copies from") && !m.contains(&istio)
        }),
    )
    .await;
    assert_no_copy(&t, &[&istio, &labelled, &platform, "default"]).await;
    assert!(t.metric("copyrator_refused_targets_total").await >= 2.0);

    // Consent: istio-system accepts tenant-a, and gets its copy; the others still do not.
    annotate(&t, &istio, Some(&format!("other, {}", tenant.namespace))).await;
    t.wait_value::<Secret>(&istio, "cacerts", "ca.crt", "tenant")
        .await;
    assert_no_copy(&t, &[&labelled, &platform]).await;

    // Consent withdrawn: the copy goes.
    annotate(&t, &istio, None).await;
    t.wait_gone::<Secret>(&istio, "cacerts").await;
    t.finish().await;
}

#[tokio::test]
async fn the_platform_source_wins_a_name_a_tenant_took_first() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let shared = env.namespace("shared", &[]).await;
    let apps = env.namespace("apps", &[]).await;
    annotate(&env, &shared, Some("tenant-*")).await;
    let t = copyrator_trusting(env, &platform).await;
    let targets = format!("{shared},{apps}");

    // The tenant is first, in a namespace that accepts it and in one that does not.
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &cacerts("tenant", &[(marks::NAMESPACES_ANNOTATION, &targets)]),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&shared, "cacerts", "ca.crt", "tenant")
        .await;
    t.wait_for_any::<Event>(
        &tenant.namespace,
        "a CopyRefused Event on cacerts",
        source_event("CopyRefused", |_| true),
    )
    .await;
    assert_no_copy(&t, &[&apps]).await;

    // The platform's source for the same name: it takes both over, the tenant's copy too.
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &cacerts("platform", &[(marks::NAMESPACES_ANNOTATION, &targets)]),
        )
        .await
        .unwrap();
    let taken = t
        .wait_value::<Secret>(&shared, "cacerts", "ca.crt", "platform")
        .await;
    t.wait_value::<Secret>(&apps, "cacerts", "ca.crt", "platform")
        .await;
    let annotations = taken.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(marks::SOURCE_ANNOTATION),
        Some(&format!("{platform}/cacerts"))
    );
    let platform_uid = t
        .secrets(&platform)
        .get("cacerts")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_eq!(
        taken
            .metadata
            .labels
            .unwrap_or_default()
            .get(marks::SOURCE_UID_LABEL),
        platform_uid.as_ref()
    );

    // The tenant hears that it lost the name, without learning who has it.
    let note = t
        .wait_for_any::<Event>(
            &tenant.namespace,
            "a CopyConflict Event on cacerts",
            source_event("CopyConflict", |_| true),
        )
        .await
        .message
        .unwrap();
    assert!(
        note.contains("higher precedence") && !note.contains(&platform) && !note.contains(&shared),
        "{note}"
    );

    // Changing its source gets the tenant nothing back.
    let conflicts = "copyrator_conflicts_total{reason=\"other_rule\"}";
    let before = t.metric(conflicts).await;
    let mut changed = tenant
        .secrets(&tenant.namespace)
        .get("cacerts")
        .await
        .unwrap();
    changed.data = Some(BTreeMap::from([(
        "ca.crt".to_string(),
        ByteString(b"tenant-2".to_vec()),
    )]));
    tenant
        .secrets(&tenant.namespace)
        .replace("cacerts", &PostParams::default(), &changed)
        .await
        .unwrap();
    t.wait_metric(conflicts, "the tenant's change planned", |v| v > before)
        .await;
    assert_eq!(copy_value(&t, &shared).await.as_deref(), Some("platform"));
    t.finish().await;
}

#[tokio::test]
async fn a_retained_copy_is_not_taken_over_by_a_tenant() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let shared = env.namespace("shared", &[]).await;
    annotate(&env, &shared, Some(&tenant.namespace)).await;
    let t = copyrator_trusting(env, &platform).await;

    // A CopyRule copies the platform's cacerts with Retain, then goes away: the copy stays.
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("cacerts", &[], &[], &[("ca.crt", "platform")]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "retain",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::Secret.as_str().into(),
                source_namespace: platform.clone(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: Some("cacerts".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec![shared.clone()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Retain,
                conflict_policy: Default::default(),
                image_pull_secret: false,
                read_only: None,
                keys: None,
                target: None,
            },
        )
        .await;
    t.wait_value::<Secret>(&shared, "cacerts", "ca.crt", "platform")
        .await;
    let rule_jobs = "copyrator_jobs_total{kind=\"rule\",outcome=\"ok\"}";
    let before = t.metric(rule_jobs).await;
    t.rules().delete(&name, &Default::default()).await.unwrap();
    t.wait_metric(rule_jobs, "the deleted rule synced", |v| v > before)
        .await;

    // The tenant, welcome in `shared`, asks for the same name: the retained copy is kept.
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &cacerts("tenant", &[(marks::NAMESPACES_ANNOTATION, &shared)]),
        )
        .await
        .unwrap();
    let note = t
        .wait_for_any::<Event>(
            &tenant.namespace,
            "a CopyConflict Event on cacerts",
            source_event("CopyConflict", |_| true),
        )
        .await
        .message
        .unwrap();
    assert!(
        note.contains("retained copy of higher precedence") && !note.contains(&name),
        "{note}"
    );
    let copy = t.secrets(&shared).get("cacerts").await.unwrap();
    assert_eq!(secret_value(&copy, "ca.crt").as_deref(), Some("platform"));
    assert_eq!(
        copy.metadata
            .annotations
            .unwrap_or_default()
            .get(marks::RULE_ANNOTATION),
        Some(&format!("copyrule/{name}"))
    );
    t.finish().await;
}

/// `--trusted-namespaces '*'`: every source is trusted, as on a single-team cluster.
#[tokio::test]
async fn trusting_every_namespace_copies_without_consent() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "team").await;
    let apps = env.namespace("apps", &[]).await;
    let t = copyrator_trusting(env, "*").await;
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &cacerts("team", &[(marks::NAMESPACES_ANNOTATION, &apps)]),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&apps, "cacerts", "ca.crt", "team")
        .await;
    // The job that wrote the copy has finished (and published what it had to say).
    t.wait_metric(
        "copyrator_jobs_total{kind=\"source\",outcome=\"ok\"}",
        "the source job finished",
        |v| v >= 1.0,
    )
    .await;
    let events = t
        .api::<Event>(&tenant.namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(!events.iter().any(|e| source_warning(e, "CopyRefused")));
    t.finish().await;
}

/// A tenant's copy cannot be laundered into a source (SPEC §9.6): its copy lands in a
/// namespace that accepts it, carrying the labels a CopyRule's source selector asks for and the
/// name another CopyRule names, and neither CopyRule takes it for a source, through the
/// selector watches, the jobs or the full resync. Labelling a copy as a source is denied.
#[tokio::test]
async fn a_tenant_copy_is_never_a_source() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let shared = env.namespace("shared", &[]).await;
    annotate(&env, &shared, Some(&tenant.namespace)).await;
    let label = env.name("bundles");
    let teams = [
        env.namespace("team-x", &[(&label, "yes")]).await,
        env.namespace("team-y", &[(&label, "yes")]).await,
    ];
    // Short resyncs: "no copy" below is asserted after full resyncs planned the cluster.
    let t = Harness::start_in(
        env,
        Options {
            resync_interval: "2s",
            extra: vec![format!("--trusted-namespaces={platform}")],
            ..Default::default()
        },
    )
    .await;
    let every_team = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: Some([(label.clone(), "yes".to_string())].into()),
        match_expressions: None,
    };
    let by_selector = t
        .copy_rule(
            "ca-bundles",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::Secret.as_str().into(),
                source_namespace: shared.clone(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: None,
                source_selector: Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                        match_labels: Some([("app".to_string(), "ca".to_string())].into()),
                        match_expressions: None,
                    },
                ),
                namespace_selector: Some(every_team.clone()),
                namespaces: vec![],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: Default::default(),
                image_pull_secret: false,
                read_only: None,
                keys: None,
                target: None,
            },
        )
        .await;
    let by_name = t
        .copy_rule(
            "cacerts",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::Secret.as_str().into(),
                source_namespace: shared.clone(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: Some("cacerts".into()),
                source_selector: None,
                namespace_selector: Some(every_team),
                namespaces: vec![],
                exclude_namespaces: vec![],
                target_name: Some("cacerts-by-name".into()),
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: Default::default(),
                image_pull_secret: false,
                read_only: None,
                keys: None,
                target: None,
            },
        )
        .await;

    // The tenant's source, labelled as the selector asks, copied into `shared` (consented).
    let mut source = cacerts("tenant", &[(marks::NAMESPACES_ANNOTATION, &shared)]);
    source
        .metadata
        .labels
        .get_or_insert_default()
        .insert("app".into(), "ca".into());
    tenant
        .secrets(&tenant.namespace)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let copy = t
        .wait_value::<Secret>(&shared, "cacerts", "ca.crt", "tenant")
        .await;
    let labels = copy.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("ca"), "carried");

    // Two full resyncs after the copy landed planned everything once more.
    let resyncs = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    let seen = t.metric(resyncs).await;
    t.wait_metric(resyncs, "two more full resyncs", |v| v >= seen + 2.0)
        .await;
    for team in &teams {
        assert_no_copy(&t, &[team.as_str()]).await;
        assert!(
            t.secrets(team)
                .get_opt("cacerts-by-name")
                .await
                .unwrap()
                .is_none(),
            "the CopyRule naming the copy took it for its source: copy in {team}"
        );
    }
    let copy = t.secrets(&shared).get("cacerts").await.unwrap();
    assert!(
        !copy
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(marks::SOURCE_LABEL),
        "copyrator labelled its own copy as a CopyRule's source"
    );
    for name in [&by_selector, &by_name] {
        let status = t
            .rules()
            .get(name)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        assert_eq!(status.synced_copies, 0, "{name}: {status:?}");
    }

    // Opting a copy in as a source by hand is denied, with a message that says why.
    let denied = t
        .secrets(&shared)
        .patch(
            "cacerts",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {marks::SOURCE_LABEL: "true"}}})),
        )
        .await
        .expect_err("a copy cannot be opted in as a source");
    assert!(
        denied.to_string().contains("a copy is never a source"),
        "{denied}"
    );
    t.finish().await;
}

/// SPEC §9.5: CopyRule Events name target namespaces, so they live in kube-system, not in
/// `default` where tenants are often given `view`. An administrator still finds them with
/// `kubectl describe copyrule` and `copyrator explain`; a tenant with `view` on `default` reads
/// none of them.
#[tokio::test]
async fn a_tenant_with_view_on_default_reads_no_copy_rule_event() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let src = env.namespace("rule-src", &[]).await;
    let taken = env.namespace("rule-taken", &[]).await;
    // What `view` grants: this API server runs no controller manager to aggregate `view`, so
    // the tenant is bound to the role `view` aggregates (Events get/list/watch among it).
    let binding = env.name("tenant-view");
    let bindings = Api::<RoleBinding>::namespaced(env.client.clone(), "default");
    bindings
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: ObjectMeta {
                    name: Some(binding.clone()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: "system:aggregate-to-view".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "tenant".into(),
                    namespace: Some(tenant.namespace.clone()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();
    let t = Harness::start_in(env, Options::default()).await;

    // A CopyRule whose copy finds the name taken: a CopyConflict Event naming the target.
    t.config_maps(&taken)
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[], &[("theirs", "1")]),
        )
        .await
        .unwrap();
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
    let rule = t
        .copy_rule(
            "taken",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::ConfigMap.as_str().into(),
                source_namespace: src.clone(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: Some("settings".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec![taken.clone()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: Default::default(),
                image_pull_secret: false,
                read_only: None,
                keys: None,
                target: None,
            },
        )
        .await;

    // The administrator sees it where users look: `kubectl describe`, and explain's lastEvent.
    eventually(CONVERGE, "the conflict in kubectl describe", || async {
        let out = kubectl(&["describe", "copyrule", &rule], "").await;
        (out.stdout.contains("CopyConflict") && out.stdout.contains(&taken)).then_some(())
    })
    .await;
    let about_rule = format!("involvedObject.kind=CopyRule,involvedObject.name={rule}");
    let in_kube_system = Api::<Event>::namespaced(t.client.clone(), "kube-system")
        .list(&ListParams::default().fields(&about_rule))
        .await
        .unwrap();
    assert!(
        !in_kube_system.items.is_empty(),
        "the rule's Events live in kube-system"
    );
    let out = run_copyrator(&["explain", "namespace", &taken, "-o", "json"]).await;
    assert!(out.success, "{}", out.stderr);
    let report = out.json();
    let finding = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["source"]["namespace"] == src.as_str())
        .unwrap_or_else(|| panic!("a finding about {src}/settings: {report}"));
    assert_eq!(finding["lastEvent"]["reason"], "CopyConflict", "{finding}");

    // The tenant reads Events in `default`, none of them about the rule or naming its target,
    // and none in kube-system.
    let visible = Api::<Event>::namespaced(tenant.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("view on default lets the tenant list its Events");
    let leaked: Vec<_> = visible
        .items
        .iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("CopyRule")
                || e.message.as_deref().is_some_and(|m| m.contains(&taken))
        })
        .map(|e| (e.involved_object.name.clone(), e.message.clone()))
        .collect();
    assert!(leaked.is_empty(), "CopyRule Events in default: {leaked:?}");
    let refused = Api::<Event>::namespaced(tenant.client.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .expect_err("the tenant may not read Events in kube-system");
    assert!(refused.to_string().contains("forbidden"), "{refused}");

    let _ = bindings.delete(&binding, &Default::default()).await;
    t.finish().await;
}

/// The tenant's source as YAML for `kubectl apply`: `name`, pushed into `target`, with `extra`
/// bytes in an annotation its copies carry.
fn pushed(tenant: &Tenant, name: &str, target: &str, value: &str, extra: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {}\n  labels:\n    {}: \"true\"\n  annotations:\n    {}: {target}\n    example.com/notes: \"{}\"\nstringData:\n  ca.crt: {value}\n",
        tenant.namespace,
        marks::SOURCE_LABEL,
        marks::NAMESPACES_ANNOTATION,
        "n".repeat(extra),
    )
}

/// SPEC §9.7: what one tenant can make copyrator hold and do is capped. Beyond the sources
/// per namespace, the newest source is held back; a source whose labels and annotations are
/// over the byte cap is held back too, its copy left as it was. kubectl shows both at once;
/// Events and metrics say so after a resync.
#[tokio::test]
async fn a_tenant_is_held_to_its_caps() {
    // The API server verified: the count cap's warning is its alone (SPEC §9.8).
    let Some(client_ca) = client_ca_arg() else {
        return;
    };
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let shared = env.namespace("shared", &[]).await;
    annotate(&env, &shared, Some(&tenant.namespace)).await;
    let t = Harness::start_in(
        env,
        Options {
            resync_interval: "2s",
            extra: vec![
                format!("--trusted-namespaces={platform}"),
                "--max-sources-per-namespace=2".into(),
                "--max-source-metadata-bytes=1024".into(),
                client_ca,
            ],
            ..Default::default()
        },
    )
    .await;
    for name in ["first", "second"] {
        let (ok, stderr) = tenant
            .kubectl_apply(&pushed(&tenant, name, &shared, "v1", 10))
            .await;
        assert!(ok && !stderr.contains("Warning"), "{stderr}");
        t.wait_value::<Secret>(&shared, name, "ca.crt", "v1").await;
    }
    // The third: said at once, held back (no copy), and told on the source.
    let (ok, stderr) = tenant
        .kubectl_apply(&pushed(&tenant, "third", &shared, "v1", 10))
        .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("already holds 2 opted-in sources"),
        "kubectl shows the cap: {stderr}"
    );
    let held = |name: &'static str| {
        move |e: &Event| {
            e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some("SourceHeldBack")
        }
    };
    t.wait_for_any::<Event>(&tenant.namespace, "SourceHeldBack on third", held("third"))
        .await;
    t.wait_metric(
        "copyrator_capped_sources{cap=\"per_namespace\"}",
        "the resync counts the held-back source",
        |v| v == 1.0,
    )
    .await;
    assert_eq!(t.metric("copyrator_namespaces_at_source_cap").await, 1.0);
    assert!(t.secrets(&shared).get_opt("third").await.unwrap().is_none());

    // The first grows over the byte cap: said at once; its copy is left as it was (neither
    // updated nor deleted), and the third, now among the two that act, gets its copy.
    let (ok, stderr) = tenant
        .kubectl_apply(&pushed(&tenant, "first", &shared, "v2", 2048))
        .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("its labels and annotations take"),
        "kubectl shows the cap: {stderr}"
    );
    t.wait_value::<Secret>(&shared, "third", "ca.crt", "v1")
        .await;
    t.wait_for_any::<Event>(&tenant.namespace, "SourceHeldBack on first", held("first"))
        .await;
    let resyncs = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    let seen = t.metric(resyncs).await;
    t.wait_metric(resyncs, "two more full resyncs", |v| v >= seen + 2.0)
        .await;
    assert_eq!(
        copy_named(&t, &shared, "first").await.as_deref(),
        Some("v1")
    );
    assert_eq!(
        t.metric("copyrator_capped_sources{cap=\"metadata_bytes\"}")
            .await,
        1.0
    );
    t.finish().await;
}

async fn copy_named(env: &TestEnv, ns: &str, name: &str) -> Option<String> {
    let s = env.secrets(ns).get_opt(name).await.ok()??;
    secret_value(&s, "ca.crt")
}
