//! The chart's ValidatingAdmissionPolicy on copyrator's own ServiceAccount (SPEC §9.9). The test
//! API server (Kubernetes 1.20) cannot run it, so it is rendered, and its CEL is evaluated
//! offline with the `cel` crate against AdmissionReviews: the reviews of copyrator's own writes
//! captured from the API server (tests/data/review-own-*.json, scripts/capture-fixtures.sh) must
//! be allowed, and what a compromised copyrator could try (derived from them) denied. Included
//! by tests/e2e/helm_chart.rs.

#[path = "cel_policy.rs"]
mod cel_policy;

use serde_json::{Value, json};

use crate::helm_chart::support::{find, find_all, render_for};
use cel_policy::{
    COPYRATOR, Policy, Verdict, assert_allowed, assert_denied, by_copyrator, edited, review,
};

const CREDENTIALS: &str = "kubernetes.io/service-account-token or bootstrap.kubernetes.io/token";
const MARKS: &str = "carry its marks";
const EXCLUDED: &str = "never receives copies";
const CA_BUNDLE: &str = "but its webhooks' clientConfig.caBundle";

/// Every write copyrator makes, as the API server admitted it, passes.
#[test]
fn admission_policy_allows_every_write_copyrator_makes() {
    let policy = Policy::rendered(&[]);
    for name in [
        "own-copy-create",
        "own-copy-update",
        "own-copy-delete",
        "own-label-source-configmap",
        "own-label-source-secret",
        "own-tls-secret-create",
        "own-tls-secret-update",
        "own-webhook-cabundle",
    ] {
        let review = review(name);
        assert_eq!(
            review["request"]["userInfo"]["username"], COPYRATOR,
            "{name} is one of copyrator's own requests"
        );
        assert_allowed(&policy, name, &review);
    }
    // The Pod gate's MutatingWebhookConfiguration gets the same caBundle patch.
    let mutating = edited(&review("own-webhook-cabundle"), |r| {
        r["resource"]["resource"] = json!("mutatingwebhookconfigurations");
        r["kind"]["kind"] = json!("MutatingWebhookConfiguration");
    });
    assert_allowed(&policy, "caBundle of the Pod gate", &mutating);
    // A source whose opt-in label said something else: copyrator sets it to "true".
    let relabel = edited(&review("own-label-source-configmap"), |r| {
        r["oldObject"]["metadata"]["labels"]["copyrator.io/source"] = json!("false");
    });
    assert_allowed(&policy, "opt-in label false -> true", &relabel);
    // An old copy in a namespace that is now excluded is deleted (SPEC §4).
    let leaving = edited(&review("own-copy-delete"), |r| {
        r["namespace"] = json!("kube-system")
    });
    assert_allowed(&policy, "delete a copy in an excluded namespace", &leaving);
    // With cert-manager, copyrator writes no certificate Secret and patches no webhook (RBAC),
    // and its copies are as before.
    let cert_manager = Policy::rendered(&["--set", "certManager.enabled=true"]);
    for name in [
        "own-copy-create",
        "own-copy-update",
        "own-label-source-secret",
    ] {
        assert_allowed(&cert_manager, name, &review(name));
    }
}

/// Requests of anyone else, and copyrator's writes to other resources (Events, its Lease,
/// CopyRule status), are not the policy's business.
#[test]
fn admission_policy_constrains_only_copyrators_secret_configmap_and_webhook_writes() {
    let policy = Policy::rendered(&[]);
    for name in [
        "secret-delete-copy",
        "secret-update-source",
        "secret-create-source",
        "configmap-create-source",
    ] {
        let review = review(name);
        assert_ne!(review["request"]["userInfo"]["username"], COPYRATOR);
        assert_eq!(policy.admit(&review), Verdict::NotMatched, "{name}");
    }
    let unmanaged_delete = by_copyrator(&review("secret-delete-copy"));
    for (group, resource) in [
        ("", "events"),
        ("coordination.k8s.io", "leases"),
        ("copyrator.io", "copyrules"),
    ] {
        let other = edited(&unmanaged_delete, |r| {
            r["resource"] = json!({"group": group, "version": "v1", "resource": resource});
        });
        assert_eq!(policy.admit(&other), Verdict::NotMatched, "{resource}");
    }
    // A ServiceAccount of the same name in another namespace is someone else.
    let namesake = edited(&unmanaged_delete, |r| {
        r["userInfo"]["username"] = json!("system:serviceaccount:tenant-a:copyrator");
    });
    assert_eq!(policy.admit(&namesake), Verdict::NotMatched);
    // The chart's ServiceAccount name is the one the policy names.
    let renamed = Policy::rendered(&["--set", "serviceAccount.name=cpr"]);
    assert_eq!(renamed.admit(&unmanaged_delete), Verdict::NotMatched);
    let as_cpr = edited(&unmanaged_delete, |r| {
        r["userInfo"]["username"] = json!("system:serviceaccount:copyrator-system:cpr");
    });
    assert_denied(&renamed, "renamed ServiceAccount", &as_cpr, MARKS);
}

/// No Secret the API server turns into credentials: copyrator could read the token back.
#[test]
fn admission_policy_refuses_service_account_and_bootstrap_token_secrets() {
    let policy = Policy::rendered(&[]);
    let copy = review("own-copy-create");
    for secret_type in [
        "kubernetes.io/service-account-token",
        "bootstrap.kubernetes.io/token",
    ] {
        // Even with copyrator's marks, and in a namespace that receives copies.
        let token = edited(&copy, |r| {
            r["object"]["type"] = json!(secret_type);
            r["object"]["metadata"]["annotations"]["kubernetes.io/service-account.name"] =
                json!("default");
        });
        assert_denied(&policy, secret_type, &token, CREDENTIALS);
        let update = edited(&review("own-copy-update"), |r| {
            r["object"]["type"] = json!(secret_type);
            r["oldObject"]["type"] = json!(secret_type);
        });
        assert_denied(&policy, "update of a marked token", &update, CREDENTIALS);
        let delete = edited(&review("own-copy-delete"), |r| {
            r["oldObject"]["type"] = json!(secret_type);
        });
        assert_denied(&policy, "delete of a marked token", &delete, CREDENTIALS);
    }
    // A ConfigMap has no type to speak of.
    let configmap = edited(&copy, |r| {
        r["resource"]["resource"] = json!("configmaps");
        r["object"]["type"] = json!("kubernetes.io/service-account-token");
    });
    assert_allowed(&policy, "a ConfigMap with a type field", &configmap);
}

/// SPEC §4.5 enforced: nothing without copyrator's marks is written, but the opt-in label.
#[test]
fn admission_policy_refuses_writes_to_objects_without_copyrators_marks() {
    let policy = Policy::rendered(&[]);
    assert_denied(
        &policy,
        "conflictPolicy: Overwrite takeover",
        &review("own-overwrite-unmanaged"),
        "Overwrite takeover is refused",
    );
    assert_denied(
        &policy,
        "delete an unmanaged Secret",
        &by_copyrator(&review("secret-delete-copy")),
        MARKS,
    );
    assert_denied(
        &policy,
        "change an unmanaged source's data",
        &by_copyrator(&review("secret-update-source")),
        MARKS,
    );
    let copy = review("own-copy-create");
    for (mark, annotation) in [
        ("app.kubernetes.io/managed-by", false),
        ("copyrator.io/source", true),
        ("copyrator.io/rule", true),
    ] {
        let place = if annotation { "annotations" } else { "labels" };
        let unmarked = edited(&copy, |r| {
            r["object"]["metadata"][place]
                .as_object_mut()
                .unwrap()
                .remove(mark);
        });
        assert_denied(&policy, &format!("create without {mark}"), &unmarked, MARKS);
        let stripped = edited(&review("own-copy-update"), |r| {
            r["oldObject"]["metadata"][place]
                .as_object_mut()
                .unwrap()
                .remove(mark);
        });
        assert_denied(
            &policy,
            &format!("update of an object without {mark}"),
            &stripped,
            MARKS,
        );
        let delete = edited(&review("own-copy-delete"), |r| {
            r["oldObject"]["metadata"][place]
                .as_object_mut()
                .unwrap()
                .remove(mark);
        });
        assert_denied(
            &policy,
            &format!("delete of an object without {mark}"),
            &delete,
            MARKS,
        );
    }
    let other_owner = edited(&review("own-copy-update"), |r| {
        r["oldObject"]["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
    });
    assert_denied(&policy, "update of Helm's object", &other_owner, MARKS);
    // A copy that would drop its marks.
    let unmark = edited(&review("own-copy-update"), |r| {
        r["object"]["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
    });
    assert_denied(&policy, "update removing the marks", &unmark, MARKS);
}

/// copyrator's creation of a create-once copy (SPEC §3.4), derived from its captured copy
/// create: no ownership marks, only `copyrator.io/created-by` naming the rule.
fn create_once_create(created_by: &str) -> Value {
    edited(&review("own-copy-create"), |r| {
        let meta = &mut r["object"]["metadata"];
        meta["labels"] = json!({});
        meta["annotations"] = json!({"copyrator.io/created-by": created_by});
    })
}

/// A create-once copy is created without copyrator's marks and is its namespace's from then
/// on: the policy lets copyrator create it when it names the CopyRule that made it, and
/// nothing more (SPEC §3.4, §9.9): no update or deletion of it, no unmarked object otherwise.
#[test]
fn admission_policy_allows_the_creation_of_create_once_copies_only() {
    let policy = Policy::rendered(&[]);
    assert_allowed(
        &policy,
        "a create-once copy of a CopyRule",
        &create_once_create("copyrule/team-bootstrap"),
    );
    assert_allowed(
        &policy,
        "a create-once copy of a hub's CopyRule",
        &create_once_create("hub-a/copyrule/team-bootstrap"),
    );
    let kyverno = Policy::rendered(&[
        "--set-json",
        r#"copyKinds=[{"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}]"#,
    ]);
    assert_allowed(
        &kyverno,
        "a migrated Kyverno synchronize: false policy's NetworkPolicy",
        &as_network_policy(&create_once_create("copyrule/default-deny")),
    );
    for (what, created_by) in [
        ("an inline rule named", "inline"),
        ("a NamespacedCopyRule named", "namespacedcopyrule/team-a/x"),
        ("no rule named", ""),
        ("something else named", "copyrule/x; rm -rf"),
        ("a path named", "copyrule/../x"),
    ] {
        assert_denied(&policy, what, &create_once_create(created_by), MARKS);
    }
    let unmarked = edited(&create_once_create("copyrule/x"), |r| {
        r["object"]["metadata"]["annotations"] = json!({});
    });
    assert_denied(&policy, "an unmarked create", &unmarked, MARKS);
    // Once made, it is not copyrator's: neither updated nor deleted by it.
    let made = create_once_create("copyrule/team-bootstrap")["request"]["object"].clone();
    let update = edited(&review("own-copy-update"), |r| {
        r["oldObject"] = made.clone();
        r["object"] = made.clone();
        r["object"]["data"] = json!({"x": "eA=="});
    });
    assert_denied(&policy, "an update of a create-once copy", &update, MARKS);
    let delete = edited(&review("own-copy-delete"), |r| {
        r["oldObject"] = made.clone()
    });
    assert_denied(&policy, "a deletion of a create-once copy", &delete, MARKS);
    // The other validations hold for it as for any copy.
    let token = edited(&create_once_create("copyrule/x"), |r| {
        r["object"]["type"] = json!("kubernetes.io/service-account-token");
    });
    assert_denied(&policy, "a create-once token Secret", &token, CREDENTIALS);
    let excluded = edited(&create_once_create("copyrule/x"), |r| {
        r["namespace"] = json!("kube-system")
    });
    assert_denied(
        &policy,
        "a create-once copy in kube-system",
        &excluded,
        EXCLUDED,
    );
}

/// Of an object copyrator does not own it may add the opt-in label, and nothing else.
#[test]
fn admission_policy_allows_only_the_opt_in_label_on_sources() {
    let policy = Policy::rendered(&[]);
    type Edit = fn(&mut Value);
    let cases: [(&str, &str, Edit); 10] = [
        ("label-source-configmap", "another label added", |r| {
            r["object"]["metadata"]["labels"]["team"] = json!("attacker")
        }),
        ("label-source-configmap", "another label removed", |r| {
            r["object"]["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove("team");
        }),
        ("label-source-configmap", "opt-in label not \"true\"", |r| {
            r["object"]["metadata"]["labels"]["copyrator.io/source"] = json!("yes")
        }),
        ("label-source-configmap", "data changed", |r| {
            r["object"]["data"]["ca.crt"] = json!("forged")
        }),
        ("label-source-configmap", "data added", |r| {
            r["object"]["binaryData"] = json!({"x": "eA=="})
        }),
        ("label-source-secret", "an annotation added", |r| {
            r["object"]["metadata"]["annotations"] =
                json!({"copyrator.io/namespace-selector": "team=b"})
        }),
        ("label-source-secret", "made immutable", |r| {
            r["object"]["immutable"] = json!(true)
        }),
        ("label-source-secret", "a finalizer added", |r| {
            r["object"]["metadata"]["finalizers"] = json!(["example.com/hold"])
        }),
        ("label-source-secret", "an owner added", |r| {
            r["object"]["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "Namespace", "name": "own-src", "uid": "u"
            }])
        }),
        ("label-source-secret", "type changed", |r| {
            r["object"]["type"] = json!("kubernetes.io/tls")
        }),
    ];
    for (fixture, what, edit) in cases {
        let review = review(&format!("own-{fixture}"));
        let mut request = review["request"].clone();
        edit(&mut request);
        let review = json!({"request": request});
        assert_denied(&policy, what, &review, MARKS);
    }
    // The label patch on a Secret of a credential type is harmless and allowed (copyrator
    // never copies one); a type change to it is not a label patch.
    let token_source = edited(&review("own-label-source-secret"), |r| {
        r["object"]["type"] = json!("kubernetes.io/service-account-token");
        r["oldObject"]["type"] = json!("kubernetes.io/service-account-token");
    });
    assert_allowed(&policy, "opt-in label on a token Secret", &token_source);
}

/// Nothing is created or changed in `excludeNamespaces` (they never receive copies).
#[test]
fn admission_policy_keeps_copyrator_out_of_excluded_namespaces() {
    let policy = Policy::rendered(&[]);
    for namespace in ["kube-system", "kube-node-lease"] {
        for fixture in ["own-copy-create", "own-copy-update"] {
            let there = edited(&review(fixture), |r| r["namespace"] = json!(namespace));
            assert_denied(
                &policy,
                &format!("{fixture} in {namespace}"),
                &there,
                EXCLUDED,
            );
        }
    }
    let opt_in = edited(&review("own-label-source-secret"), |r| {
        r["namespace"] = json!("kube-system")
    });
    assert_allowed(&policy, "opt-in label on a kube-system source", &opt_in);
    let none = Policy::rendered(&["--set-json", "excludeNamespaces=[]"]);
    let there = edited(&review("own-copy-create"), |r| {
        r["namespace"] = json!("kube-system")
    });
    assert_allowed(&none, "kube-system not excluded", &there);
}

/// copyrator's certificate Secret is the one unmarked Secret it writes: only that name, in its
/// namespace, annotated as copyrator's before and after (SPEC §6.5).
#[test]
fn admission_policy_allows_only_copyrators_own_certificate_secret() {
    let policy = Policy::rendered(&[]);
    let update = review("own-tls-secret-update");
    let cases: [(&str, Value); 4] = [
        (
            "same name in another namespace",
            edited(&update, |r| r["namespace"] = json!("team-a")),
        ),
        (
            "another name",
            edited(&update, |r| r["name"] = json!("registry")),
        ),
        (
            "a Secret of that name that is not copyrator's",
            edited(&update, |r| {
                r["oldObject"]["metadata"]["annotations"] = json!({});
            }),
        ),
        (
            "the annotation removed",
            edited(&update, |r| {
                r["object"]["metadata"]["annotations"]["copyrator.io/certificates"] =
                    json!("released");
            }),
        ),
    ];
    for (what, review) in cases {
        assert_denied(&policy, what, &review, MARKS);
    }
    let as_token = edited(&review("own-tls-secret-create"), |r| {
        r["object"]["type"] = json!("kubernetes.io/service-account-token");
    });
    assert_denied(
        &policy,
        "certificate Secret as a token",
        &as_token,
        CREDENTIALS,
    );
    // With cert-manager (or the user's Secret) copyrator writes no certificate Secret at all.
    let cert_manager = Policy::rendered(&["--set", "certManager.enabled=true"]);
    assert_denied(&cert_manager, "cert-manager mode", &update, MARKS);
}

/// Of a webhook configuration, copyrator changes its webhooks' caBundle and nothing else.
#[test]
fn admission_policy_allows_nothing_but_the_ca_bundle_on_webhook_configurations() {
    let policy = Policy::rendered(&[]);
    let patch = review("own-webhook-cabundle");
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 12] = [
        ("clientConfig.url set", |r| {
            r["object"]["webhooks"][0]["clientConfig"]["url"] = json!("https://evil.example/")
        }),
        ("clientConfig.url changed", |r| {
            r["object"]["webhooks"][1]["clientConfig"]["url"] = json!("https://127.0.0.1:1/")
        }),
        ("clientConfig.service set", |r| {
            r["object"]["webhooks"][2]["clientConfig"]["service"] =
                json!({"name": "x", "namespace": "y", "port": 443})
        }),
        ("failurePolicy Fail", |r| {
            r["object"]["webhooks"][0]["failurePolicy"] = json!("Fail")
        }),
        ("rules widened", |r| {
            r["object"]["webhooks"][1]["rules"] = json!([{
                "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
                "resources": ["*"], "scope": "*"
            }])
        }),
        ("namespaceSelector dropped", |r| {
            r["object"]["webhooks"][0]
                .as_object_mut()
                .unwrap()
                .remove("namespaceSelector");
        }),
        ("timeoutSeconds", |r| {
            r["object"]["webhooks"][0]["timeoutSeconds"] = json!(30)
        }),
        ("a webhook removed", |r| {
            r["object"]["webhooks"].as_array_mut().unwrap().pop();
        }),
        ("a webhook added", |r| {
            let mut extra = r["object"]["webhooks"][0].clone();
            extra["name"] = json!("extra.copyrator.io");
            r["object"]["webhooks"].as_array_mut().unwrap().push(extra);
        }),
        ("webhooks reordered", |r| {
            r["object"]["webhooks"].as_array_mut().unwrap().swap(0, 1)
        }),
        ("a label added", |r| {
            r["object"]["metadata"]["labels"]["example.com/x"] = json!("y")
        }),
        ("an annotation changed", |r| {
            r["object"]["metadata"]["annotations"] = json!({})
        }),
    ];
    for (what, edit) in cases {
        let mut request = patch["request"].clone();
        edit(&mut request);
        assert_denied(&policy, what, &json!({"request": request}), CA_BUNDLE);
    }
    for operation in ["CREATE", "DELETE"] {
        let other = edited(&patch, |r| {
            r["operation"] = json!(operation);
            if operation == "CREATE" {
                r["oldObject"] = Value::Null;
            } else {
                r["object"] = Value::Null;
            }
        });
        assert_denied(&policy, operation, &other, CA_BUNDLE);
    }
}

/// Rendered by default from Kubernetes 1.30 (ValidatingAdmissionPolicy v1), never on 1.20, and
/// forced either way by `admissionPolicy.enabled`.
#[test]
fn admission_policy_renders_from_kubernetes_1_30_or_when_forced() {
    let count = |version: &str, apis: &[&str], values: &[&str]| -> usize {
        let docs = render_for(version, apis, values);
        let policies = find_all(&docs, "ValidatingAdmissionPolicy").len();
        let bindings = find_all(&docs, "ValidatingAdmissionPolicyBinding").len();
        assert_eq!(policies, bindings, "a policy comes with its binding");
        policies
    };
    let off = ["--set", "admissionPolicy.enabled=false"];
    let on = ["--set", "admissionPolicy.enabled=true"];
    assert_eq!(count("v1.20.15", &[], &[]), 0, "1.20 has no such API");
    assert_eq!(count("v1.29.3", &[], &[]), 0, "1.29 has it in beta, off");
    assert_eq!(count("v1.30.4", &[], &[]), 1, "1.30: on by default");
    assert_eq!(count("v1.30.4", &[], &off), 0, "forced off");
    assert_eq!(count("v1.20.15", &[], &on), 1, "forced on");
    // When Helm knows the cluster's kinds (an install), the API itself decides.
    let vap = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";
    assert_eq!(count("v1.30.4", &["v1/Secret", vap], &[]), 1);
    assert_eq!(count("v1.30.4", &["v1/Secret"], &[]), 0, "API turned off");

    let docs = render_for("v1.30.4", &[], &[]);
    let binding = find(&docs, "ValidatingAdmissionPolicyBinding");
    let policy = find(&docs, "ValidatingAdmissionPolicy");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert!(binding["spec"].get("matchResources").is_none(), "{binding}");
    assert_eq!(
        policy["spec"]["matchConditions"],
        json!([{
            "name": "copyrators-service-account",
            "expression": "request.userInfo.username == 'system:serviceaccount:platform-system:demo-copyrator'"
        }])
    );
}

/// copyrator's write of a Secret (a captured review), as the same write of a NetworkPolicy.
fn as_network_policy(review: &Value) -> Value {
    edited(review, |r| {
        r["resource"] =
            json!({"group": "networking.k8s.io", "version": "v1", "resource": "networkpolicies"});
        r["kind"] = json!({"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"});
        for side in ["object", "oldObject"] {
            if let Some(object) = r[side].as_object_mut() {
                for field in ["data", "binaryData", "type", "immutable"] {
                    object.remove(field);
                }
                object.insert("apiVersion".into(), json!("networking.k8s.io/v1"));
                object.insert("kind".into(), json!("NetworkPolicy"));
                object.insert(
                    "spec".into(),
                    json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
                );
            }
        }
    })
}

/// The kinds of `copyKinds` are held to what copyrator does with Secrets and ConfigMaps: it
/// writes copies that carry its marks, adds the opt-in label to a CopyRule's source and nothing
/// else, and writes nothing in excluded namespaces. Without copyKinds the policy leaves them to
/// RBAC, which grants copyrator nothing on them.
#[test]
fn admission_policy_holds_copy_kinds_to_the_same_rules() {
    let policy = Policy::rendered(&[
        "--set-json",
        r#"copyKinds=[{"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}]"#,
    ]);
    for name in [
        "own-copy-create",
        "own-copy-update",
        "own-copy-delete",
        "own-label-source-secret",
    ] {
        assert_allowed(&policy, name, &as_network_policy(&review(name)));
    }
    for (what, write) in [
        (
            "conflictPolicy: Overwrite takeover",
            review("own-overwrite-unmanaged"),
        ),
        (
            "delete an unmanaged object",
            by_copyrator(&review("secret-delete-copy")),
        ),
    ] {
        assert_denied(&policy, what, &as_network_policy(&write), MARKS);
    }
    let changed = edited(
        &as_network_policy(&by_copyrator(&review("secret-update-source"))),
        |r| r["object"]["spec"]["policyTypes"] = json!(["Egress"]),
    );
    assert_denied(&policy, "change an unmanaged source", &changed, MARKS);
    let widened = edited(
        &as_network_policy(&review("own-label-source-secret")),
        |r| {
            r["object"]["spec"]["podSelector"] = json!({"matchLabels": {"app": "x"}});
        },
    );
    assert_denied(&policy, "the source's spec changed", &widened, MARKS);
    let excluded = edited(&as_network_policy(&review("own-copy-create")), |r| {
        r["namespace"] = json!("kube-system")
    });
    assert_denied(&policy, "a copy in kube-system", &excluded, EXCLUDED);
    // Secrets and ConfigMaps as before.
    assert_allowed(&policy, "a Secret copy", &review("own-copy-create"));
    assert_denied(
        &policy,
        "an unmanaged Secret",
        &by_copyrator(&review("secret-delete-copy")),
        MARKS,
    );

    let without = Policy::rendered(&[]);
    assert_eq!(
        without.admit(&as_network_policy(&review("own-copy-create"))),
        Verdict::NotMatched
    );
}
