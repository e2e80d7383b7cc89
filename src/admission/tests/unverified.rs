//! What a caller `--client-ca` did not verify hears (SPEC §9.8): each handler's verdict for it
//! is the same whatever the trust list says of the namespace and however many sources it
//! holds; the API server's still depends on them. (The read-only webhook's, by the namespace's
//! phase: `read_only.rs`.)

use serde_json::{Value, json};

use crate::admission::{Verdict, advice, caller::Caller, pods, review::Review, rules, sources};
use crate::{
    model::Kind,
    plan::Policy,
    tenancy::{NamespacePatterns, TrustPolicy},
};

/// The first is trusted by [`policy`], the second is not.
const NAMESPACES: [&str; 2] = ["platform-a", "tenant-a"];

fn policy() -> Policy {
    Policy {
        excluded_namespaces: ["kube-system".to_string()].into(),
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse(NAMESPACES[0]).unwrap(),
        },
        ..Default::default()
    }
}

/// What a verdict tells its caller, with the namespace `ns` written `@NS@`: the denial, every
/// warning (the advice's too, as given without reading the cluster), and whether it asks for
/// the count cap's warning.
type Answer = (Option<String>, Vec<String>, bool);

fn answer(verdict: &Verdict, policy: &Policy, ns: &str) -> Answer {
    let mut warnings = verdict.warnings.clone();
    if let Some(rule) = &verdict.advise {
        warnings.extend(advice::advise(rule, policy, &Default::default()));
    }
    let norm = |s: &str| s.replace(ns, "@NS@");
    (
        verdict.deny.as_deref().map(norm),
        warnings.iter().map(|w| norm(w)).collect(),
        verdict.opted_in.is_some(),
    )
}

/// The sources webhook's answer to `caller` about `object` in each of [`NAMESPACES`].
fn source_answers(object: &Value, tweak: impl Fn(&mut Value), caller: Caller) -> Vec<Answer> {
    let policy = policy();
    NAMESPACES
        .iter()
        .map(|ns| {
            let mut obj = object.clone();
            obj["metadata"]["namespace"] = json!(ns);
            let mut sent = super::review("Secret", "CREATE", obj, None);
            tweak(&mut sent["request"]);
            let text = sent.to_string();
            let review: Review = serde_json::from_str(&text).unwrap();
            let request = review.request.unwrap();
            answer(&sources::review(&request, &policy, caller), &policy, ns)
        })
        .collect()
}

/// Asserts that the unverified caller's answers are one, and the API server's are not (the
/// case does turn on trust).
fn alike_only_when_unverified(case: &str, object: &Value, tweak: impl Fn(&mut Value)) {
    let unverified = source_answers(object, &tweak, Caller::Unverified);
    assert_eq!(unverified[0], unverified[1], "{case}: {unverified:#?}");
    let verified = source_answers(object, &tweak, Caller::Verified);
    assert_ne!(verified[0], verified[1], "{case}: {verified:#?}");
}

#[test]
fn a_sources_answer_to_an_unverified_caller_says_nothing_of_trust() {
    let named = super::secret(json!({"copyrator.io/namespaces": "istio,kube-system"}));
    alike_only_when_unverified("a source naming its targets", &named, |_| {});
    let unverified = source_answers(&named, |_| {}, Caller::Unverified);
    assert_eq!(
        unverified[0].1,
        [
            "namespace kube-system never receives copies (excluded by copyrator's --exclude-namespaces)"
        ],
        "the flags' exclusions are still said"
    );

    let large = super::secret(json!({
        "copyrator.io/namespaces": "istio",
        "copyrator.io/pad": "x".repeat(20 * 1024),
    }));
    alike_only_when_unverified("a source over the byte cap", &large, |_| {});

    let policy_kind = Kind::register(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .unwrap();
    let as_network_policy = |request: &mut Value| {
        request["kind"] =
            json!({"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"});
        request["resource"] =
            json!({"group": "networking.k8s.io", "version": "v1", "resource": "networkpolicies"});
        request["object"]["kind"] = json!("NetworkPolicy");
    };
    alike_only_when_unverified("a NetworkPolicy opted in", &named, as_network_policy);
    let unverified = source_answers(&named, as_network_policy, Caller::Unverified);
    assert_eq!(unverified[0].0, None, "allowed: the planner enforces trust");
    assert!(
        unverified[0]
            .1
            .iter()
            .any(|w| w.contains(&format!("an inline rule for a {policy_kind} counts only"))),
        "{unverified:?}"
    );
}

#[test]
fn the_count_caps_warning_is_asked_for_only_for_the_api_server() {
    let opted_in = super::secret(json!({"copyrator.io/namespaces": "istio"}));
    for (caller, asked) in [(Caller::Verified, true), (Caller::Unverified, false)] {
        let answers = source_answers(&opted_in, |_| {}, caller);
        // (The trusted namespace is never capped, never asked.)
        assert_eq!(answers[1].2, asked, "{caller:?}: {answers:?}");
    }
}

/// A CopyRule making a JKS store whose password a Secret in `password_ns` holds.
fn rule_reading_a_password_from(password_ns: &str) -> Value {
    json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "stores"},
        "spec": {
            "kind": "Secret", "sourceNamespace": "platform", "sourceName": "ca",
            "namespaces": ["dest"], "keys": ["ca.crt"],
            "target": {"kind": "ConfigMap", "formats": {"jks": {
                "key": "truststore.jks",
                "passwordSecretRef": {"namespace": password_ns, "name": "pw", "key": "jks"},
            }}},
        }
    })
}

#[test]
fn a_rules_answer_to_an_unverified_caller_says_nothing_of_trust() {
    let policy = policy();
    let answers = |caller: Caller| -> Vec<Answer> {
        NAMESPACES
            .iter()
            .map(|ns| {
                let sent =
                    super::review("CopyRule", "CREATE", rule_reading_a_password_from(ns), None);
                let text = sent.to_string();
                let review: Review = serde_json::from_str(&text).unwrap();
                let request = review.request.unwrap();
                answer(&rules::review(&request, &policy, caller), &policy, ns)
            })
            .collect()
    };
    let unverified = answers(Caller::Unverified);
    assert_eq!(unverified[0], unverified[1], "{unverified:#?}");
    assert_eq!(unverified[0].0, None, "allowed: the planner enforces trust");
    assert!(
        unverified[0].1[0].contains("checked when copies are made"),
        "{unverified:?}"
    );
    let verified = answers(Caller::Verified);
    assert_eq!(verified[0].0, None, "{verified:?}");
    assert!(
        verified[1]
            .0
            .as_deref()
            .is_some_and(|m| m.contains("which is not trusted")),
        "{verified:?}"
    );
}

#[test]
fn a_template_rolebinding_is_its_own_trusted_source_for_every_caller() {
    crate::model::Kind::register(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    )
    .unwrap();
    let policy = policy();
    let rule = json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "team-admins"},
        "spec": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "targetName": "team-admins", "namespaceSelector": {},
            "template": {
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "$(namespace)-admins"}],
            },
        }
    });
    for caller in [Caller::Unverified, Caller::Verified] {
        let sent = super::review("CopyRule", "CREATE", rule.clone(), None);
        let text = sent.to_string();
        let review: Review = serde_json::from_str(&text).unwrap();
        let request = review.request.unwrap();
        let (deny, warnings, _) = answer(&rules::review(&request, &policy, caller), &policy, "");
        assert_eq!(deny, None, "{caller:?}");
        assert!(
            !warnings
                .iter()
                .any(|w| w.contains("copied only from a trusted namespace")),
            "{caller:?}: {warnings:?}"
        );
    }
}

#[test]
fn a_pod_review_names_the_namespaces_pull_secrets_only_to_the_api_server() {
    let file = format!(
        "{}/tests/data/review-pod-create.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let review: Review = serde_json::from_str(&text).unwrap();
    let request = review.request.unwrap();
    // The namespace holds a copy of another namespace's pull secret the Pod does not list.
    let ready = crate::freshness::ready::Ready {
        pull_secrets: vec!["registry".into(), "mirror-pull".into()],
    };
    let patch = |caller: Caller| {
        let verdict = pods::review(&request, caller);
        let check = verdict
            .pod
            .expect("the Pod waits for its copies, whoever asks");
        pods::patch(&check, &ready).map(|p| String::from_utf8(p).unwrap())
    };
    assert!(
        patch(Caller::Verified).is_some_and(|p| p.contains("mirror-pull")),
        "the API server's Pod gets the missing pull secret"
    );
    assert_eq!(patch(Caller::Unverified), None, "anyone else: no patch");
}
