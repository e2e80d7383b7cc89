//! Phase bootstrap (issue 34, SPEC §3.1): what a platform team puts into every new namespace,
//! copied by a copyrator started with `--copy-kinds`, on a fresh control plane of its own. Five
//! objects: a pull Secret (an inline rule, injected into Pods), a RoleBinding to ClusterRole
//! `view`, a default-deny NetworkPolicy, a LimitRange and a ResourceQuota (CopyRules).
//!
//! - latency ([`latency`]): a namespace's create response -> all five seen by watches, beside a
//!   plain client creating the same five right after each namespace; copyrator's API calls per
//!   new namespace;
//! - the Pod gate ([`gate`]): Pods created right after their namespace, with the gate and with
//!   it unregistered: the time it adds, and whether all five were there;
//! - memory ([`memory`]): a fresh process's settled and peak RSS with many unrelated
//!   RoleBindings and NetworkPolicies in the cluster, against none.
//!
//! Its own control plane: the long-running copyrator of the other phases copies no such kind
//! (two copyrators with different kinds would both answer for the CopyRules), and the memory
//! part loads the cluster with 100,000 objects.

mod gate;
mod latency;
mod memory;

use std::time::Instant;

use copyrator::{copyrule::CopyRuleSpec, marks};
use k8s_openapi::api::{
    core::v1::{LimitRange, Namespace, ResourceQuota, Secret},
    networking::v1::NetworkPolicy,
    rbac::v1::RoleBinding,
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, PostParams},
};
use serde_json::{Value, json};

use crate::{
    base64_of, bench_copyrator,
    common::{Process, TestEnv, webhooks::unregister_webhooks},
    measure::wait_quiet,
    report::Report,
};

/// What the phase builds.
pub struct Sizes {
    /// New namespaces timed, for copyrator and as many for the plain client.
    pub namespaces: usize,
    /// Namespaces followed at once by a Pod, with the gate and as many without.
    pub gate_namespaces: usize,
    /// Unrelated RoleBindings, and as many NetworkPolicies, in the memory part.
    pub unrelated: usize,
}

/// The kinds copyrator copies here besides Secret (the flag of every process of the phase).
pub const COPY_KINDS: &str = "--copy-kinds=RoleBinding.rbac.authorization.k8s.io,NetworkPolicy.networking.k8s.io,LimitRange,ResourceQuota";

/// The pull Secret's name: what the gate injects.
const PULL_SECRET: &str = "registry";

/// One bootstrap object: its resource, its name, its body beside metadata.
pub struct Object {
    pub ar: ApiResource,
    pub name: &'static str,
    body: Value,
}

/// The five, in the order the rows name them.
fn objects() -> Vec<Object> {
    let docker = base64_of(r#"{"auths":{"registry.example":{"auth":"dTpw"}}}"#);
    vec![
        Object {
            ar: ApiResource::erase::<Secret>(&()),
            name: PULL_SECRET,
            body: json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": docker}}),
        },
        Object {
            ar: ApiResource::erase::<RoleBinding>(&()),
            name: "team-view",
            body: json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}]
            }),
        },
        Object {
            ar: ApiResource::erase::<NetworkPolicy>(&()),
            name: "default-deny",
            body: json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
        },
        Object {
            ar: ApiResource::erase::<LimitRange>(&()),
            name: "defaults",
            body: json!({"spec": {"limits": [{"type": "Container", "default": {"memory": "256Mi"}}]}}),
        },
        // No controller-manager here computes the quota's status: the API server's quota
        // admission skips a quota without one, so Pods are admitted all the same.
        Object {
            ar: ApiResource::erase::<ResourceQuota>(&()),
            name: "quota",
            body: json!({"spec": {"hard": {"pods": "10"}}}),
        },
    ]
}

/// The phase's corner of its control plane and the copyrator under test.
pub struct Boot {
    pub env: TestEnv,
    pub namespaces: Api<Namespace>,
    /// copyrator with [`COPY_KINDS`], its webhooks (and the Pod gate) registered.
    pub p: Process,
    /// The namespace label the rules select (`<key>=on`).
    pub key: String,
    /// A label (`<label>=<id>`) on the sources, so on their copies, and on the plain client's
    /// objects: what the watches select.
    pub label: String,
    pub objects: Vec<Object>,
}

impl Boot {
    pub fn api(&self, o: &Object, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.env.client.clone(), ns, &o.ar)
    }

    /// `o` labelled for the watches; as a source, with `extra` labels and `annotations`.
    fn object(&self, o: &Object, extra: &[(&str, &str)], annotations: &[(&str, &str)]) -> Value {
        let mut labels = json!({&self.label: self.env.id});
        for (k, v) in extra {
            labels[*k] = json!(v);
        }
        let annotations: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let mut value = json!({
            "apiVersion": o.ar.api_version,
            "kind": o.ar.kind,
            "metadata": {"name": o.name, "labels": labels, "annotations": annotations},
        });
        for (k, v) in o.body.as_object().expect("an object's body is a map") {
            value[k] = v.clone();
        }
        value
    }

    /// `o` as the plain client creates it.
    pub fn plain(&self, o: &Object) -> DynamicObject {
        serde_json::from_value(self.object(o, &[], &[])).expect("a DynamicObject")
    }
}

/// The phase: latency and calls, the Pod gate, then memory, each on what the one before left.
pub async fn run(report: &mut Report, sz: &Sizes) {
    let started = Instant::now();
    let env = TestEnv::new().await;
    let log_level = std::env::var("COPYRATOR_BENCH_LOG_LEVEL").unwrap_or_else(|_| "warn".into());
    let p = bench_copyrator(Some(&env.client), &["--log-level", &log_level, COPY_KINDS]).await;
    let boot = Boot {
        namespaces: Api::all(env.client.clone()),
        p,
        key: format!("bench-boot-{}", env.id),
        label: "bench-boot".into(),
        objects: objects(),
        env,
    };
    let src = boot.env.namespace("boot-src", &[]).await;
    sources_and_rules(&boot, &src).await;
    wait_quiet(&boot.p).await;

    let mut namespaces = latency::run(report, &boot, sz.namespaces).await;
    namespaces.extend(gate::run(report, &boot, sz.gate_namespaces).await);
    if let Ok(keep) = std::env::var("COPYRATOR_BENCH_KEEP_LOG") {
        std::fs::copy(&boot.p.log, keep).expect("copying copyrator's log");
    }
    let Boot { mut p, env, .. } = boot;
    p.terminate();
    unregister_webhooks(&env.client).await;
    memory::run(report, &env, &namespaces, sz.unrelated).await;
    report.note(format!(
        "bootstrap: the phase took {:.0} s; its namespaces and objects are left to the throwaway control plane",
        started.elapsed().as_secs_f64()
    ));
    std::mem::forget(env);
}

/// The five sources in `src`: the pull Secret an inline rule (as a platform team writes it,
/// injected into Pods), the other four each named by a CopyRule, all selecting `<key>=on`.
/// Created with copyrator's webhooks registered, so its admission checks them.
async fn sources_and_rules(b: &Boot, src: &str) {
    let selector = format!("{}=on", b.key);
    let create = PostParams::default();
    for o in &b.objects {
        let inline = o.ar.kind == "Secret";
        let source = if inline {
            b.object(
                o,
                &[(marks::SOURCE_LABEL, "true")],
                &[
                    (marks::NAMESPACE_SELECTOR_ANNOTATION, &selector),
                    (marks::IMAGE_PULL_SECRET_ANNOTATION, "true"),
                ],
            )
        } else {
            b.object(o, &[], &[])
        };
        let source: DynamicObject = serde_json::from_value(source).expect("a DynamicObject");
        b.api(o, src)
            .create(&create, &source)
            .await
            .unwrap_or_else(|e| panic!("creating the source {}: {e}", o.ar.kind));
        if inline {
            continue;
        }
        let spec: CopyRuleSpec = serde_json::from_value(json!({
            "apiVersion": o.ar.api_version, "kind": o.ar.kind,
            "sourceNamespace": src, "sourceName": o.name,
            "namespaceSelector": {"matchLabels": {&b.key: "on"}},
        }))
        .expect("a CopyRule spec");
        b.env
            .copy_rule(&format!("boot-{}", o.ar.plural), spec)
            .await;
    }
}
