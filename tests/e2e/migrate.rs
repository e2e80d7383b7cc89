//! `copyrator migrate` against the real API server: each peer's annotations become
//! copyrator configuration that, applied as printed, makes the same copies; `--adopt` takes
//! over the peer's copies of the same source and leaves every other object byte for byte.
//! A tenant's source never becomes a CopyRule in force, nor has its copies adopted by one,
//! unless the administrator says `--trust-sources`. Kyverno's clone policies become CopyRules,
//! trust-manager's Bundles bundle CopyRules.
//! The peers themselves do not run here: their copies are made as they make them (the same
//! annotations and labels).

use crate::common;

mod default_cas;
mod kyverno_bootstrap;

use common::{tenant::Tenant, *};
use copyrator::{copyrule::CopyRule, marks};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Secret},
    networking::v1::NetworkPolicy,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

const REFLECTOR: &str = "reflector.v1.k8s.emberstack.com/";
const REPLICATOR: &str = "replicator.v1.mittwald.de/";

fn r(key: &str) -> String {
    format!("{REFLECTOR}{key}")
}

fn m(key: &str) -> String {
    format!("{REPLICATOR}{key}")
}

async fn create(env: &TestEnv, ns: &str, s: Secret) {
    env.secrets(ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap_or_else(|e| panic!("creating a Secret in {ns}: {e}"));
}

/// The whole object as the API server has it (for "byte for byte" comparisons).
async fn snapshot(env: &TestEnv, ns: &str, name: &str) -> serde_json::Value {
    serde_json::to_value(env.secrets(ns).get(name).await.unwrap()).unwrap()
}

fn managed(s: &Secret) -> bool {
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .map(String::as_str)
        == Some("copyrator")
}

/// Applies `migrate -o yaml` output as its header says: each source document as a merge
/// patch of the existing object, each CopyRule with `kubectl apply` (tracked for cleanup).
async fn apply(env: &TestEnv, yaml: &str) {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let ns = doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        let patch = Patch::Merge(&doc);
        match doc["kind"].as_str().unwrap() {
            "Secret" => {
                env.secrets(&ns)
                    .patch(&name, &PatchParams::default(), &patch)
                    .await
                    .unwrap();
            }
            "ConfigMap" => {
                env.config_maps(&ns)
                    .patch(&name, &PatchParams::default(), &patch)
                    .await
                    .unwrap();
            }
            "CopyRule" => {
                env.track_copy_rule(&name);
                let out =
                    kubectl(&["apply", "-f", "-"], &serde_json::to_string(&doc).unwrap()).await;
                assert!(out.success, "kubectl apply failed: {}\n{yaml}", out.stderr);
            }
            other => panic!("unexpected {other} in\n{yaml}"),
        }
    }
}

/// Applies `migrate --from trust-manager -o yaml` output as its header says: `kubectl apply -f`
/// of it all (CopyRules, tracked for cleanup, and ConfigMaps of inline certificates).
async fn apply_manifests(env: &TestEnv, yaml: &str) {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
    for doc in docs.iter().filter(|d| d["kind"] == "CopyRule") {
        env.track_copy_rule(doc["metadata"]["name"].as_str().unwrap());
    }
    let out = kubectl(&["apply", "-f", "-"], yaml).await;
    assert!(out.success, "kubectl apply failed: {}\n{yaml}", out.stderr);
}

#[tokio::test]
async fn reflector_becomes_copyrator_and_adopt_takes_only_its_own_copies() {
    let t = Harness::start(Options::default()).await;
    let id = t.id.clone();
    let src = t.namespace("rf-src", &[]).await;
    let a = t.namespace("rf-a", &[]).await;
    let b = t.namespace("rf-b", &[]).await;
    let c = t.namespace("rf-c", &[]).await;
    // Automatic reflection into a by name and into b and c by a regular expression.
    create(
        &t,
        &src,
        secret(
            "tls",
            &[],
            &[
                (&r("reflection-allowed"), "true"),
                (&r("reflection-auto-enabled"), "true"),
                (
                    &r("reflection-auto-namespaces"),
                    &format!("{a},rf-[bc]-{id}"),
                ),
            ],
            &[("v", "1")],
        ),
    )
    .await;
    // What reflector made: an automatic copy in a (stale), a hand-made mirror in c under
    // another name. In b, a same-name Secret that mirrors something else.
    create(
        &t,
        &a,
        secret(
            "tls",
            &[],
            &[
                (&r("reflects"), &format!("{src}/tls")),
                (&r("auto-reflects"), "True"),
            ],
            &[("v", "0")],
        ),
    )
    .await;
    create(
        &t,
        &c,
        secret(
            "my-tls",
            &[],
            &[(&r("reflects"), &format!("{src}/tls"))],
            &[("v", "0")],
        ),
    )
    .await;
    create(
        &t,
        &b,
        secret(
            "tls",
            &[],
            &[(&r("reflects"), "elsewhere/tls")],
            &[("mine", "yes")],
        ),
    )
    .await;
    let decoy = snapshot(&t, &b, "tls").await;

    let out = run_copyrator(&[
        "migrate",
        "--from",
        "reflector",
        "-n",
        &src,
        "-o",
        "yaml",
        "--adopt",
        "--trusted-namespaces=*",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    let yaml = &out.stdout;
    assert!(
        yaml.contains(&format!("`rf-[bc]-{id}`")) && yaml.contains(&format!("({b}, {c})")),
        "the regular expression is expanded, with a note:\n{yaml}"
    );
    assert!(
        yaml.contains(&format!("copyrator.io/namespaces: {a},{b},{c}")),
        "{yaml}"
    );
    let rule = format!("reflector-{src}-tls-to-my-tls");
    assert!(yaml.contains(&format!("# CopyRule {rule}")), "{yaml}");
    // --adopt: the copies of this source, and nothing else.
    assert!(
        out.stderr.contains(&format!("Secret {a}/tls: adopted")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("Secret {c}/my-tls: adopted")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "Secret {b}/tls: left untouched: it is a copy of elsewhere/tls"
        )),
        "{}",
        out.stderr
    );
    assert!(managed(&t.secrets(&a).get("tls").await.unwrap()));
    assert_eq!(snapshot(&t, &b, "tls").await, decoy);

    apply(&t, yaml).await;
    // copyrator now keeps every copy, the adopted ones brought up to date.
    t.wait_value::<Secret>(&a, "tls", "v", "1").await;
    t.wait_value::<Secret>(&c, "tls", "v", "1").await;
    t.wait_value::<Secret>(&c, "my-tls", "v", "1").await;
    for (ns, name) in [(&a, "tls"), (&c, "tls"), (&c, "my-tls")] {
        assert!(
            managed(&t.secrets(ns).get(name).await.unwrap()),
            "{ns}/{name}"
        );
    }
    // The object that is not this source's copy is reported, never touched.
    let report = run_copyrator(&[
        "explain",
        "namespace",
        &b,
        "-o",
        "json",
        "--trusted-namespaces=*",
    ])
    .await;
    let conflict = report.json()["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["source"]["namespace"] == src.as_str() && f["target"]["name"] == "tls")
        .cloned()
        .unwrap();
    assert_eq!(conflict["reason"], "UnmanagedObject", "{conflict}");
    assert_eq!(snapshot(&t, &b, "tls").await, decoy);
    t.finish().await;
}

#[tokio::test]
async fn replicator_push_and_pull_become_copyrator_rules() {
    let t = Harness::start(Options::default()).await;
    let id = t.id.clone();
    let src = t.namespace("rp-src", &[]).await;
    let a = t.namespace("rp-a", &[]).await;
    let d = t.namespace("rp-d", &[("replicate", &id)]).await;
    let e = t.namespace("rp-e", &[]).await;
    // Push: by name and by namespace labels.
    create(
        &t,
        &src,
        secret(
            "cred",
            &[],
            &[
                (&m("replicate-to"), &a),
                (&m("replicate-to-matching"), &format!("replicate={id}")),
            ],
            &[("v", "push")],
        ),
    )
    .await;
    // replicator's push copy in a names no source: --adopt must leave it alone.
    create(
        &t,
        &a,
        secret(
            "cred",
            &[],
            &[
                (&m("replicated-from-version"), "1"),
                (&m("replicated-keys"), "v"),
            ],
            &[("v", "push")],
        ),
    )
    .await;
    let push_copy = snapshot(&t, &a, "cred").await;
    // Pull: the source permits e; e's object asks for it under its own name.
    create(
        &t,
        &src,
        secret(
            "shared",
            &[],
            &[
                (&m("replication-allowed"), "true"),
                (&m("replication-allowed-namespaces"), "rp-e-.*"),
            ],
            &[("v", "pull")],
        ),
    )
    .await;
    create(
        &t,
        &e,
        secret(
            "pulled",
            &[],
            &[(&m("replicate-from"), &format!("{src}/shared"))],
            &[],
        ),
    )
    .await;

    let out = run_copyrator(&[
        "migrate",
        "--from",
        "replicator",
        "-n",
        &src,
        "--adopt",
        "--trusted-namespaces",
        &src,
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    let script = &out.stdout;
    assert!(
        script.contains(&format!(
            "kubectl -n {src} label secret cred copyrator.io/source=true"
        )),
        "{script}"
    );
    assert!(
        out.stderr.contains(&format!("Secret {e}/pulled: adopted")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "Secret {a}/cred: left untouched: nothing on it names"
        )),
        "{}",
        out.stderr
    );
    for line in script.lines() {
        if let Some(name) = line.strip_prefix("# CopyRule ") {
            t.track_copy_rule(name.split_whitespace().next().unwrap());
        }
    }
    let ran = sh(script).await;
    assert!(ran.success, "the script failed: {}\n{script}", ran.stderr);

    t.wait_value::<Secret>(&d, "cred", "v", "push").await;
    t.wait_value::<Secret>(&e, "pulled", "v", "pull").await;
    assert_eq!(snapshot(&t, &a, "cred").await, push_copy);
    t.finish().await;
}

#[tokio::test]
async fn kubed_manifests_become_copyrator_configuration() {
    let t = Harness::start(Options::default()).await;
    let id = t.id.clone();
    let src = t.namespace("kd-src", &[]).await;
    let labelled = t.namespace("kd-in", &[("kubed", &id)]).await;
    let other = t.namespace("kd-out", &[]).await;
    // The manifests the user keeps: a ConfigMap kubed syncs into namespaces labelled kubed=<id>.
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: omni\n  namespace: {src}\n  \
         annotations:\n    kubed.appscode.com/sync: kubed={id}\ndata:\n  v: synced\n"
    );
    let applied = kubectl(&["apply", "-f", "-"], &manifest).await;
    assert!(applied.success, "{}", applied.stderr);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("omni.yaml");
    std::fs::write(&file, &manifest).unwrap();

    let out = run_copyrator(&[
        "migrate",
        "--from",
        "kubed",
        "-f",
        file.to_str().unwrap(),
        "-o",
        "yaml",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("copyrator.io/namespace-selector: kubed={id}")),
        "{}",
        out.stdout
    );
    apply(&t, &out.stdout).await;
    t.wait_value::<ConfigMap>(&labelled, "omni", "v", "synced")
        .await;
    assert!(
        t.config_maps(&other)
            .get_opt("omni")
            .await
            .unwrap()
            .is_none()
    );

    // Every namespace: a CopyRule selecting all (not applied to this shared cluster).
    let everywhere = format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: all\n  namespace: {src}\n  \
         annotations:\n    kubed.appscode.com/sync: \"\"\n"
    );
    std::fs::write(&file, everywhere).unwrap();
    let out = run_copyrator(&["migrate", "--from", "kubed", "-f", file.to_str().unwrap()]).await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("# CopyRule kubed-{src}-all"))
            && out.stdout.contains("namespaceSelector: {}")
            && out.stdout.contains("every namespace, as kubed did"),
        "{}",
        out.stdout
    );
    // Adopting needs the cluster, never files.
    let out = run_copyrator(&[
        "migrate",
        "--from",
        "kubed",
        "-f",
        file.to_str().unwrap(),
        "--adopt",
    ])
    .await;
    assert!(!out.success);
    t.finish().await;
}

/// A tenant's namespace, a team's namespace, and copyrator trusting only the platform's: the
/// `--trusted-namespaces` flag to give `migrate` as well.
async fn tenancy() -> (Harness, Tenant, String, String) {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "mg-tenant").await;
    let platform = env.namespace("mg-platform", &[]).await;
    let team = env.namespace("mg-team", &[]).await;
    let trusted = format!("--trusted-namespaces={platform}");
    let t = Harness::start_in(
        env,
        Options {
            extra: vec![trusted.clone()],
            ..Default::default()
        },
    )
    .await;
    (t, tenant, team, trusted)
}

#[tokio::test]
async fn a_tenants_source_becomes_a_copy_rule_only_commented_out() {
    let (t, tenant, team, trusted) = tenancy().await;
    let own = tenant.namespace.clone();
    // The tenant's own Secret: reflector copies it into the team's namespace, and it carries
    // copyrator's annotations already (the running copyrator copies nothing: no consent).
    // Only a CopyRule can say that, and a CopyRule needs no consent.
    tenant
        .secrets(&own)
        .create(
            &PostParams::default(),
            &secret(
                "ca",
                &[],
                &[
                    (&r("reflection-allowed"), "true"),
                    (&r("reflection-auto-enabled"), "true"),
                    (&r("reflection-auto-namespaces"), &team),
                    (marks::NAMESPACES_ANNOTATION, &team),
                ],
                &[("v", "tenant")],
            ),
        )
        .await
        .unwrap();
    let rule = format!("reflector-{own}-ca");
    t.track_copy_rule(&rule);

    for output in ["kubectl", "yaml"] {
        let out = run_copyrator(&[
            "migrate",
            "--from",
            "reflector",
            "-n",
            &own,
            "-o",
            output,
            &trusted,
        ])
        .await;
        assert!(out.success, "{}", out.stderr);
        let printed = &out.stdout;
        assert!(
            printed.contains(&format!("# CopyRule {rule}"))
                && printed.contains(&format!(
                    "NOT IN FORCE, printed commented out: {own} is not a trusted namespace"
                ))
                && printed.contains(&format!("into {team} without their consent"))
                && printed.contains("at CopyRule precedence"),
            "the note names the namespace and the risk:\n{printed}"
        );
        assert!(
            printed.contains("# kind: CopyRule\n")
                && !printed
                    .lines()
                    .any(|l| l.starts_with("kubectl") || l.starts_with("kind:")),
            "-o {output}: the CopyRule is commented out:\n{printed}"
        );
        // Applied as printed, it asks for nothing.
        if output == "kubectl" {
            let ran = sh(printed).await;
            assert!(ran.success, "the script failed: {}\n{printed}", ran.stderr);
        } else {
            apply(&t, printed).await;
        }
        assert!(
            t.rules().get_opt(&rule).await.unwrap().is_none(),
            "-o {output} applied as printed created the CopyRule for the tenant's source"
        );
    }

    // The administrator's decision: said, and in force.
    let out = run_copyrator(&[
        "migrate",
        "--from",
        "reflector",
        "-n",
        &own,
        &trusted,
        "--trust-sources",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("printed in force because of --trust-sources"),
        "{}",
        out.stdout
    );
    let ran = sh(&out.stdout).await;
    assert!(
        ran.success,
        "the script failed: {}\n{}",
        ran.stderr, out.stdout
    );
    t.wait_value::<Secret>(&team, "ca", "v", "tenant").await;
    t.finish().await;
}

#[tokio::test]
async fn adopt_takes_no_copy_for_a_copy_rule_printed_commented_out() {
    let (t, tenant, team, trusted) = tenancy().await;
    let own = tenant.namespace.clone();
    // The tenant's Secret permits the team's namespace, where a hand-made reflector mirror
    // holds it under another name: a CopyRule with targetName.
    tenant
        .secrets(&own)
        .create(
            &PostParams::default(),
            &secret(
                "tls",
                &[],
                &[
                    (&r("reflection-allowed"), "true"),
                    (&r("reflection-allowed-namespaces"), &team),
                ],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    create(
        &t,
        &team,
        secret(
            "my-tls",
            &[],
            &[(&r("reflects"), &format!("{own}/tls"))],
            &[("v", "0")],
        ),
    )
    .await;
    let mirror = snapshot(&t, &team, "my-tls").await;
    let rule = format!("reflector-{own}-tls-to-my-tls");
    t.track_copy_rule(&rule);

    let out = run_copyrator(&[
        "migrate",
        "--from",
        "reflector",
        "-n",
        &own,
        "-o",
        "yaml",
        "--adopt",
        &trusted,
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "Secret {team}/my-tls: not adopted: copyrule/{rule} is printed commented out \
             ({own} is not a trusted namespace)"
        )),
        "{}",
        out.stderr
    );
    // Marked as the copy of a rule that does not exist, it would be a Retained copy at
    // CopyRule precedence that no trusted source could take over.
    assert_eq!(
        snapshot(&t, &team, "my-tls").await,
        mirror,
        "the peer's copy is left byte for byte"
    );

    // With --trust-sources the CopyRule is printed in force: its copy is adopted, and kept.
    let out = run_copyrator(&[
        "migrate",
        "--from",
        "reflector",
        "-n",
        &own,
        "-o",
        "yaml",
        "--adopt",
        &trusted,
        "--trust-sources",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "Secret {team}/my-tls: adopted (copy of {own}/tls by copyrule/{rule})"
        )),
        "{}",
        out.stderr
    );
    apply(&t, &out.stdout).await;
    t.wait_value::<Secret>(&team, "my-tls", "v", "1").await;
    assert!(managed(&t.secrets(&team).get("my-tls").await.unwrap()));
    t.finish().await;
}

/// Kyverno policies as a user keeps them (`SRC`, `ID`, `SANDBOX` filled in by the test): the
/// docs' sync-secrets selecting tenant namespaces and a NetworkPolicy cloned under another
/// name (inline data: `migrate/kyverno_bootstrap.rs`).
const KYVERNO_POLICIES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: sync-secrets-ID
spec:
  rules:
  - name: sync-image-pull-secret
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              tenant: "ID"
    exclude:
      any:
      - resources:
          kinds: [Namespace]
          names: [SANDBOX]
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: SRC
        name: regcred
---
apiVersion: kyverno.io/v2beta1
kind: ClusterPolicy
metadata:
  name: netpol-ID
spec:
  generateExisting: true
  rules:
  - name: clone-default-deny
    match:
      all:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              tenant: "ID"
    exclude:
      any:
      - resources:
          namespaces: [SANDBOX]
    generate:
      apiVersion: networking.k8s.io/v1
      kind: NetworkPolicy
      name: deny-all
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: SRC
        name: default-deny
"#;

#[tokio::test]
async fn kyverno_clone_policies_become_copy_rules() {
    // NetworkPolicies are copied only when enabled, as a cluster migrating them would.
    let t = Harness::start(Options {
        extra: vec!["--copy-kinds=NetworkPolicy.networking.k8s.io".into()],
        resync_interval: "2s",
        ..Default::default()
    })
    .await;
    let id = t.id.clone();
    let src = t.namespace("kv-src", &[]).await;
    let tenant = t.namespace("kv-tenant", &[("tenant", &id)]).await;
    let sandbox = t.namespace("kv-sandbox", &[("tenant", &id)]).await;
    let other = t.namespace("kv-other", &[]).await;
    create(&t, &src, secret("regcred", &[], &[], &[("v", "1")])).await;
    let netpol = format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: default-deny\n  \
         namespace: {src}\nspec:\n  podSelector: {{}}\n  policyTypes: [Ingress, Egress]\n"
    );
    let applied = kubectl(&["apply", "-f", "-"], &netpol).await;
    assert!(applied.success, "{}", applied.stderr);
    // What Kyverno made in the tenant's namespace before the migration.
    let policy = format!("sync-secrets-{id}");
    create(
        &t,
        &tenant,
        secret(
            "regcred",
            &[
                ("app.kubernetes.io/managed-by", "kyverno"),
                ("generate.kyverno.io/policy-name", &policy),
                ("generate.kyverno.io/rule-name", "sync-image-pull-secret"),
            ],
            &[],
            &[("v", "0")],
        ),
    )
    .await;
    let kyverno_copy = snapshot(&t, &tenant, "regcred").await;

    // Kyverno's copies name no source: --adopt is refused before anything is read.
    let out = run_copyrator(&["migrate", "--from", "kyverno", "--adopt"]).await;
    assert!(
        !out.success
            && out
                .stderr
                .contains("--adopt is not available with --from kyverno"),
        "{}",
        out.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.yaml");
    let policies = KYVERNO_POLICIES
        .replace("SANDBOX", &sandbox)
        .replace("SRC", &src)
        .replace("ID", &id);
    std::fs::write(&file, policies).unwrap();
    let out = run_copyrator(&[
        "migrate",
        "--from",
        "kyverno",
        "-f",
        file.to_str().unwrap(),
        "-o",
        "yaml",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    let yaml = &out.stdout;
    let secrets_rule = format!("kyverno-sync-secrets-{id}-sync-image-pull-secret");
    let netpol_rule = format!("kyverno-netpol-{id}-clone-default-deny");
    for rule in [&secrets_rule, &netpol_rule] {
        assert!(
            yaml.contains(&format!("# CopyRule {rule} (kyverno)")),
            "{yaml}"
        );
    }
    // The API server and copyrator's admission take the CopyRules as printed.
    apply(&t, yaml).await;

    // The NetworkPolicy, under its new name, in the selected namespace only.
    let copied = t
        .wait_for::<NetworkPolicy>(&tenant, "deny-all", "copied from default-deny", |_| true)
        .await;
    assert_eq!(
        copied.spec.and_then(|s| s.policy_types),
        Some(vec!["Ingress".to_string(), "Egress".to_string()])
    );
    // Kyverno's copy of regcred is not copyrator's: reported, left byte for byte.
    t.wait_for::<CopyRule>("", &secrets_rule, "a conflict reported", |r| {
        r.status.as_ref().is_some_and(|s| s.conflicting_copies == 1)
    })
    .await;
    assert_eq!(snapshot(&t, &tenant, "regcred").await, kyverno_copy);
    // Kyverno deletes its copies with the policy; copyrator writes its own at its next full
    // resync (2 s here), as the printed header says.
    t.secrets(&tenant)
        .delete("regcred", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_value::<Secret>(&tenant, "regcred", "v", "1").await;
    assert!(managed(&t.secrets(&tenant).get("regcred").await.unwrap()));
    for ns in [&sandbox, &other] {
        assert!(
            t.secrets(ns).get_opt("regcred").await.unwrap().is_none(),
            "{ns}"
        );
        assert!(
            t.api::<NetworkPolicy>(ns)
                .get_opt("deny-all")
                .await
                .unwrap()
                .is_none(),
            "{ns}"
        );
    }
    t.finish().await;
}

/// Deletes the CRDs `names` (and waits until they are gone); `if_there`: none need be.
async fn delete_crds(names: &[&str], if_there: bool) {
    let mut args = vec!["delete", "crd"];
    args.extend(names);
    args.push("--wait");
    if if_there {
        args.push("--ignore-not-found");
    }
    let out = kubectl(&args, "").await;
    assert!(out.success, "{}", out.stderr);
}

/// Applies the CRDs in `manifest` and waits until each of `names` is established.
async fn install_crds(manifest: &str, names: &[&str]) {
    let installed = kubectl(&["apply", "-f", "-"], manifest).await;
    assert!(installed.success, "{}", installed.stderr);
    for crd in names {
        let established = kubectl(
            &[
                "wait",
                "--for=condition=established",
                &format!("crd/{crd}"),
                "--timeout=20s",
            ],
            "",
        )
        .await;
        assert!(established.success, "{}", established.stderr);
    }
}

const KYVERNO_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterpolicies.kyverno.io
spec:
  group: kyverno.io
  scope: Cluster
  names:
    kind: ClusterPolicy
    listKind: ClusterPolicyList
    plural: clusterpolicies
    singular: clusterpolicy
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
  - name: v2beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: policies.kyverno.io
spec:
  group: kyverno.io
  scope: Namespaced
  names:
    kind: Policy
    listKind: PolicyList
    plural: policies
    singular: policy
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: generatingpolicies.policies.kyverno.io
spec:
  group: policies.kyverno.io
  scope: Cluster
  names:
    kind: GeneratingPolicy
    listKind: GeneratingPolicyList
    plural: generatingpolicies
    singular: generatingpolicy
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// The CRDs of `KYVERNO_CRD`.
const KYVERNO_CRDS: [&str; 3] = [
    "clusterpolicies.kyverno.io",
    "policies.kyverno.io",
    "generatingpolicies.policies.kyverno.io",
];

/// A namespaced Kyverno Policy in `SRC` with a clone rule: read from the cluster, reported.
const KYVERNO_NAMESPACED_POLICY: &str = r#"
---
apiVersion: kyverno.io/v1
kind: Policy
metadata:
  name: local-ID
  namespace: SRC
spec:
  rules:
  - name: clone-config
    match:
      any:
      - resources:
          kinds: [ConfigMap]
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: copied
      namespace: SRC
      synchronize: true
      clone:
        namespace: SRC
        name: shared
"#;

/// A GeneratingPolicy (CEL) cloning `SRC/shared` into namespaces labelled `ID=on`.
const KYVERNO_GENERATING_POLICY: &str = r#"
---
apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata:
  name: cel-ID
spec:
  evaluation:
    synchronize: {enabled: true}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["namespaces"]
    namespaceSelector:
      matchLabels: {ID: "on"}
  variables:
  - name: source
    expression: resource.Get("v1", "configmaps", "SRC", "shared")
  generate:
  - expression: generator.Apply(object.metadata.name, [variables.source])
"#;

/// The only test that installs Kyverno's ClusterPolicy, Policy and GeneratingPolicy CRDs (stand-ins for
/// Kyverno's own, which the API server serves the same way), so no other test sees them come
/// and go.
#[tokio::test]
async fn kyverno_policies_are_read_from_the_cluster_when_kyverno_is_there() {
    let t = TestEnv::new().await;
    let id = t.id.clone();
    let src = t.namespace("kvc-src", &[]).await;
    // Left over by an aborted run of this test, they would hide the first answer.
    delete_crds(&KYVERNO_CRDS, true).await;
    let out = run_copyrator(&["migrate", "--from", "kyverno"]).await;
    assert!(
        !out.success && out.stderr.contains("ClusterPolicy CRD is not installed"),
        "{}",
        out.stderr
    );

    install_crds(KYVERNO_CRD, &KYVERNO_CRDS).await;
    let policies =
        format!("{KYVERNO_POLICIES}{KYVERNO_NAMESPACED_POLICY}{KYVERNO_GENERATING_POLICY}")
            .replace("SANDBOX", "kube-system")
            .replace("SRC", &src)
            .replace("ID", &id);
    // kubectl learns of the new resource through discovery, which may lag a moment.
    eventually(CONVERGE, "the ClusterPolicies created", || async {
        kubectl(&["apply", "-f", "-"], &policies)
            .await
            .success
            .then_some(())
    })
    .await;

    let out = run_copyrator(&["migrate", "--from", "kyverno", "-n", &src, "-o", "yaml"]).await;
    delete_crds(&KYVERNO_CRDS, false).await;
    assert!(out.success, "{}", out.stderr);
    // The namespaced Policy, read from the cluster beside the ClusterPolicies, is reported.
    assert!(
        out.stdout.contains(&format!("Policy local-{id}"))
            && out
                .stdout
                .contains("a namespaced Policy generates only into its own namespace"),
        "{}",
        out.stdout
    );
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out.stdout).unwrap();
    let rules: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "CopyRule")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        rules,
        [
            format!("kyverno-sync-secrets-{id}-sync-image-pull-secret"),
            format!("kyverno-cel-{id}"),
            format!("kyverno-netpol-{id}-clone-default-deny"),
        ],
        "{}",
        out.stdout
    );
    // The GeneratingPolicy's clone, read from the cluster and its CEL evaluated.
    let cel = docs
        .iter()
        .find(|d| d["metadata"]["name"] == format!("kyverno-cel-{id}"))
        .unwrap();
    assert_eq!(
        cel["spec"],
        serde_json::json!({
            "kind": "ConfigMap", "sourceNamespace": src, "sourceName": "shared",
            "namespaceSelector": {"matchLabels": {id.as_str(): "on"}},
            "deletionPolicy": "Delete", "conflictPolicy": "Skip",
        })
    );
    t.cleanup().await;
}

const BUNDLE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: bundles.trust.cert-manager.io
spec:
  group: trust.cert-manager.io
  scope: Cluster
  names:
    kind: Bundle
    listKind: BundleList
    plural: bundles
    singular: bundle
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterbundles.trust-manager.io
spec:
  group: trust-manager.io
  scope: Cluster
  names:
    kind: ClusterBundle
    listKind: ClusterBundleList
    plural: clusterbundles
    singular: clusterbundle
  versions:
  - name: v1alpha2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// The CRDs of `BUNDLE_CRD`.
const BUNDLE_CRDS: [&str; 2] = [
    "bundles.trust.cert-manager.io",
    "clusterbundles.trust-manager.io",
];

/// A trust-manager Bundle as the docs write one (`NAME`, `LABEL`, `INLINE` filled in by the
/// test): a Secret's and a ConfigMap's certificates, and an inline one; and a
/// ClusterBundle of trust-manager's newer API (`NAME-cb`) bundling the ConfigMap's.
const BUNDLE: &str = r#"
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata:
  name: NAME
spec:
  sources:
  - secret:
      name: root-ca
      key: ca.crt
  - configMap:
      name: corp-ca
      key: ca.pem
  - inLine: |
INLINE
  target:
    configMap:
      key: trust-bundle.pem
    namespaceSelector:
      matchLabels:
        LABEL: "on"
---
apiVersion: trust-manager.io/v1alpha2
kind: ClusterBundle
metadata:
  name: NAME-cb
spec:
  sourceRefs:
  - kind: ConfigMap
    name: corp-ca
    key: ca.pem
  target:
    configMap:
      data:
      - key: corp.pem
    namespaceSelector:
      matchLabels:
        LABEL: "on"
"#;

/// The certificates of a PEM text, each as its base64 body on one line.
fn pem_bodies(pem: &str) -> std::collections::BTreeSet<String> {
    pem.split("-----END CERTIFICATE-----")
        .filter_map(|block| block.split("-----BEGIN CERTIFICATE-----").nth(1))
        .map(|body| body.split_whitespace().collect())
        .collect()
}

/// A kubeconfig for a ServiceAccount in `ns` that may list Bundles and namespaces, not
/// ClusterBundles (RBAC written before trust-manager had them), and the ClusterRole and
/// ClusterRoleBinding giving it that, named `name`, to delete after.
async fn bundles_only_reader(t: &TestEnv, ns: &str, name: &str, dir: &tempfile::TempDir) -> String {
    let manifest = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: bundles-reader\n  namespace: {ns}\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\n\
         rules:\n- apiGroups: [trust.cert-manager.io]\n  resources: [bundles]\n  verbs: [list]\n\
         - apiGroups: [\"\"]\n  resources: [namespaces]\n  verbs: [list]\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}\n\
         subjects: [{{kind: ServiceAccount, name: bundles-reader, namespace: {ns}}}]\n"
    );
    let applied = kubectl(&["apply", "-f", "-"], &manifest).await;
    assert!(applied.success, "{}", applied.stderr);
    let token = service_account_token(&t.client, ns, "bundles-reader").await;
    let path = dir.path().join("kubeconfig");
    write_token_kubeconfig(&kubeconfig(), &token, &path);
    path.to_str().unwrap().to_string()
}

/// The only test that installs trust-manager's Bundle and ClusterBundle CRDs (stand-ins for
/// trust-manager's own, which the API server serves the same way), so no other test sees them
/// come and go.
#[tokio::test]
async fn trust_manager_bundles_become_bundle_copy_rules() {
    let t = Harness::start(Options::default()).await;
    let trust = t.namespace("tm-trust", &[]).await;
    let label = t.name("tm");
    let dest = t.namespace("tm-dest", &[(&label, "on")]).await;
    let other = t.namespace("tm-other", &[]).await;
    let (root, corp, inline) = (ca_cert("root"), ca_cert("corp"), ca_cert("inline"));
    create(
        &t,
        &trust,
        secret("root-ca", &[], &[], &[("ca.crt", &root), ("tls.key", "x")]),
    )
    .await;
    t.config_maps(&trust)
        .create(
            &PostParams::default(),
            &config_map("corp-ca", &[], &[], &[("ca.pem", &corp)]),
        )
        .await
        .unwrap();

    // Left over by an aborted run of this test, they would hold other runs' Bundles.
    delete_crds(&BUNDLE_CRDS, true).await;
    let out = run_copyrator(&["migrate", "--from", "trust-manager"]).await;
    assert!(
        !out.success
            && out
                .stderr
                .contains("trust-manager's Bundle CRD is not installed"),
        "{}",
        out.stderr
    );
    // trust-manager's copies name their Bundle: --adopt is refused before anything is read.
    let out = run_copyrator(&["migrate", "--from", "trust-manager", "--adopt"]).await;
    assert!(
        !out.success
            && out
                .stderr
                .contains("--adopt is not available with --from trust-manager"),
        "{}",
        out.stderr
    );
    install_crds(BUNDLE_CRD, &BUNDLE_CRDS).await;
    let name = t.name("ca-bundle");
    let indented: String = inline.lines().map(|l| format!("      {l}\n")).collect();
    let bundle = BUNDLE
        .replace("NAME", &name)
        .replace("LABEL", &label)
        .replace("INLINE\n", &indented);
    // kubectl learns of the new resource through discovery, which may lag a moment.
    eventually(CONVERGE, "the Bundle created", || async {
        kubectl(&["apply", "-f", "-"], &bundle)
            .await
            .success
            .then_some(())
    })
    .await;

    // Who may list Bundles but not ClusterBundles still gets the Bundles' CopyRules, and is
    // told the ClusterBundles were not read.
    let dir = tempfile::tempdir().unwrap();
    let reader = t.name("bundles-reader");
    let reader_kubeconfig = bundles_only_reader(&t, &trust, &reader, &dir).await;
    let limited = run_copyrator(&[
        "migrate",
        "--from",
        "trust-manager",
        "--kubeconfig",
        &reader_kubeconfig,
        "--trust-namespace",
        &trust,
        "-o",
        "yaml",
    ])
    .await;
    let removed = kubectl(&["delete", "clusterrole,clusterrolebinding", &reader], "").await;
    assert!(removed.success, "{}", removed.stderr);
    assert!(limited.success, "{}", limited.stderr);
    assert!(
        limited
            .stderr
            .contains("cannot list ClusterBundle (trust-manager.io)"),
        "{}",
        limited.stderr
    );
    assert!(
        limited.stdout.contains(&format!(
            "# CopyRule trust-manager-{name}-configmap (trust-manager)"
        )) && !limited
            .stdout
            .contains(&format!("trust-manager-{name}-cb-")),
        "{}",
        limited.stdout
    );

    let out = run_copyrator(&[
        "migrate",
        "--from",
        "trust-manager",
        "--trust-namespace",
        &trust,
        "--trusted-namespaces",
        &trust,
        "-o",
        "yaml",
    ])
    .await;
    delete_crds(&BUNDLE_CRDS, false).await;
    assert!(out.success, "{}", out.stderr);
    let yaml = &out.stdout;
    let rule = format!("trust-manager-{name}-configmap");
    // The inline certificate: a ConfigMap in the trust namespace, printed before the CopyRule.
    assert!(
        yaml.contains(&format!("# CopyRule {rule} (trust-manager)"))
            && yaml.contains(&format!(
                "# ConfigMap {trust}/trust-manager-{name}-inline: read by the CopyRule below"
            )),
        "{yaml}"
    );
    // The ClusterBundle, read from the cluster beside the Bundle, becomes its own CopyRule.
    assert!(
        yaml.contains(&format!(
            "# CopyRule trust-manager-{name}-cb-configmap (trust-manager)"
        )),
        "{yaml}"
    );
    // The API server and copyrator's admission take the CopyRule as printed.
    apply_manifests(&t, yaml).await;

    // The bundle copy, named after the Bundle, in the selected namespace only.
    let want = pem_bodies(&format!("{root}{corp}{inline}"));
    let copy = t
        .wait_for::<ConfigMap>(&dest, &name, "the bundle copy", |cm| {
            cm.data
                .as_ref()
                .and_then(|d| d.get("trust-bundle.pem"))
                .is_some_and(|pem| pem_bodies(pem) == want)
        })
        .await;
    assert_eq!(
        copy.data.unwrap_or_default().keys().collect::<Vec<_>>(),
        ["trust-bundle.pem"],
        "the certificates only, nothing else of the sources"
    );
    // The ClusterBundle's: the ConfigMap's certificate only.
    let want = pem_bodies(&corp);
    t.wait_for::<ConfigMap>(
        &dest,
        &format!("{name}-cb"),
        "the ClusterBundle's copy",
        |cm| {
            cm.data
                .as_ref()
                .and_then(|d| d.get("corp.pem"))
                .is_some_and(|pem| pem_bodies(pem) == want)
        },
    )
    .await;
    for copy in [name.clone(), format!("{name}-cb")] {
        assert!(
            t.config_maps(&other)
                .get_opt(&copy)
                .await
                .unwrap()
                .is_none(),
            "{copy} in {other}"
        );
    }
    t.finish().await;
}
