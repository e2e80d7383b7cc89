//! A CopyRule that copies a Secret's data into ConfigMaps, or makes truststores of a key, is
//! judged on content when it is written (SPEC §3.2): its sources as they are now are read, and
//! the rule is denied, naming the key, if one of them would put anything but certificates into
//! a ConfigMap or a truststore. The same pure check refuses such a copy at apply time, when a
//! source changes later; admission only says it early.
//!
//! The check runs only for reviews over a connection whose client certificate `--client-ca`
//! verified (the API server): its answer says whether a named Secret's key holds more than
//! certificates, and its reads spend copyrator's read budget, neither of which anyone who
//! reaches the webhook port may have (SPEC §9.8). Without `--client-ca` the rule is allowed
//! with a warning, and refused at apply time if it must be.
//!
//! The reads are bounded as the advice's are (`advice.rs`): a few reviews at once, a few
//! sources per review, a deadline. Past them the rule is allowed: the planner still refuses
//! every copy that would carry key material.

use std::time::Duration;

use super::advice::Advisor;
use crate::{
    marks,
    model::{Kind, ObjectKey, Payload},
    rules::{Rule, SourceMatch},
};
use copyrator_core::transform::Refused;

/// Sources of a selector read per review.
const MAX_SOURCES: usize = 16;
/// How long the reads may take before the review is answered without them.
const DEADLINE: Duration = Duration::from_secs(1);

/// Whether `rule` moves a Secret's data into ConfigMaps, or makes truststores of a key (the
/// cases with anything to check).
pub fn needs_check(rule: &Rule) -> bool {
    (rule.kind == Kind::Secret && rule.target_kind() == Kind::ConfigMap)
        || rule.transform.formats.is_some()
}

/// The denial for `rule` given its sources' payloads now (as [`Payload::for_kind`] keeps a
/// Secret's): the first source that would put key material into a ConfigMap, and the key.
pub fn judge(rule: &Rule, sources: &[(ObjectKey, Payload)]) -> Option<String> {
    sources.iter().find_map(|(key, payload)| {
        let refused = rule.transform.apply(key.kind, payload).err()?;
        let field = match refused {
            Refused::NotTruststore { .. } | Refused::Unencodable { .. } => "spec.target.formats",
            Refused::NotCertificates { .. } if rule.transform.keys.is_some() => "spec.keys",
            Refused::NotCertificates { .. } => "spec.target.kind",
            // Not of the sources' content: passwords are read by the jobs, not at admission.
            Refused::NoPassword { .. } => return None,
        };
        Some(format!(
            "copyrator: invalid CopyRule: {field}: {} {}: {refused}",
            key.kind,
            key.namespaced_name()
        ))
    })
}

impl Advisor {
    /// The denial of `rule` for what its sources hold now (see the module documentation);
    /// `None` when they hold certificates only, or could not be read in time.
    pub async fn certificate_refusal(&self, rule: &Rule) -> Option<String> {
        if !needs_check(rule) {
            return None;
        }
        let _permit = self.reviews.try_acquire().ok()?;
        let read = async {
            let keys: Vec<ObjectKey> = match &rule.sources {
                SourceMatch::Name(name) => {
                    vec![ObjectKey::new(rule.kind, &rule.source_namespace, name)]
                }
                SourceMatch::Selector(selector) => {
                    let selector = marks::not_a_copy(&selector.to_string());
                    self.cluster
                        .list_meta(
                            rule.kind,
                            Some(&rule.source_namespace),
                            &selector,
                            crate::cluster::ReadMode::Cached,
                            |m| Some(ObjectKey::new(rule.kind, m.namespace?, m.name?)),
                        )
                        .await
                        .ok()?
                        .into_iter()
                        .take(MAX_SOURCES)
                        .collect()
                }
                // A bundle leaves out what is not certificates, at apply time (SPEC §3.2); a
                // template is never a Secret's data.
                SourceMatch::Bundle(_) | SourceMatch::Template(_) => Vec::new(),
            };
            let reads = futures::future::join_all(keys.iter().map(|k| self.cluster.get(k))).await;
            let sources: Vec<(ObjectKey, Payload)> = keys
                .into_iter()
                .zip(reads)
                .filter_map(|(k, read)| {
                    let payload = read.ok()??.payload.for_kind(rule.kind);
                    Some((k, payload))
                })
                .collect();
            Some(sources)
        };
        let sources = tokio::time::timeout(DEADLINE, read).await.ok()??;
        judge(rule, &sources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copyrule::{CopyRule, CopyRuleSpec, KeySpec, TargetSpec};
    use base64::{Engine, engine::general_purpose::STANDARD};

    fn rule(keys: Option<Vec<&str>>) -> Rule {
        Rule::from_copy_rule(&CopyRule::new(
            "ca-bundle",
            CopyRuleSpec {
                kind: "Secret".into(),
                source_namespace: "platform".into(),
                source_name: Some("ca".into()),
                namespaces: vec!["team-a".into()],
                keys: keys.map(|k| k.into_iter().map(|k| KeySpec::Name(k.into())).collect()),
                target: Some(TargetSpec {
                    key: None,
                    kind: Some("ConfigMap".into()),
                    type_: None,
                    formats: None,
                }),
                ..Default::default()
            },
        ))
        .unwrap()
    }

    #[test]
    fn a_rule_asking_a_key_into_a_config_map_is_denied_naming_the_key() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["ca".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let payload = Payload {
            type_: Some("kubernetes.io/tls".into()),
            data: Some(
                [
                    ("ca.crt", STANDARD.encode(cert.pem())),
                    ("tls.key", STANDARD.encode(key.serialize_pem())),
                ]
                .map(|(k, v)| (k.to_string(), v))
                .into(),
            ),
            ..Default::default()
        };
        let sources = [(ObjectKey::new(Kind::Secret, "platform", "ca"), payload)];
        assert_eq!(judge(&rule(Some(vec!["ca.crt"])), &sources), None);
        let denied = judge(&rule(Some(vec!["ca.crt", "tls.key"])), &sources).unwrap();
        assert!(
            denied.starts_with(
                "copyrator: invalid CopyRule: spec.keys: Secret platform/ca: key tls.key holds a private key"
            ),
            "{denied}"
        );
        let every = judge(&rule(None), &sources).unwrap();
        assert!(every.contains("spec.target.kind") && every.contains("key tls.key"));
        assert!(needs_check(&rule(None)));
    }
}
