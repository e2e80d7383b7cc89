//! What exists at a target: a copy copyrator manages (its marks parsed and validated), an
//! object it does not manage, or nothing; and the source payloads a plan may need.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use crate::{
    copyrule::DeletionPolicy,
    marks,
    model::{ObjectKey, Payload},
    rules::RuleId,
    selector,
    tenancy::{Tier, TrustPolicy},
};

/// A copy copyrator manages, as last read: its marks (SPEC §3), parsed and validated, and
/// nothing else of its metadata. The carried labels and annotations are covered by the
/// content hash. The marks every copy of one source version carries alike are shared
/// ([`CopyMarks`]); reading `copy.source`, `copy.rule`, ... reaches them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedCopy {
    pub resource_version: String,
    pub marks: Arc<CopyMarks>,
    /// Hash of the content actually held, when the copy was read in full. Without it the
    /// `content-hash` annotation is trusted (metadata-only reads).
    pub actual_hash: Option<String>,
    pub deleting: bool,
}

/// What every copy of one source version carries alike: held once for all of them where
/// copies are held by the thousand (the copy index, a full resync's copies; [`SharedMarks`]).
/// They were most of a copy's memory: ~7,800 copies of 17 sources held ~3 MB of repeated
/// strings in a resync (SPEC §5).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CopyMarks {
    /// The source it was copied from (`copyrator.io/source`).
    pub source: ObjectKey,
    /// `copyrator.io/source-uid`; empty when missing.
    pub source_uid: String,
    /// The rule that made it (`copyrator.io/rule`).
    pub rule: RuleId,
    /// `copyrator.io/deletion-policy`, when present and valid.
    pub deletion_policy: Option<DeletionPolicy>,
    /// `copyrator.io/content-hash`.
    pub content_hash: Option<String>,
    /// Label `copyrator.io/read-only: "true"`: the webhook denies edits by anyone else.
    pub read_only: bool,
}

/// Read here, where a copy's marks are parsed: what a copy is (`crate::content`) does not
/// know what is read of one.
impl crate::content::Marks {
    /// Whether an existing copy carries exactly these marks.
    pub fn recorded_in(&self, copy: &ManagedCopy) -> bool {
        copy.source == self.source
            && copy.source_uid == self.source_uid
            && copy.rule.mark() == self.rule
            && copy.deletion_policy == Some(self.deletion_policy)
            && copy.content_hash.as_ref() == Some(&self.content_hash)
            && copy.read_only == self.read_only
    }
}

impl std::ops::Deref for ManagedCopy {
    type Target = CopyMarks;

    fn deref(&self) -> &CopyMarks {
        &self.marks
    }
}

/// One shared instance of each [`CopyMarks`] value: copies that carry equal marks point to
/// the same one. Marks no copy holds any more are dropped when the set has doubled.
#[derive(Debug, Default)]
pub struct SharedMarks {
    held: HashSet<Arc<CopyMarks>>,
    /// `held`'s size after its last sweep.
    after_sweep: usize,
}

impl SharedMarks {
    /// Points `copy` at the shared instance of its marks (made shared if it is the first).
    pub fn share(&mut self, copy: &mut ManagedCopy) {
        if let Some(held) = self.held.get(&copy.marks) {
            copy.marks = Arc::clone(held);
            return;
        }
        if self.held.len() >= 2 * self.after_sweep.max(32) {
            // Only the set holds it: no copy does any more.
            self.held.retain(|m| Arc::strong_count(m) > 1);
            self.after_sweep = self.held.len();
        }
        self.held.insert(Arc::clone(&copy.marks));
    }

    /// Distinct marks held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether `f` holds for marks some copy holds (held by anything besides this set).
    pub fn any_held(&self, f: impl Fn(&CopyMarks) -> bool) -> bool {
        self.held.iter().any(|m| Arc::strong_count(m) > 1 && f(m))
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Why an object labelled `managed-by: copyrator` is not treated as a copy: its marks do not
/// parse (made or edited by hand, or forged). It is never written, never followed to a source.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarksError {
    #[error("annotation {} is missing", marks::SOURCE_ANNOTATION)]
    MissingSource,
    #[error(
        "annotation {} is neither <namespace>/<name> nor <link>/<namespace>/<name>",
        marks::SOURCE_ANNOTATION
    )]
    BadSource,
    #[error("annotation {} is missing", marks::RULE_ANNOTATION)]
    MissingRule,
    #[error(
        "annotation {} is neither \"inline\", copyrule/<name> nor namespacedcopyrule/<source namespace>/<name> (a hub's copy: <link>/copyrule/<name>)",
        marks::RULE_ANNOTATION
    )]
    BadRule,
    #[error(
        "annotation {} names no kind a copy of this kind can be made from",
        marks::SOURCE_KIND_ANNOTATION
    )]
    BadSourceKind,
}

impl ManagedCopy {
    /// Parses the marks of an object of `kind` that carries `managed-by: copyrator`.
    pub fn from_marks(
        kind: crate::model::Kind,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        resource_version: String,
        deleting: bool,
    ) -> Result<Self, MarksError> {
        let source = annotations
            .get(marks::SOURCE_ANNOTATION)
            .ok_or(MarksError::MissingSource)?;
        // A bundle's or a template's copy names its CopyRule as its source (SPEC §3.2, §3.3):
        // the same rule in both annotations, or the marks do not parse.
        if annotations
            .get(marks::SOURCE_KIND_ANNOTATION)
            .map(String::as_str)
            == Some(marks::BUNDLE_SOURCE_KIND)
        {
            let rule = annotations
                .get(marks::RULE_ANNOTATION)
                .ok_or(MarksError::MissingRule)?;
            let name = match rule.strip_prefix("copyrule/") {
                Some(name) if selector::is_dns_subdomain(name) => name,
                _ => return Err(MarksError::BadRule),
            };
            if source != rule {
                return Err(MarksError::BadSource);
            }
            return Ok(Self::parsed(
                ObjectKey::bundle(kind, name),
                RuleId::CopyRule(name.into()),
                labels,
                annotations,
                resource_version,
                deleting,
            ));
        }
        // A copy of another kind than its source's says so (SPEC §3.2); only Secrets and
        // ConfigMaps are made of each other.
        let source_kind = match annotations.get(marks::SOURCE_KIND_ANNOTATION) {
            None => kind,
            Some(name) => crate::model::Kind::from_name(name)
                .filter(|k| k.is_consentable() && kind.is_consentable())
                .ok_or(MarksError::BadSourceKind)?,
        };
        // A hub's copy (SPEC §14.2): `<link>/<namespace>/<name>`, made by
        // `<link>/copyrule/<name>` of the same link.
        if source.matches('/').count() == 2 {
            return Self::hub_marks(
                source_kind,
                source,
                labels,
                annotations,
                resource_version,
                deleting,
            );
        }
        let source = match source.split_once('/') {
            Some((ns, name)) if selector::is_dns_label(ns) && selector::is_dns_subdomain(name) => {
                ObjectKey::new(source_kind, ns, name)
            }
            _ => return Err(MarksError::BadSource),
        };
        let rule = match annotations
            .get(marks::RULE_ANNOTATION)
            .ok_or(MarksError::MissingRule)?
            .as_str()
        {
            "inline" => RuleId::Inline(source.clone()),
            other => match (
                other.strip_prefix("copyrule/"),
                namespaced_rule(other, &source.namespace),
            ) {
                (Some(name), _) if selector::is_dns_subdomain(name) => {
                    RuleId::CopyRule(name.into())
                }
                (_, Some(id)) => id,
                _ => return Err(MarksError::BadRule),
            },
        };
        Ok(Self::parsed(
            source,
            rule,
            labels,
            annotations,
            resource_version,
            deleting,
        ))
    }

    /// The marks of a hub's copy, whose source is `<link>/<namespace>/<name>` (SPEC §14.2).
    fn hub_marks(
        source_kind: crate::model::Kind,
        source: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        resource_version: String,
        deleting: bool,
    ) -> Result<Self, MarksError> {
        let mut parts = source.splitn(3, '/');
        let (Some(link), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(MarksError::BadSource);
        };
        if !(selector::is_dns_label(link)
            && selector::is_dns_label(ns)
            && selector::is_dns_subdomain(name))
        {
            return Err(MarksError::BadSource);
        }
        let rule = annotations
            .get(marks::RULE_ANNOTATION)
            .ok_or(MarksError::MissingRule)?;
        let rule = match rule
            .strip_prefix(link)
            .and_then(|r| r.strip_prefix("/copyrule/"))
        {
            Some(rule) if selector::is_dns_subdomain(rule) => RuleId::Hub {
                link: link.to_string(),
                rule: rule.to_string(),
            },
            _ => return Err(MarksError::BadRule),
        };
        Ok(Self::parsed(
            ObjectKey::hub(source_kind, link, ns, name),
            rule,
            labels,
            annotations,
            resource_version,
            deleting,
        ))
    }

    /// A copy of `source` by `rule`, the rest of its marks as they are.
    fn parsed(
        source: ObjectKey,
        rule: RuleId,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        resource_version: String,
        deleting: bool,
    ) -> Self {
        Self {
            resource_version,
            marks: Arc::new(CopyMarks {
                source,
                source_uid: labels
                    .get(marks::SOURCE_UID_LABEL)
                    .cloned()
                    .unwrap_or_default(),
                rule,
                deletion_policy: annotations
                    .get(marks::DELETION_POLICY_ANNOTATION)
                    .and_then(|p| DeletionPolicy::parse(p)),
                content_hash: annotations.get(marks::CONTENT_HASH_ANNOTATION).cloned(),
                read_only: labels.get(marks::READ_ONLY).map(String::as_str) == Some("true"),
            }),
            actual_hash: None,
            deleting,
        }
    }

    /// The tier of the rule recorded on the copy, judged by today's trust policy.
    pub fn recorded_tier(&self, trust: &TrustPolicy) -> Tier {
        match &self.rule {
            RuleId::CopyRule(_) => Tier::CopyRule,
            RuleId::Hub { .. } => Tier::Hub,
            RuleId::Inline(source) => trust.inline_tier(&source.namespace),
            // Its source's namespace is the rule's.
            RuleId::Namespaced(_) => trust.inline_tier(&self.source.namespace),
        }
    }

    pub(super) fn held_hash(&self) -> Option<&String> {
        self.actual_hash.as_ref().or(self.content_hash.as_ref())
    }
}

/// The NamespacedCopyRule a copy's `copyrator.io/rule` names
/// (`namespacedcopyrule/<namespace>/<name>`): only one of its source's namespace, where such a
/// rule's sources are.
fn namespaced_rule(mark: &str, source_namespace: &str) -> Option<RuleId> {
    let rest = mark
        .strip_prefix(marks::NAMESPACED_RULE_MARK)?
        .strip_prefix('/')?;
    let (ns, name) = crate::namespaced::split_rule_name(rest)?;
    (ns == source_namespace && selector::is_dns_subdomain(name))
        .then(|| RuleId::Namespaced(rest.to_string()))
}

/// What exists at a target name.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Existing {
    /// No managed copy is known there; a create is attempted only if absent.
    #[default]
    None,
    Managed(ManagedCopy),
    /// An object copyrator does not manage holds the name.
    Unmanaged {
        resource_version: String,
    },
}

/// Source payloads read by the job (each shared by all its copies), and content hashes known
/// for a source's current version.
#[derive(Clone, Debug, Default)]
pub struct Contents {
    pub payloads: HashMap<ObjectKey, Arc<Payload>>,
    /// What the sources of bundles gave, by the bundle's stand-in source
    /// ([`ObjectKey::bundle`]): read per job, like a transformed claim's payload.
    pub bundles: HashMap<ObjectKey, Arc<crate::bundle::BundleInputs>>,
    /// Hashes remembered for (source, resourceVersion): lets a steady-state pass decide "in
    /// sync" without reading the source's payload.
    pub known_hashes: HashMap<ObjectKey, String>,
    /// Truststores' passwords read from Secrets (`passwordSecretRef`), for bundles and
    /// single-source rules alike: read with the payloads that need them, once per job.
    pub passwords: crate::transform::ReadPasswords,
    /// The RoleBindings to Roles of a namespace, read only where a Role copy is about to be
    /// created or adopted ([`super::Action::NeedBindings`], SPEC §9.10); absent: not read.
    pub role_bindings: HashMap<String, Vec<crate::grants::BindingToRole>>,
}
