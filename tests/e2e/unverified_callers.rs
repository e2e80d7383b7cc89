//! What anyone who reaches the webhook port learns (SPEC §9.8): without `--client-ca`, reviews
//! posted straight to copyrator are answered alike whether the namespace they name exists, is
//! being deleted or never was, is trusted or not, and however many sources it holds; a Pod
//! review's answer names no pull secret.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// Keeps a namespace Terminating: this API server has no namespace controller, but a finalizer
/// makes the test say so rather than rely on it.
const HOLD: &str = "e2e.copyrator.io/hold";

async fn terminating_namespace(env: &TestEnv, base: &str) -> String {
    let name = env.namespace(base, &[]).await;
    let namespaces = env.api::<Namespace>("");
    namespaces
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
        )
        .await
        .unwrap();
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_for::<Namespace>("", &name, "Terminating", |n| {
        n.metadata.deletion_timestamp.is_some()
    })
    .await;
    name
}

async fn release(env: &TestEnv, name: &str) {
    let _ = env
        .api::<Namespace>("")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

fn captured(file: &str) -> Value {
    let path = format!("{}/tests/data/{file}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect(&path)).unwrap()
}

/// A tenant's DELETE of a read-only copy in namespace `ns`.
fn read_only_delete(ns: &str) -> Value {
    let mut review = captured("review-own-copy-delete");
    let request = &mut review["request"];
    request["userInfo"] = json!({"username": "jane", "groups": ["system:authenticated"]});
    request["namespace"] = json!(ns);
    let meta = &mut request["oldObject"]["metadata"];
    meta["namespace"] = json!(ns);
    meta["labels"]["copyrator.io/read-only"] = json!("true");
    review
}

/// A Secret opted in as a source in namespace `ns`, naming `targets`.
fn source_create(ns: &str, targets: &str) -> Value {
    source_create_review(ns, "forged", json!({"copyrator.io/namespaces": targets}))
}

/// A NetworkPolicy opted in as a source in namespace `ns`, naming `targets`.
fn network_policy_create(ns: &str, targets: &str) -> Value {
    let mut review = source_create(ns, targets);
    let request = &mut review["request"];
    for field in ["kind", "requestKind"] {
        request[field] =
            json!({"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"});
    }
    for field in ["resource", "requestResource"] {
        request[field] =
            json!({"group": "networking.k8s.io", "version": "v1", "resource": "networkpolicies"});
    }
    let object = &mut request["object"];
    object["apiVersion"] = json!("networking.k8s.io/v1");
    object["kind"] = json!("NetworkPolicy");
    object["spec"] = json!({"podSelector": {}, "policyTypes": ["Ingress"]});
    for field in ["data", "type"] {
        object.as_object_mut().unwrap().remove(field);
    }
    review
}

/// A CopyRule making a JKS store whose password a Secret in namespace `ns` holds.
fn rule_create(ns: &str) -> Value {
    let mut review = captured("review-copyrule-create");
    review["request"]["object"]["spec"] = json!({
        "kind": "Secret", "sourceNamespace": "platform", "sourceName": "ca",
        "namespaces": ["dest"], "keys": ["ca.crt"],
        "target": {"kind": "ConfigMap", "formats": {"jks": {
            "key": "truststore.jks",
            "passwordSecretRef": {"namespace": ns, "name": "pw", "key": "jks"},
        }}},
    });
    review
}

/// A NamespacedCopyRule in namespace `ns` copying a NetworkPolicy: a kind only a trusted
/// namespace's rule may copy.
fn namespaced_rule_create(ns: &str) -> Value {
    let mut review = captured("review-copyrule-create");
    let request = &mut review["request"];
    request["namespace"] = json!(ns);
    for field in ["kind", "requestKind"] {
        request[field] =
            json!({"group": "copyrator.io", "version": "v1alpha1", "kind": "NamespacedCopyRule"});
    }
    let object = &mut request["object"];
    object["kind"] = json!("NamespacedCopyRule");
    object["metadata"]["namespace"] = json!(ns);
    object["spec"] = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "sourceName": "allow", "namespaces": ["dest"],
    });
    review
}

/// What the answer tells its caller, `ns` written `@NS@`: allowed, the message, the warnings
/// and any patch.
fn told(body: &str, ns: &str) -> String {
    let review: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let response = &review["response"];
    json!({
        "allowed": response["allowed"],
        "message": response["status"]["message"],
        "warnings": response["warnings"],
        "patch": response["patch"],
    })
    .to_string()
    .replace(ns, "@NS@")
}

/// Posts `review(ns)` to `path` for each of `namespaces` and asserts the answers are one;
/// returns it.
async fn alike(
    client: &mut WebhookClient,
    what: &str,
    path: &str,
    namespaces: &[(&str, &str)],
    review: impl Fn(&str) -> Value,
) -> Value {
    let mut answers = Vec::new();
    for (case, ns) in namespaces {
        let (status, body) = client.post(path, review(ns).to_string()).await;
        assert_eq!(status, 200, "{what}, {case}: {body}");
        answers.push((*case, told(&body, ns)));
    }
    for (case, answer) in &answers[1..] {
        assert_eq!(
            *answer, answers[0].1,
            "{what}: the answer for {case} differs from the one for {}",
            answers[0].0
        );
    }
    serde_json::from_str(&answers[0].1).unwrap()
}

#[tokio::test]
async fn forged_reviews_are_answered_alike_whatever_the_cluster_holds() {
    let env = TestEnv::new().await;
    let platform = env.namespace("uv-platform", &[]).await;
    let live = env.namespace("uv-live", &[]).await;
    let full = env.namespace("uv-full", &[]).await;
    let doomed = terminating_namespace(&env, "uv-doomed").await;
    let ghost = env.name("uv-ghost");
    // Targets a source names: one that accepts any namespace's copies, one being deleted,
    // one that does not exist.
    let accepting = env.namespace("uv-accepting", &[]).await;
    env.api::<Namespace>("")
        .patch(
            &accepting,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                copyrator::marks::ACCEPT_FROM_ANNOTATION: "*"
            }}})),
        )
        .await
        .unwrap();
    let doomed_target = terminating_namespace(&env, "uv-doomed-target").await;
    let targets = format!(
        "{accepting},{doomed_target},{},kube-system",
        env.name("uv-ghost-target")
    );
    // `full` holds as many opted-in sources as an untrusted namespace may.
    env.secrets(&full)
        .create(
            &kube::api::PostParams::default(),
            &secret(
                "first",
                &[(copyrator::marks::SOURCE_LABEL, "true")],
                &[],
                &[],
            ),
        )
        .await
        .unwrap();
    let t = Harness::start_in(
        env,
        Options {
            extra: vec![
                format!("--trusted-namespaces={platform}"),
                "--max-sources-per-namespace=1".into(),
                "--copy-kinds=NetworkPolicy.networking.k8s.io".into(),
            ],
            ..Default::default()
        },
    )
    .await;
    t.wait_startup_resync().await;
    let copyrator = t.copyrator();
    let mut client =
        WebhookClient::connect(copyrator.running().webhook_addr.port(), &copyrator.ca).await;

    let phases = [
        ("an active namespace", live.as_str()),
        ("a terminating one", doomed.as_str()),
        ("one that does not exist", ghost.as_str()),
    ];
    let told = alike(
        &mut client,
        "a tenant's delete of a read-only copy",
        "/admission/read-only",
        &phases,
        read_only_delete,
    )
    .await;
    assert_eq!(told["allowed"], false, "{told}");

    let sources = [
        ("a trusted namespace", platform.as_str()),
        ("an untrusted one", live.as_str()),
        ("one at its cap of sources", full.as_str()),
        ("a terminating one", doomed.as_str()),
        ("one that does not exist", ghost.as_str()),
    ];
    let told = alike(
        &mut client,
        "a source naming its targets",
        "/admission/sources",
        &sources,
        |ns| source_create(ns, &targets),
    )
    .await;
    assert_eq!(told["allowed"], true, "{told}");
    assert_eq!(
        told["warnings"],
        json!([
            "namespace kube-system never receives copies (excluded by copyrator's --exclude-namespaces)"
        ]),
        "only what copyrator's flags say"
    );
    let told = alike(
        &mut client,
        "a NetworkPolicy opted in",
        "/admission/sources",
        &sources[..2],
        |ns| network_policy_create(ns, &targets),
    )
    .await;
    assert_eq!(told["allowed"], true, "{told}");

    let told = alike(
        &mut client,
        "a CopyRule reading a store's password",
        "/admission/rules",
        &[
            ("a trusted namespace", platform.as_str()),
            ("an untrusted one", live.as_str()),
            ("one that does not exist", ghost.as_str()),
        ],
        rule_create,
    )
    .await;
    assert_eq!(told["allowed"], true, "{told}");

    // Whether the rule's namespace is trusted decides its tier: not a word of it here.
    let told = alike(
        &mut client,
        "a NamespacedCopyRule copying a NetworkPolicy",
        "/admission/rules",
        &[
            ("a trusted namespace", platform.as_str()),
            ("an untrusted one", live.as_str()),
            ("one that does not exist", ghost.as_str()),
        ],
        namespaced_rule_create,
    )
    .await;
    assert_eq!(told["allowed"], true, "{told}");

    alike(
        &mut client,
        "a namespace created",
        "/admission/namespaces",
        &phases,
        |ns| serde_json::from_str(&namespace_create_review(ns, json!({}))).unwrap(),
    )
    .await;

    release(&t, &doomed).await;
    release(&t, &doomed_target).await;
    t.finish().await;
}

/// A Pod review posted straight to copyrator, for a namespace holding a pull secret's copy the
/// Pod does not list (SPEC §9.8, §10.3): the gate answers it, and the answer names nothing of
/// the cluster, no patch. The API server's own Pod there, also unverified, is not patched
/// either.
#[tokio::test]
async fn a_forged_pod_review_gets_no_pull_secret() {
    let t = Harness::start(Options::default()).await;
    let key = t.name("uv-pull");
    let src = t.namespace("uv-pull-src", &[]).await;
    t.secrets(&src)
        .create(
            &kube::api::PostParams::default(),
            &registry_secret("registry", &format!("{key}=on"), true),
        )
        .await
        .unwrap();
    let ns = t.namespace("uv-pull", &[(&key, "on")]).await;
    t.wait_for::<k8s_openapi::api::core::v1::Secret>(&ns, "registry", "the copy", |_| true)
        .await;
    let copyrator = t.copyrator();
    let mut client =
        WebhookClient::connect(copyrator.running().webhook_addr.port(), &copyrator.ca).await;

    let mut review = captured("review-pod-create");
    let request = &mut review["request"];
    request["namespace"] = json!(ns);
    request["object"]["metadata"]["namespace"] = json!(ns);
    // A Pod listing no pull secret: the namespace's copy would be added for the API server.
    let spec = request["object"]["spec"].as_object_mut().unwrap();
    spec.remove("imagePullSecrets");
    let (status, body) = client.post("/admission/pods", review.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let told: Value = serde_json::from_str(&told(&body, &ns)).unwrap();
    assert_eq!(told["allowed"], true, "{told}");
    assert_eq!(told["patch"], Value::Null, "no pull secret named: {told}");

    service_account(&t.client, &ns).await;
    let admitted = create_pod(&t.client, &ns, &pod("app", &[], None)).await;
    assert!(pull_secret_names(&admitted).is_empty(), "{admitted:?}");
    t.finish().await;
}
