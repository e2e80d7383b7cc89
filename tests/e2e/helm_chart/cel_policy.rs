//! Evaluates a rendered ValidatingAdmissionPolicy on an AdmissionReview offline, as the API
//! server would (matchConstraints' resource rules, matchConditions, variables, validations), with
//! the `cel` crate: standard CEL on `request`, `object`, `oldObject` and `variables` as untyped
//! values. Support for tests/e2e/helm_chart/admission_policy.rs, which includes it.

use std::collections::HashMap;

use cel::{Context, Program, Value as Cel};
use serde_json::{Value, json};

use crate::helm_chart::support::{find, render, root};

/// The release the fixtures were captured for: ServiceAccount `copyrator` in
/// `copyrator-system`, certificates in `copyrator-webhook-certs`, webhooks named `copyrator`.
pub const RELEASE: &str = "copyrator";
pub const NAMESPACE: &str = "copyrator-system";
pub const COPYRATOR: &str = "system:serviceaccount:copyrator-system:copyrator";

/// What the API server decides for one request.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Not the policy's business (another resource or operation, another user).
    NotMatched,
    Allowed,
    /// The messages of the validations that failed.
    Denied(Vec<String>),
}

/// A rendered policy, compiled.
pub struct Policy {
    /// (apiGroups, resources, operations) of matchConstraints.resourceRules.
    rules: Vec<(Vec<String>, Vec<String>, Vec<String>)>,
    match_conditions: Vec<(String, Program)>,
    variables: Vec<(String, Program)>,
    validations: Vec<(String, Program)>,
}

fn strings(v: &Value) -> Vec<String> {
    serde_json::from_value(v.clone()).expect("a list of strings")
}

fn compile(expression: &Value) -> Program {
    let text = expression.as_str().expect("an expression");
    Program::compile(text).unwrap_or_else(|e| panic!("{text}\ndoes not compile: {e}"))
}

impl Policy {
    /// The chart's policy for the fixtures' release, rendered with `values`.
    pub fn rendered(values: &[&str]) -> Self {
        let docs = render(RELEASE, NAMESPACE, values);
        Self::from_doc(find(&docs, "ValidatingAdmissionPolicy"))
    }

    fn from_doc(doc: &Value) -> Self {
        let spec = &doc["spec"];
        assert_eq!(spec["failurePolicy"], "Fail", "{spec}");
        let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
        Self {
            rules: list(&spec["matchConstraints"]["resourceRules"])
                .iter()
                .map(|r| {
                    (
                        strings(&r["apiGroups"]),
                        strings(&r["resources"]),
                        strings(&r["operations"]),
                    )
                })
                .collect(),
            match_conditions: list(&spec["matchConditions"])
                .iter()
                .map(|c| (c["name"].to_string(), compile(&c["expression"])))
                .collect(),
            variables: list(&spec["variables"])
                .iter()
                .map(|v| {
                    let name = v["name"].as_str().expect("a variable name").to_string();
                    (name, compile(&v["expression"]))
                })
                .collect(),
            validations: list(&spec["validations"])
                .iter()
                .map(|v| {
                    assert_eq!(v["reason"], "Forbidden", "{v}");
                    let message = v["message"].as_str().expect("a message").to_string();
                    (message, compile(&v["expression"]))
                })
                .collect(),
        }
    }

    /// Evaluates the policy on an AdmissionReview as the API server does: matchConstraints,
    /// matchConditions, then every validation (variables are evaluated in order first, and must
    /// never fail on a well-formed request: with `failurePolicy: Fail` a failing expression
    /// refuses copyrator's write).
    pub fn admit(&self, review: &Value) -> Verdict {
        let request = &review["request"];
        let (group, resource, operation) = (
            request["resource"]["group"].as_str().unwrap_or_default(),
            request["resource"]["resource"].as_str().unwrap_or_default(),
            request["operation"].as_str().unwrap_or_default(),
        );
        let has = |list: &[String], s: &str| list.iter().any(|x| x == s || x == "*");
        if !self
            .rules
            .iter()
            .any(|(g, r, o)| has(g, group) && has(r, resource) && has(o, operation))
        {
            return Verdict::NotMatched;
        }
        let mut ctx = Context::default();
        let var = |v: &Value| cel::to_value(v).expect("JSON converts to CEL");
        let mut bare = request.clone();
        let (object, old_object) = match bare.as_object_mut() {
            Some(r) => (
                r.remove("object").unwrap_or(Value::Null),
                r.remove("oldObject").unwrap_or(Value::Null),
            ),
            None => panic!("review without a request: {review}"),
        };
        ctx.add_variable_from_value("request", var(&bare));
        ctx.add_variable_from_value("object", var(&object));
        ctx.add_variable_from_value("oldObject", var(&old_object));
        for (name, condition) in &self.match_conditions {
            match condition.execute(&ctx) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => return Verdict::NotMatched,
                other => panic!("matchCondition {name}: {other:?}"),
            }
        }
        let mut variables: HashMap<String, Cel> = HashMap::new();
        for (name, expression) in &self.variables {
            ctx.add_variable_from_value("variables", variables.clone());
            match expression.execute(&ctx) {
                Ok(value @ Cel::Bool(_)) => {
                    variables.insert(name.clone(), value);
                }
                other => panic!("variable {name} is {other:?} for {request}"),
            }
        }
        ctx.add_variable_from_value("variables", variables);
        let denied: Vec<String> = self
            .validations
            .iter()
            .filter_map(|(message, expression)| match expression.execute(&ctx) {
                Ok(Cel::Bool(true)) => None,
                Ok(Cel::Bool(false)) => Some(message.clone()),
                other => panic!("validation {message:?} is {other:?} for {request}"),
            })
            .collect();
        if denied.is_empty() {
            Verdict::Allowed
        } else {
            Verdict::Denied(denied)
        }
    }
}

/// A review captured from the test API server (tests/data/review-<name>.json).
pub fn review(name: &str) -> Value {
    let path = root().join(format!("tests/data/review-{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/capture-fixtures.sh)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `review` with `edit` applied to its request.
pub fn edited(review: &Value, edit: impl FnOnce(&mut Value)) -> Value {
    let mut review = review.clone();
    edit(&mut review["request"]);
    review
}

/// The same request, as copyrator's ServiceAccount makes it.
pub fn by_copyrator(review: &Value) -> Value {
    edited(review, |r| r["userInfo"]["username"] = json!(COPYRATOR))
}

#[track_caller]
pub fn assert_allowed(policy: &Policy, what: &str, review: &Value) {
    assert_eq!(policy.admit(review), Verdict::Allowed, "{what}");
}

/// Denied, and one of the failed validations says `because`.
#[track_caller]
pub fn assert_denied(policy: &Policy, what: &str, review: &Value, because: &str) {
    match policy.admit(review) {
        Verdict::Denied(messages) => assert!(
            messages.iter().any(|m| m.contains(because)),
            "{what}: denied, but not because {because:?}: {messages:?}"
        ),
        other => panic!("{what}: {other:?}, expected a denial ({because})"),
    }
}
