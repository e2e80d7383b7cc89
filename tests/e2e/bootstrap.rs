//! Namespace bootstrap (SPEC §3.1, issue 34), on the real API server: a RoleBinding to
//! ClusterRole `view`, a Role, a NetworkPolicy, a LimitRange, a ResourceQuota, a
//! ServiceAccount and a custom resource are copied into labelled namespaces by CopyRules,
//! follow their sources, are restored when deleted or edited, leave an unmanaged object of
//! the same name alone, and go on opt-out; a changed roleRef is recreated; a kind served
//! only after copyrator started is copied once it is; a tenant's inline NetworkPolicy or
//! RoleBinding is refused even where a namespace consents.

use crate::common;

use std::time::Duration;

use common::{
    env::{client, unique_suffix},
    *,
};
use copyrator::{copyrule::CopyRuleSpec, marks};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
};
use serde_json::{Value, json};

/// One bootstrap kind: its resource, a source's body (beside metadata), a change of the
/// source to follow, an edit of a copy to undo, and the top-level fields a copy must hold
/// as the source does.
struct Case {
    ar: ApiResource,
    body: Value,
    change: Value,
    edit: Value,
    fields: &'static [&'static str],
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

const WIDGET_GROUP: &str = "bootstrap.e2e.copyrator.io";

fn cases() -> Vec<Case> {
    vec![
        Case {
            ar: ar(
                "rbac.authorization.k8s.io",
                "v1",
                "RoleBinding",
                "rolebindings",
            ),
            body: json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}]
            }),
            change: json!({"subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-b"}
            ]}),
            edit: json!({"subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "intruder"}]}),
            fields: &["roleRef", "subjects"],
        },
        Case {
            ar: ar("rbac.authorization.k8s.io", "v1", "Role", "roles"),
            body: json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
            change: json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
            edit: json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
            fields: &["rules"],
        },
        Case {
            ar: ar(
                "networking.k8s.io",
                "v1",
                "NetworkPolicy",
                "networkpolicies",
            ),
            body: json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
            change: json!({"spec": {"policyTypes": ["Ingress", "Egress"]}}),
            edit: json!({"spec": {"podSelector": {"matchLabels": {"app": "only-this"}}}}),
            fields: &["spec"],
        },
        Case {
            ar: ar("", "v1", "LimitRange", "limitranges"),
            body: json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "256Mi"}}]}}),
            change: json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "512Mi"}}]}}),
            edit: json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "1Gi"}}]}}),
            fields: &["spec"],
        },
        Case {
            ar: ar("", "v1", "ResourceQuota", "resourcequotas"),
            body: json!({"spec": {"hard": {"pods": "10"}}}),
            change: json!({"spec": {"hard": {"pods": "20"}}}),
            edit: json!({"spec": {"hard": {"pods": "1000"}}}),
            fields: &["spec"],
        },
        Case {
            ar: ar("", "v1", "ServiceAccount", "serviceaccounts"),
            body: json!({"imagePullSecrets": [{"name": "registry"}], "automountServiceAccountToken": false}),
            change: json!({"automountServiceAccountToken": true}),
            edit: json!({"imagePullSecrets": [{"name": "elsewhere"}]}),
            fields: &["imagePullSecrets", "automountServiceAccountToken"],
        },
        Case {
            ar: ar(WIDGET_GROUP, "v1", "Widget", "widgets"),
            body: json!({"spec": {"size": 1, "tags": ["a"]}}),
            change: json!({"spec": {"size": 2}}),
            edit: json!({"spec": {"size": 99}}),
            fields: &["spec"],
        },
    ]
}

/// `--copy-kinds` for the cases.
fn copy_kinds() -> String {
    let kinds: Vec<String> = cases()
        .iter()
        .map(|c| {
            if c.ar.group.is_empty() {
                c.ar.kind.clone()
            } else {
                format!("{}.{}", c.ar.kind, c.ar.group)
            }
        })
        .collect();
    format!("--copy-kinds={}", kinds.join(","))
}

/// A namespaced CRD `plural.group` of kind `kind` that keeps any spec, served at v1; waits
/// until it is established. Already there (a retried test): left as it is.
async fn crd(client: &Client, group: &str, kind: &str, plural: &str) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{plural}.{group}");
    let body: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .unwrap();
    match api.create(&PostParams::default(), &body).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating CRD {name}: {e}"),
    }
    eventually(CONVERGE, "the CRD established", || {
        let api = api.clone();
        let name = name.clone();
        async move {
            let crd = api.get(&name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        }
    })
    .await;
}

fn api(client: &Client, ar: &ApiResource, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, ar)
}

fn object(ar: &ApiResource, name: &str, labels: Value, body: &Value) -> DynamicObject {
    let mut value = json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": {"name": name, "labels": labels},
    });
    for (k, v) in body.as_object().unwrap() {
        value[k] = v.clone();
    }
    serde_json::from_value(value).unwrap()
}

/// The fields of `obj` a copy must hold as its source does.
fn content(obj: &DynamicObject, fields: &[&str]) -> Value {
    let data = &obj.data;
    json!(
        fields
            .iter()
            .map(|f| data.get(*f).cloned().unwrap_or(Value::Null))
            .collect::<Vec<_>>()
    )
}

fn is_managed(obj: &DynamicObject) -> bool {
    obj.labels()
        .get(marks::MANAGED_BY_LABEL)
        .map(String::as_str)
        == Some(marks::MANAGED_BY_VALUE)
}

/// Waits until the copy `name` of `case` in `ns` is managed and holds what the source in
/// `src` holds.
async fn wait_in_sync(client: &Client, case: &Case, src: &str, ns: &str, name: &str, what: &str) {
    let source = api(client, &case.ar, src);
    let copies = api(client, &case.ar, ns);
    eventually(
        CONVERGE,
        &format!("{} {what} in {ns}", case.ar.kind),
        || {
            let (source, copies) = (source.clone(), copies.clone());
            async move {
                let want = content(&source.get(name).await.ok()?, case.fields);
                let copy = copies.get_opt(name).await.ok()??;
                (is_managed(&copy) && content(&copy, case.fields) == want).then_some(())
            }
        },
    )
    .await;
}

/// A CopyRule copying the sources of `case` in `src` labelled `bootstrap=true`, or for the
/// kinds that grant permissions, copying `name` (RBAC copies come only from a named source,
/// SPEC §9.10).
fn rule_spec(case: &Case, src: &str, key: &str, name: &str) -> CopyRuleSpec {
    let mut spec = json!({
        "apiVersion": case.ar.api_version,
        "kind": case.ar.kind,
        "sourceNamespace": src,
        "namespaceSelector": {"matchLabels": {key: "on"}},
    });
    if case.ar.group == "rbac.authorization.k8s.io" {
        spec["sourceName"] = json!(name);
    } else {
        spec["sourceSelector"] = json!({"matchLabels": {"bootstrap": "true"}});
    }
    serde_json::from_value(spec).unwrap()
}

/// The roles the cases' RBAC copies may grant (SPEC §9.10).
const GRANTS: [&str; 2] = [
    "--bind-cluster-roles=view,edit",
    "--escalate-roles=team-default",
];

#[tokio::test]
async fn every_bootstrap_kind_is_copied_followed_restored_and_removed() {
    let client = client().await;
    crd(&client, WIDGET_GROUP, "Widget", "widgets").await;
    let mut extra = vec![copy_kinds()];
    extra.extend(GRANTS.map(String::from));
    let t = Harness::start(Options {
        extra,
        resync_interval: "2s",
        ..Default::default()
    })
    .await;
    let key = t.name("bootstrap");
    let src = t.namespace("bs-src", &[]).await;
    const NAME: &str = "team-default";
    let create = PostParams::default();
    for case in cases() {
        api(&t.client, &case.ar, &src)
            .create(
                &create,
                &object(&case.ar, NAME, json!({"bootstrap": "true"}), &case.body),
            )
            .await
            .unwrap_or_else(|e| panic!("creating the source {}: {e}", case.ar.kind));
        t.copy_rule(
            &format!("bs-{}", case.ar.plural),
            rule_spec(&case, &src, &key, NAME),
        )
        .await;
    }
    // An unmanaged NetworkPolicy of the same name, in a namespace that opts in later.
    let held = t.namespace("bs-held", &[]).await;
    let np = &cases()[2];
    let own = api(&t.client, &np.ar, &held)
        .create(
            &create,
            &object(
                &np.ar,
                NAME,
                json!({}),
                &json!({"spec": {"podSelector": {}}}),
            ),
        )
        .await
        .unwrap();

    // Copies appear in a labelled namespace.
    let dest = t.namespace("bs-dest", &[(&key, "on")]).await;
    for case in cases() {
        wait_in_sync(&t.client, &case, &src, &dest, NAME, "copied").await;
    }

    // `explain namespace` lists them with their state, kinds found from the CopyRules.
    let out = run_copyrator(&["explain", "namespace", &dest, "-o", "json"]).await;
    assert!(out.success, "{}", out.stderr);
    for case in cases() {
        assert!(
            out.stdout.contains(&format!("\"{}\"", case.ar.kind)),
            "explain lists the {}: {}",
            case.ar.kind,
            out.stdout
        );
    }
    // `explain source` takes a source of any of those kinds by its kind's name.
    let np = &cases()[2];
    let out = run_copyrator(&[
        "explain",
        "source",
        &format!("{}/{src}/{NAME}", np.ar.plural),
        "-o",
        "json",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("\"{dest}\"")),
        "explain source finds the NetworkPolicy's copy in {dest}: {}",
        out.stdout
    );

    // They follow their sources.
    let merge = PatchParams::default();
    for case in cases() {
        api(&t.client, &case.ar, &src)
            .patch(NAME, &merge, &Patch::Merge(&case.change))
            .await
            .unwrap_or_else(|e| panic!("changing the source {}: {e}", case.ar.kind));
        wait_in_sync(&t.client, &case, &src, &dest, NAME, "follows its source").await;
    }

    // A RoleBinding's roleRef cannot change in place: the source made again with another
    // role, the copy is made again too.
    let rb = &cases()[0];
    let sources = api(&t.client, &rb.ar, &src);
    sources
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    let mut body = rb.body.clone();
    body["roleRef"]["name"] = json!("edit");
    sources
        .create(
            &create,
            &object(&rb.ar, NAME, json!({"bootstrap": "true"}), &body),
        )
        .await
        .unwrap();
    wait_in_sync(
        &t.client,
        rb,
        &src,
        &dest,
        NAME,
        "recreated with the new roleRef",
    )
    .await;
    let copy = api(&t.client, &rb.ar, &dest).get(NAME).await.unwrap();
    assert_eq!(copy.data["roleRef"]["name"], "edit");

    // Deleted or edited copies are restored.
    for case in cases() {
        let copies = api(&t.client, &case.ar, &dest);
        copies.delete(NAME, &DeleteParams::default()).await.unwrap();
        wait_in_sync(
            &t.client,
            &case,
            &src,
            &dest,
            NAME,
            "restored after a delete",
        )
        .await;
        copies
            .patch(
                NAME,
                &PatchParams {
                    field_manager: Some("intruder".into()),
                    ..Default::default()
                },
                &Patch::Merge(&case.edit),
            )
            .await
            .unwrap_or_else(|e| panic!("editing the copy {}: {e}", case.ar.kind));
        wait_in_sync(
            &t.client,
            &case,
            &src,
            &dest,
            NAME,
            "restored after an edit",
        )
        .await;
    }

    // The unmanaged NetworkPolicy is left byte for byte; the other kinds are copied there.
    t.label_namespace(&held, json!({&key: "on"})).await;
    for case in cases().iter().filter(|c| c.ar.kind != "NetworkPolicy") {
        wait_in_sync(&t.client, case, &src, &held, NAME, "copied").await;
    }
    t.quiescent().await;
    let after = api(&t.client, &np.ar, &held).get(NAME).await.unwrap();
    assert_eq!(after.resource_version(), own.resource_version());
    assert!(!is_managed(&after));

    // A resync of copies in sync writes nothing: the hash covers exactly what is copied,
    // defaults included.
    let versions = |ns: String| {
        let client = t.client.clone();
        async move {
            let mut out = Vec::new();
            for case in cases() {
                out.push(
                    api(&client, &case.ar, &ns)
                        .get(NAME)
                        .await
                        .unwrap()
                        .resource_version(),
                );
            }
            out
        }
    };
    let before = versions(dest.clone()).await;
    const RESYNCS: &str = "copyrator_resync_duration_seconds_count";
    let done = t.metric(RESYNCS).await;
    t.wait_metric(RESYNCS, "two more resyncs", |n| n >= done + 2.0)
        .await;
    assert_eq!(
        versions(dest.clone()).await,
        before,
        "a resync rewrote a copy"
    );

    // Opt-out removes every copy.
    t.label_namespace(&dest, json!({&key: null})).await;
    for case in cases() {
        let copies = api(&t.client, &case.ar, &dest);
        eventually(
            CONVERGE,
            &format!("{} removed on opt-out", case.ar.kind),
            || {
                let copies = copies.clone();
                async move { copies.get_opt(NAME).await.ok()?.is_none().then_some(()) }
            },
        )
        .await;
    }
    t.finish().await;
}

#[tokio::test]
async fn a_kind_served_after_start_is_copied_once_it_is() {
    let client = client().await;
    let group = format!("late-{}.e2e.copyrator.io", unique_suffix());
    let t = Harness::start(Options {
        extra: vec![
            format!("--copy-kinds=Gadget.{group}"),
            "--kind-retry-interval=1s".into(),
        ],
        ..Default::default()
    })
    .await;
    let key = t.name("late");
    let src = t.namespace("late-src", &[]).await;
    let dest = t.namespace("late-dest", &[(&key, "on")]).await;
    crd(&client, &group, "Gadget", "gadgets").await;
    let case = Case {
        ar: ar(&group, "v1", "Gadget", "gadgets"),
        body: json!({"spec": {"color": "blue"}}),
        change: json!({}),
        edit: json!({}),
        fields: &["spec"],
    };
    api(&t.client, &case.ar, &src)
        .create(
            &PostParams::default(),
            &object(&case.ar, "g", json!({"bootstrap": "true"}), &case.body),
        )
        .await
        .unwrap();
    // The rules webhook accepts a CopyRule of the kind once copyrator has found it.
    let spec = rule_spec(&case, &src, &key, "g");
    let rules = t.rules();
    let name = t.name("late");
    eventually(
        Duration::from_secs(30),
        "the CopyRule of the new kind accepted",
        || {
            let rules = rules.clone();
            let rule = copyrator::copyrule::CopyRule::new(&name, spec.clone());
            async move { rules.create(&PostParams::default(), &rule).await.ok() }
        },
    )
    .await;
    t.track_copy_rule(&name);
    wait_in_sync(&t.client, &case, &src, &dest, "g", "copied").await;

    // The CRD deleted (its objects with it): the CopyRule says its kind is gone.
    Api::<CustomResourceDefinition>::all(client.clone())
        .delete(&format!("gadgets.{group}"), &DeleteParams::default())
        .await
        .unwrap();
    eventually(CONVERGE, "the CopyRule reporting its kind gone", || {
        let rules = rules.clone();
        let name = name.clone();
        async move {
            let rule = rules.get(&name).await.ok()?;
            let ready = rule
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.status == "False" && ready.message.contains("no longer served")).then_some(())
        }
    })
    .await;
    t.finish().await;
}

#[tokio::test]
async fn a_tenant_inline_rule_for_a_powerful_kind_is_refused_even_with_consent() {
    // The API server verified: the denial turns on trust, said to it alone (SPEC §9.8).
    let Some(client_ca) = client_ca_arg() else {
        return;
    };
    let t = Harness::start(Options {
        extra: vec![
            "--copy-kinds=NetworkPolicy.networking.k8s.io,RoleBinding.rbac.authorization.k8s.io"
                .into(),
            "--trusted-namespaces=kube-public".into(),
            client_ca,
        ],
        ..Default::default()
    })
    .await;
    let tenant = t.namespace("bs-tenant", &[]).await;
    let victim = t.namespace("bs-victim", &[]).await;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(t.client.clone())
        .patch(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {marks::ACCEPT_FROM_ANNOTATION: tenant}}}),
            ),
        )
        .await
        .unwrap();
    let labels = json!({marks::SOURCE_LABEL: "true"});
    // A RoleBinding is never an inline rule's (SPEC §9.10); a NetworkPolicy is only a trusted
    // namespace's (SPEC §9.2).
    for (case, why) in [
        (&cases()[0], "only by a CopyRule"),
        (&cases()[2], "never suffices"),
    ] {
        let mut obj = object(&case.ar, "grab", labels.clone(), &case.body);
        obj.metadata.annotations =
            Some([(marks::NAMESPACES_ANNOTATION.to_string(), victim.clone())].into());
        let err = api(&t.client, &case.ar, &tenant)
            .create(&PostParams::default(), &obj)
            .await
            .expect_err("the opt-in label on a powerful kind of an untrusted namespace is denied");
        let kube::Error::Api(status) = err else {
            panic!("{err}")
        };
        assert!(status.message.contains(why), "{}", status.message);
    }
    // Without the label it is an object like any other, and nothing is copied.
    let np = &cases()[2];
    api(&t.client, &np.ar, &tenant)
        .create(
            &PostParams::default(),
            &object(&np.ar, "grab", json!({}), &np.body),
        )
        .await
        .unwrap();
    t.quiescent().await;
    assert!(
        api(&t.client, &np.ar, &victim)
            .get_opt("grab")
            .await
            .unwrap()
            .is_none(),
        "nothing reached the consenting namespace"
    );
    t.finish().await;
}
