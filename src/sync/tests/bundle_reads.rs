//! What a bundle's rule job reads (SPEC §3.2, Bundles): each source once per job, however many
//! namespaces take the bundle. The bundle benchmark (benches/cluster/bundle.rs) counts the same
//! on the real API server.

use serde_json::{Value, json};

use super::{FakeApi, context, count, namespace};
use crate::{
    queue::job::{Job, JobKey, Trigger},
    sync::{Outcome, run},
};

/// A self-signed CA certificate, PEM.
fn ca() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

fn bundle_rule() -> Value {
    json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "trust", "uid": "rule-uid"},
        "spec": {
            "kind": "ConfigMap",
            "sources": [{"kind": "Secret", "namespace": "trust", "name": "ca", "key": "ca.crt"}],
            "targetName": "ca-bundle",
            "target": {"key": "ca-bundle.pem"},
            "namespaceSelector": {"matchLabels": {"trust": "on"}}
        }
    })
}

/// The rule job run once with `targets` namespaces taking the bundle; the API as it ended.
async fn rule_job_with(targets: usize) -> FakeApi {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD.encode(ca());
    let api = FakeApi::default();
    api.store(|s| {
        s.put("namespaces", namespace("trust", json!({})));
        for i in 0..targets {
            s.put(
                "namespaces",
                namespace(&format!("team-{i}"), json!({"trust": "on"})),
            );
        }
        s.put(
            "secrets",
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "ca", "namespace": "trust"},
                "type": "Opaque",
                "data": {"ca.crt": pem}
            }),
        );
        s.put("copyrules", bundle_rule());
    });
    let ctx = context(&api);
    let job = Job::new(JobKey::Rule("trust".into()), Trigger::Admission);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    for i in 0..targets {
        let copy = api.store(|s| {
            s.get("configmaps", Some(&format!("team-{i}")), "ca-bundle")
                .cloned()
        });
        assert!(
            copy.is_some_and(|c| c["data"]["ca-bundle.pem"].is_string()),
            "team-{i} has the bundle: {:#?}",
            api.lines()
        );
    }
    api
}

#[tokio::test]
async fn a_bundle_reads_its_source_once_per_job_not_once_per_namespace() {
    let one = rule_job_with(1).await;
    let many = rule_job_with(20).await;
    let reads = |api: &FakeApi| count(api, "GET secrets trust/ca");
    assert!(reads(&one) >= 1, "{:#?}", one.lines());
    assert_eq!(
        reads(&many),
        reads(&one),
        "20 namespaces cost the reads of one: {:#?}",
        many.lines()
    );
}
