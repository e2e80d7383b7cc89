//! Copy rules in one form, whatever declared them: the inline rule of an annotated source
//! (SPEC §2.1) or a `CopyRule` resource (SPEC §2.2). Parsing and validation live here, so the
//! admission webhooks and the workers agree on what is valid.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    bundle::{self, Bundle, BundleSelect, BundleSource},
    copyrule::{ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy, KeySpec},
    marks,
    model::{Kind, NamespaceInfo, ObjectKey, SourceInfo},
    selector::{self, Selector},
    tenancy::{self, Tier, TrustPolicy},
    transform::{self, KeyMapping, Transform},
};

/// Which rule a copy belongs to; rendered into the `copyrator.io/rule` annotation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    /// The inline rule carried by the source itself.
    Inline(ObjectKey),
    /// A CopyRule, by name.
    CopyRule(String),
}

impl RuleId {
    /// The value of the `copyrator.io/rule` annotation on copies.
    pub fn mark(&self) -> String {
        match self {
            RuleId::Inline(_) => "inline".to_string(),
            RuleId::CopyRule(name) => format!("copyrule/{name}"),
        }
    }

    pub fn copy_rule_name(&self) -> Option<&str> {
        match self {
            RuleId::CopyRule(name) => Some(name),
            RuleId::Inline(_) => None,
        }
    }
}

impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleId::Inline(src) => write!(f, "inline rule of {src}"),
            RuleId::CopyRule(name) => write!(f, "CopyRule {name}"),
        }
    }
}

/// Which objects of the source namespace a rule copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceMatch {
    Name(String),
    Selector(Selector),
    /// A bundle (SPEC §3.2): the certificates of several sources, of any namespace, combined
    /// into one key; none of them is a source of the rule's copies, the rule itself is.
    Bundle(Box<Bundle>),
}

/// How a rule's own namespace clauses (explicit names, selector, exclusions) judge one
/// namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Selection {
    /// Named in the rule's explicit namespaces.
    Listed,
    /// The rule's namespace selector matches the namespace's labels.
    SelectorMatches,
    /// The source's own namespace: never a target (no copy loops).
    SourceNamespace,
    /// Named in the rule's `excludeNamespaces`.
    Excluded,
    /// Neither named nor matched by the selector.
    NotSelected,
}

impl Selection {
    /// Whether the rule wants a copy there (before global policy, namespace state, consent).
    pub fn selects(self) -> bool {
        matches!(self, Selection::Listed | Selection::SelectorMatches)
    }
}

/// The annotations of an inline rule that `source` carries although it lacks the opt-in label
/// `copyrator.io/source: "true"`: copyrator ignores them (its webhooks and lists key on the
/// label). Empty when the source is labelled or carries none.
pub fn ignored_annotations(source: &SourceInfo) -> Vec<&'static str> {
    if source.labels.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true") {
        return Vec::new();
    }
    [
        marks::NAMESPACE_SELECTOR_ANNOTATION,
        marks::NAMESPACES_ANNOTATION,
        marks::READ_ONLY,
        marks::KEYS_ANNOTATION,
    ]
    .into_iter()
    .filter(|a| source.annotations.contains_key(*a))
    .collect()
}

/// A validated copy rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub id: RuleId,
    pub kind: Kind,
    pub source_namespace: String,
    pub sources: SourceMatch,
    /// `None`: no selector, only the explicit namespaces.
    pub namespace_selector: Option<Selector>,
    pub namespaces: BTreeSet<String>,
    pub exclude_namespaces: BTreeSet<String>,
    pub target_name: Option<String>,
    pub deletion_policy: DeletionPolicy,
    pub conflict_policy: ConflictPolicy,
    /// Creation time (seconds): when two rules of one tier want the same target, the older
    /// one wins.
    pub created: i64,
    /// Precedence and trust (SPEC §9): CopyRule, trusted inline or consented inline.
    pub tier: Tier,
    /// The copies are image pull secrets, injected into Pods of target namespaces (SPEC §10).
    pub image_pull_secret: bool,
    /// The copies are read-only: edits and deletions by anyone but copyrator are denied at
    /// admission (SPEC §4 item 11).
    pub read_only: bool,
    /// What the copies carry of the source's payload, and as what kind (SPEC §3.2).
    pub transform: Transform,
}

impl Rule {
    /// Whether `source` is one of this rule's sources. A copy never is (SPEC §9.6), whatever
    /// its name or the labels it carried over from its own source.
    pub fn selects_source(&self, source: &SourceInfo) -> bool {
        !source.is_copy()
            && source.key.kind == self.kind
            && source.key.namespace == self.source_namespace
            && match &self.sources {
                SourceMatch::Name(name) => &source.key.name == name,
                SourceMatch::Selector(sel) => sel.matches(&source.labels),
                SourceMatch::Bundle(_) => false,
            }
    }

    /// The rule's bundle, when it is one.
    pub fn bundle(&self) -> Option<&Bundle> {
        match &self.sources {
            SourceMatch::Bundle(b) => Some(b),
            _ => None,
        }
    }

    /// The Secrets its truststores' passwords are read from (`passwordSecretRef`, SPEC §3.2),
    /// whether it is a bundle or copies its sources' keys.
    pub fn password_refs(&self) -> impl Iterator<Item = &transform::PasswordRef> {
        let formats = match &self.sources {
            SourceMatch::Bundle(b) => b.formats.as_ref(),
            _ => self.transform.formats.as_ref(),
        };
        formats.into_iter().flat_map(|f| f.password_refs())
    }

    /// Whether `key` is a Secret a store's password is read from.
    pub fn reads_password_of(&self, key: &ObjectKey) -> bool {
        key.kind == Kind::Secret
            && self
                .password_refs()
                .any(|r| r.namespace == key.namespace && r.name == key.name)
    }

    /// Whether a change of `key`, which is none of the sources the rule copies, can change its
    /// copies: a bundle's source, or a Secret a store's password is read from. Its rule's job
    /// then plans them again (SPEC §3.2).
    pub fn follows(&self, key: &ObjectKey) -> bool {
        self.bundle().is_some_and(|b| b.follows(key)) || self.reads_password_of(key)
    }

    /// Whether `source` is copied by this rule: an inline rule belongs to exactly its own
    /// source; a CopyRule to every source it selects.
    pub fn applies_to(&self, source: &SourceInfo) -> bool {
        match &self.id {
            RuleId::Inline(key) => key == &source.key && !source.is_copy(),
            RuleId::CopyRule(_) => self.selects_source(source),
        }
    }

    /// Whether the rule wants copies in `ns` (before global exclusions and namespace state).
    /// The source namespace is never a target: no copy loops.
    pub fn targets_namespace(&self, ns: &NamespaceInfo) -> bool {
        self.selection(ns).selects()
    }

    /// How the rule's own namespace clauses judge `ns`, and why (before global exclusions,
    /// namespace state and consent, which [`crate::plan::World::targeting`] adds).
    pub fn selection(&self, ns: &NamespaceInfo) -> Selection {
        if ns.name == self.source_namespace {
            Selection::SourceNamespace
        } else if self.exclude_namespaces.contains(&ns.name) {
            Selection::Excluded
        } else if self.namespaces.contains(&ns.name) {
            Selection::Listed
        } else if self
            .namespace_selector
            .as_ref()
            .is_some_and(|s| s.matches(&ns.labels))
        {
            Selection::SelectorMatches
        } else {
            Selection::NotSelected
        }
    }

    /// Whether `ns` consents to this rule's copies: always for trusted rules; for the inline
    /// rule of an untrusted namespace only if `ns` accepts copies from that namespace.
    pub fn consented_by(&self, ns: &NamespaceInfo) -> bool {
        self.tier != Tier::ConsentedInline || tenancy::accepts_from(ns, &self.source_namespace)
    }

    /// Whether the rule can target anything at all.
    pub fn has_targets(&self) -> bool {
        self.namespace_selector.is_some() || !self.namespaces.is_empty()
    }

    /// The kind of the rule's copies: its sources' kind, unless `target.kind` says otherwise.
    pub fn target_kind(&self) -> Kind {
        self.transform.target_kind(self.kind)
    }

    /// Name of the copy of `source_name`.
    pub fn target_name<'a>(&'a self, source_name: &'a str) -> &'a str {
        self.target_name.as_deref().unwrap_or(source_name)
    }

    /// Human-readable source description (`ns/name` or `ns/{selector}`), for status and events.
    pub fn source_description(&self) -> String {
        match &self.sources {
            SourceMatch::Name(name) => format!("{}/{}", self.source_namespace, name),
            SourceMatch::Selector(sel) => format!("{}/{{{}}}", self.source_namespace, sel),
            SourceMatch::Bundle(b) => format!(
                "bundle of {} source{}",
                b.sources.len(),
                if b.sources.len() == 1 { "" } else { "s" }
            ),
        }
    }

    /// The inline rule of a source (SPEC §2.1). `Ok(None)` when the source does not carry the
    /// opt-in label. A labelled source without annotations yields a rule without targets.
    /// Its tier is the lowest until the trust policy says otherwise ([`RuleSet::build`]).
    pub fn inline(source: &SourceInfo) -> Result<Option<Rule>, RuleError> {
        if source.labels.get(marks::SOURCE_LABEL).map(String::as_str) != Some("true") {
            return Ok(None);
        }
        if source.is_copy() {
            return Err(RuleError::new(
                marks::SOURCE_LABEL,
                format!(
                    "is set on one of copyrator's copies ({}: {}); a copy is never a source: remove the label, or make the original the source",
                    marks::MANAGED_BY_LABEL,
                    marks::MANAGED_BY_VALUE
                ),
            ));
        }
        let namespace_selector = match source.annotations.get(marks::NAMESPACE_SELECTOR_ANNOTATION)
        {
            None => None,
            Some(raw) if raw.trim().is_empty() => {
                return Err(RuleError::new(
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    "is empty; give a label selector such as \"team=a\" or remove the annotation",
                ));
            }
            Some(raw) => Some(Selector::parse(raw).map_err(|e| {
                RuleError::new(marks::NAMESPACE_SELECTOR_ANNOTATION, e.to_string())
            })?),
        };
        let mut namespaces = BTreeSet::new();
        if let Some(raw) = source.annotations.get(marks::NAMESPACES_ANNOTATION) {
            let count = raw.split(',').filter(|n| !n.trim().is_empty()).count();
            if count > MAX_NAMESPACES {
                return Err(RuleError::new(
                    marks::NAMESPACES_ANNOTATION,
                    format!(
                        "lists {count} namespaces; at most {MAX_NAMESPACES} are allowed (use a selector)"
                    ),
                ));
            }
            for name in raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if !selector::is_dns_label(name) {
                    return Err(RuleError::new(
                        marks::NAMESPACES_ANNOTATION,
                        format!("{name:?} is not a valid namespace name"),
                    ));
                }
                if name == source.key.namespace {
                    return Err(RuleError::new(
                        marks::NAMESPACES_ANNOTATION,
                        format!(
                            "lists the source's own namespace {name:?}; a source is never copied into its own namespace"
                        ),
                    ));
                }
                namespaces.insert(name.to_string());
            }
        }
        let image_pull_secret = match source
            .annotations
            .get(marks::IMAGE_PULL_SECRET_ANNOTATION)
            .map(|v| v.trim())
        {
            None | Some("false") => false,
            Some("true") if source.key.kind == Kind::Secret => true,
            Some("true") => {
                return Err(RuleError::new(
                    marks::IMAGE_PULL_SECRET_ANNOTATION,
                    "is only for Secrets (of type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg), not ConfigMaps",
                ));
            }
            Some(other) => {
                return Err(RuleError::new(
                    marks::IMAGE_PULL_SECRET_ANNOTATION,
                    format!("must be \"true\" or \"false\", not {other:?}"),
                ));
            }
        };
        let read_only = match source.annotations.get(marks::READ_ONLY).map(|v| v.trim()) {
            // Kinds other than Secret and ConfigMap are platform policy: read-only unless the
            // source says otherwise (SPEC §4 item 11).
            None => !source.key.kind.is_consentable(),
            Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(RuleError::new(
                    marks::READ_ONLY,
                    format!("must be \"true\" or \"false\", not {other:?}"),
                ));
            }
        };
        let keys = match source.annotations.get(marks::KEYS_ANNOTATION) {
            None => None,
            Some(_) if !source.key.kind.is_consentable() => {
                return Err(RuleError::new(
                    marks::KEYS_ANNOTATION,
                    format!(
                        "is only for Secrets and ConfigMaps, not a {}",
                        source.key.kind
                    ),
                ));
            }
            Some(raw) => Some(inline_keys(raw)?),
        };
        Ok(Some(Rule {
            id: RuleId::Inline(source.key.clone()),
            kind: source.key.kind,
            source_namespace: source.key.namespace.clone(),
            sources: SourceMatch::Name(source.key.name.clone()),
            namespace_selector,
            namespaces,
            exclude_namespaces: BTreeSet::new(),
            target_name: None,
            deletion_policy: DeletionPolicy::Delete,
            conflict_policy: ConflictPolicy::Skip,
            created: source.created,
            tier: Tier::ConsentedInline,
            image_pull_secret,
            read_only,
            transform: Transform {
                keys,
                ..Transform::default()
            },
        }))
    }

    /// [`Rule::inline`] with its tier as `trust` decides it. An untrusted namespace's inline
    /// rule for a kind other than Secret or ConfigMap is invalid: such kinds are copied only
    /// by a CopyRule or from a trusted namespace, and consent never suffices (SPEC §9.2).
    pub fn inline_tiered(
        source: &SourceInfo,
        trust: &crate::tenancy::TrustPolicy,
    ) -> Result<Option<Rule>, RuleError> {
        let Some(mut rule) = Rule::inline(source)? else {
            return Ok(None);
        };
        if rule.kind.facts().grants.is_some() {
            return Err(RuleError::new(
                marks::SOURCE_LABEL,
                format!(
                    "opts in a {}: RBAC objects are copied only by a CopyRule that names its source, written by someone who may grant what it copies (SPEC §9.10)",
                    rule.kind
                ),
            ));
        }
        rule.tier = trust.inline_tier(&rule.source_namespace);
        if rule.tier == Tier::ConsentedInline && !rule.kind.is_consentable() {
            return Err(RuleError::new(
                marks::SOURCE_LABEL,
                format!(
                    "opts in a {} of namespace {:?}, which is not trusted: kinds other than Secret and ConfigMap are copied only by a CopyRule or from a trusted namespace (--trusted-namespaces), and a namespace's consent (copyrator.io/accept-from) never suffices for them",
                    rule.kind, rule.source_namespace
                ),
            ));
        }
        Ok(Some(rule))
    }

    /// Validates a CopyRule and converts it. Errors name the offending field.
    pub fn from_copy_rule(rule: &CopyRule) -> Result<Rule, RuleError> {
        let name = rule.metadata.name.clone().unwrap_or_default();
        let spec = &rule.spec;
        if spec.sources.is_some() {
            return bundle_rule(rule, name);
        }
        if spec.drop_expired {
            return Err(RuleError::new(
                "spec.dropExpired",
                "is only for bundles (spec.sources)",
            ));
        }
        if spec.target.as_ref().is_some_and(|t| t.key.is_some()) {
            return Err(RuleError::new(
                "spec.target.key",
                "is only for bundles (spec.sources); spec.keys selects and renames the keys of other copies",
            ));
        }
        let kind = copy_rule_kind(spec)?;
        if !selector::is_dns_label(&spec.source_namespace) {
            return Err(RuleError::new(
                "spec.sourceNamespace",
                format!("{:?} is not a valid namespace name", spec.source_namespace),
            ));
        }
        let sources = match (&spec.source_name, &spec.source_selector) {
            (Some(_), Some(_)) => {
                return Err(RuleError::new(
                    "spec.sourceName",
                    "spec.sourceName and spec.sourceSelector are mutually exclusive; set exactly one",
                ));
            }
            (None, None) => {
                return Err(RuleError::new(
                    "spec.sourceName",
                    "one of spec.sourceName or spec.sourceSelector is required",
                ));
            }
            (Some(n), None) => {
                if !selector::is_dns_subdomain(n) {
                    return Err(RuleError::new(
                        "spec.sourceName",
                        format!("{n:?} is not a valid object name"),
                    ));
                }
                SourceMatch::Name(n.clone())
            }
            (None, Some(_)) if kind.facts().grants.is_some() => {
                return Err(RuleError::new(
                    "spec.sourceSelector",
                    format!(
                        "a {kind} is copied only from a named source (spec.sourceName): a selector would copy whatever anyone who may write there labels (SPEC §9.10)"
                    ),
                ));
            }
            (None, Some(sel)) => SourceMatch::Selector(
                Selector::from_label_selector(sel)
                    .map_err(|e| RuleError::new("spec.sourceSelector", e.to_string()))?,
            ),
        };
        if let Some(target) = &spec.target_name {
            if matches!(sources, SourceMatch::Selector(_)) {
                return Err(RuleError::new(
                    "spec.targetName",
                    "is only allowed with spec.sourceName (a selector may match many sources)",
                ));
            }
            if !selector::is_dns_subdomain(target) {
                return Err(RuleError::new(
                    "spec.targetName",
                    format!("{target:?} is not a valid object name"),
                ));
            }
        }
        let namespace_selector = spec
            .namespace_selector
            .as_ref()
            .map(Selector::from_label_selector)
            .transpose()
            .map_err(|e| RuleError::new("spec.namespaceSelector", e.to_string()))?;
        let namespaces = namespace_set("spec.namespaces", &spec.namespaces)?;
        let exclude_namespaces = namespace_set("spec.excludeNamespaces", &spec.exclude_namespaces)?;
        if namespaces.contains(&spec.source_namespace) {
            return Err(RuleError::new(
                "spec.namespaces",
                format!(
                    "contains the source namespace {:?}; a source is never copied into its own namespace",
                    spec.source_namespace
                ),
            ));
        }
        let transform = copy_rule_transform(spec, kind)?;
        if spec.image_pull_secret && transform.target_kind(kind) != Kind::Secret {
            return Err(RuleError::new(
                "spec.imagePullSecret",
                "is only for copies that are Secrets (of type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg)",
            ));
        }
        if namespace_selector.is_none() && namespaces.is_empty() {
            return Err(RuleError::new(
                "spec.namespaceSelector",
                "one of spec.namespaceSelector or spec.namespaces is required (use namespaceSelector: {} for every namespace)",
            ));
        }
        Ok(Rule {
            id: RuleId::CopyRule(name),
            kind,
            source_namespace: spec.source_namespace.clone(),
            sources,
            namespace_selector,
            namespaces,
            exclude_namespaces,
            target_name: spec.target_name.clone(),
            deletion_policy: spec.deletion_policy,
            conflict_policy: spec.conflict_policy,
            created: rule
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or_default(),
            tier: Tier::CopyRule,
            image_pull_secret: spec.image_pull_secret,
            read_only: spec
                .read_only
                .unwrap_or(!transform.target_kind(kind).is_consentable()),
            transform,
        })
    }
}

/// Most keys one rule may list.
pub const MAX_KEYS: usize = 256;

/// Validates a CopyRule with `spec.sources` (a bundle, SPEC §3.2) and converts it: the
/// fields of a one-source rule are refused, each source and the target checked.
fn bundle_rule(rule: &CopyRule, name: String) -> Result<Rule, RuleError> {
    let spec = &rule.spec;
    let not_with = |field: &str| {
        RuleError::new(
            field,
            "is not allowed with spec.sources: a bundle names each source's namespace, object and key in spec.sources",
        )
    };
    if !spec.source_namespace.is_empty() {
        return Err(not_with("spec.sourceNamespace"));
    }
    if spec.source_name.is_some() {
        return Err(not_with("spec.sourceName"));
    }
    if spec.source_selector.is_some() {
        return Err(not_with("spec.sourceSelector"));
    }
    if spec.keys.is_some() {
        return Err(not_with("spec.keys"));
    }
    if spec.image_pull_secret {
        return Err(RuleError::new(
            "spec.imagePullSecret",
            "is not for bundles: a bundle's copies hold certificates",
        ));
    }
    if spec.api_version.as_deref().is_some_and(|v| v != "v1") {
        return Err(RuleError::new(
            "spec.apiVersion",
            "a bundle's copies are Secrets or ConfigMaps (v1)",
        ));
    }
    let target = spec.target.clone().unwrap_or_default();
    let kind = match target.kind.as_deref().unwrap_or(spec.kind.as_str()) {
        "Secret" => Kind::Secret,
        "ConfigMap" => Kind::ConfigMap,
        other => {
            return Err(RuleError::new(
                if target.kind.is_some() {
                    "spec.target.kind"
                } else {
                    "spec.kind"
                },
                format!("{other:?}: a bundle's copies are a Secret or a ConfigMap"),
            ));
        }
    };
    let Some(key) = target.key.clone() else {
        return Err(RuleError::new(
            "spec.target.key",
            "is required for a bundle: the key of the copies that holds the certificates",
        ));
    };
    check_key("spec.target.key", &key)?;
    if let Some(type_) = &target.type_ {
        check_secret_type(kind, type_)?;
    }
    let formats = target
        .formats
        .as_ref()
        .map(|f| transform::Formats::for_bundle(f, &key))
        .transpose()?;
    let Some(target_name) = spec.target_name.clone() else {
        return Err(RuleError::new(
            "spec.targetName",
            "is required for a bundle: the name of its copies",
        ));
    };
    if !selector::is_dns_subdomain(&target_name) {
        return Err(RuleError::new(
            "spec.targetName",
            format!("{target_name:?} is not a valid object name"),
        ));
    }
    let entries = spec.sources.as_deref().unwrap_or_default();
    if entries.is_empty() || entries.len() > bundle::MAX_SOURCES {
        return Err(RuleError::new(
            "spec.sources",
            format!(
                "lists {} sources; a bundle takes 1 to {}",
                entries.len(),
                bundle::MAX_SOURCES
            ),
        ));
    }
    let mut sources = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let field = |f: &str| format!("spec.sources[{i}].{f}");
        let kind = match entry.kind.as_str() {
            "Secret" => Kind::Secret,
            "ConfigMap" => Kind::ConfigMap,
            other => {
                return Err(RuleError::new(
                    field("kind"),
                    format!("{other:?}: a bundle's sources are Secrets or ConfigMaps"),
                ));
            }
        };
        if !selector::is_dns_label(&entry.namespace) {
            return Err(RuleError::new(
                field("namespace"),
                format!("{:?} is not a valid namespace name", entry.namespace),
            ));
        }
        let select = match (&entry.name, &entry.selector) {
            (Some(n), None) if selector::is_dns_subdomain(n) => BundleSelect::Name(n.clone()),
            (Some(n), None) => {
                return Err(RuleError::new(
                    field("name"),
                    format!("{n:?} is not a valid object name"),
                ));
            }
            (None, Some(sel)) => BundleSelect::Selector(
                Selector::from_label_selector(sel)
                    .map_err(|e| RuleError::new(field("selector"), e.to_string()))?,
            ),
            _ => {
                return Err(RuleError::new(
                    field("name"),
                    "exactly one of name and selector is required",
                ));
            }
        };
        if !transform::is_valid_key(&entry.key) {
            return Err(RuleError::new(
                field("key"),
                format!("{:?} is not a valid key", entry.key),
            ));
        }
        sources.push(BundleSource {
            kind,
            namespace: entry.namespace.clone(),
            select,
            key: entry.key.clone(),
        });
    }
    let namespace_selector = spec
        .namespace_selector
        .as_ref()
        .map(Selector::from_label_selector)
        .transpose()
        .map_err(|e| RuleError::new("spec.namespaceSelector", e.to_string()))?;
    let namespaces = namespace_set("spec.namespaces", &spec.namespaces)?;
    let exclude_namespaces = namespace_set("spec.excludeNamespaces", &spec.exclude_namespaces)?;
    if namespace_selector.is_none() && namespaces.is_empty() {
        return Err(RuleError::new(
            "spec.namespaceSelector",
            "one of spec.namespaceSelector or spec.namespaces is required (use namespaceSelector: {} for every namespace)",
        ));
    }
    let created = rule
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or_default();
    let owner = SourceInfo {
        key: ObjectKey::bundle(kind, &name),
        uid: rule.metadata.uid.clone().unwrap_or_default(),
        resource_version: String::new(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        created,
        deleting: false,
        dropped: None,
    };
    Ok(Rule {
        id: RuleId::CopyRule(name),
        kind,
        // No namespace: every namespace may receive the bundle, the sources' own included.
        source_namespace: String::new(),
        sources: SourceMatch::Bundle(Box::new(Bundle {
            sources,
            key,
            type_: target.type_,
            drop_expired: spec.drop_expired,
            formats,
            owner,
        })),
        namespace_selector,
        namespaces,
        exclude_namespaces,
        target_name: Some(target_name),
        deletion_policy: spec.deletion_policy,
        conflict_policy: spec.conflict_policy,
        created,
        tier: Tier::CopyRule,
        image_pull_secret: false,
        read_only: spec.read_only.unwrap_or(false),
        transform: Transform::default(),
    })
}

/// The keys of the inline annotation `copyrator.io/keys`: `ca.crt,tls.crt=server.pem`.
fn inline_keys(raw: &str) -> Result<Vec<KeyMapping>, RuleError> {
    let field = marks::KEYS_ANNOTATION;
    let entries: Vec<(&str, Option<&str>)> = raw
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('=') {
            Some((from, to)) => (from.trim(), Some(to.trim())),
            None => (e, None),
        })
        .collect();
    key_mappings(field, entries)
}

/// Checks a rule's keys (each valid, at most [`MAX_KEYS`], no two copied under one name).
fn key_mappings<'a>(
    field: &str,
    entries: Vec<(&'a str, Option<&'a str>)>,
) -> Result<Vec<KeyMapping>, RuleError> {
    if entries.is_empty() {
        return Err(RuleError::new(
            field,
            "lists no key; leave it out to copy every key",
        ));
    }
    if entries.len() > MAX_KEYS {
        return Err(RuleError::new(
            field,
            format!(
                "lists {} keys; at most {MAX_KEYS} are allowed",
                entries.len()
            ),
        ));
    }
    let mut out: Vec<KeyMapping> = Vec::with_capacity(entries.len());
    for (from, to) in entries {
        let to = to.unwrap_or(from);
        for key in [from, to] {
            check_key(field, key)?;
        }
        if out.iter().any(|k| k.to == to) {
            return Err(RuleError::new(
                field,
                format!("copies two keys as {to:?}; each name in the copies must be unique"),
            ));
        }
        out.push(KeyMapping {
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    Ok(out)
}

/// The transform a CopyRule asks for with `spec.keys` and `spec.target` (SPEC §3.2), for
/// sources of `kind`.
fn copy_rule_transform(spec: &CopyRuleSpec, kind: Kind) -> Result<Transform, RuleError> {
    let target = spec.target.clone().unwrap_or_default();
    if !kind.is_consentable() {
        let field = match (&spec.keys, &target.kind, &target.type_, &target.formats) {
            (Some(_), ..) => "spec.keys",
            (None, None, None, None) => return Ok(Transform::default()),
            _ => "spec.target",
        };
        return Err(RuleError::new(
            field,
            format!("is only for Secrets and ConfigMaps, not a {}", kind.name()),
        ));
    }
    let keys = match &spec.keys {
        None => None,
        Some(entries) => Some(key_mappings(
            "spec.keys",
            entries
                .iter()
                .map(|e| match e {
                    KeySpec::Name(name) => (name.as_str(), None),
                    KeySpec::Renamed { from, to } => (from.as_str(), to.as_deref()),
                })
                .collect(),
        )?),
    };
    let target_kind = match target.kind.as_deref() {
        None => kind,
        Some("Secret") => Kind::Secret,
        Some("ConfigMap") => Kind::ConfigMap,
        Some(other) => {
            return Err(RuleError::new(
                "spec.target.kind",
                format!("{other:?} is not a kind copies can be made as: Secret or ConfigMap"),
            ));
        }
    };
    if let Some(type_) = &target.type_ {
        check_secret_type(target_kind, type_)?;
    }
    let formats = match &target.formats {
        Some(spec) => Some(transform::Formats::from_spec(spec, keys.as_deref())?),
        None => None,
    };
    Ok(Transform {
        keys,
        kind: (target_kind != kind).then_some(target_kind),
        type_: target.type_,
        formats,
    })
}

/// The kind a CopyRule names by `spec.apiVersion` and `spec.kind` (SPEC §2.2), if copyrator
/// copies it here: Secret and ConfigMap, and the kinds `--copy-kinds` enabled and discovery
/// resolved.
pub fn copy_rule_kind(spec: &crate::copyrule::CopyRuleSpec) -> Result<Kind, RuleError> {
    let group = spec.group();
    if let Some(version) = spec.api_version.as_deref()
        && (version.is_empty() || version.starts_with('/') || version.ends_with('/'))
    {
        return Err(RuleError::new(
            "spec.apiVersion",
            format!("{version:?} is not an API version (v1, networking.k8s.io/v1, ...)"),
        ));
    }
    if let Some(why) = crate::model::not_copyable(group, &spec.kind) {
        return Err(RuleError::new("spec.kind", why));
    }
    if let Some(kind) = Kind::lookup(group, &spec.kind)
        && !kind.is_served()
    {
        return Err(RuleError::new(
            "spec.kind",
            format!(
                "{} is no longer served by the API server (was its CustomResourceDefinition deleted?)",
                kind.name()
            ),
        ));
    }
    Kind::lookup(group, &spec.kind).ok_or_else(|| {
        let name = if group.is_empty() {
            spec.kind.clone()
        } else {
            format!("{}.{group}", spec.kind)
        };
        RuleError::new(
            "spec.kind",
            format!(
                "{name} is not a kind copyrator copies here: it copies {}; add it to --copy-kinds (chart value copyKinds), and it must be a namespaced kind the API server serves",
                Kind::all()
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

/// Most explicit namespaces one rule may list.
pub const MAX_NAMESPACES: usize = 1000;

fn namespace_set(field: &str, names: &[String]) -> Result<BTreeSet<String>, RuleError> {
    if names.len() > MAX_NAMESPACES {
        return Err(RuleError::new(
            field,
            format!(
                "lists {} namespaces; at most {MAX_NAMESPACES} are allowed (use a selector)",
                names.len()
            ),
        ));
    }
    names
        .iter()
        .map(|n| {
            if selector::is_dns_label(n) {
                Ok(n.clone())
            } else {
                Err(RuleError::new(
                    field,
                    format!("{n:?} is not a valid namespace name"),
                ))
            }
        })
        .collect()
}

/// An invalid rule: which field or annotation, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RuleError {
    pub field: String,
    pub message: String,
}

impl RuleError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// How much of the sources of an untrusted namespace copyrator acts on (SPEC §9.7): what one
/// tenant can make it hold and do is bounded by the tenant, not multiplied by the cluster.
/// Sources of trusted namespaces are the platform's own and are not capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceCaps {
    /// Opted-in sources per namespace (`--max-sources-per-namespace`): the oldest act, the
    /// rest are held back.
    pub per_namespace: usize,
    /// Bytes of the labels and annotations copyrator keeps of one source
    /// (`--max-source-metadata-bytes`, [`SourceInfo::kept`]).
    pub metadata_bytes: usize,
}

impl Default for SourceCaps {
    fn default() -> Self {
        Self {
            per_namespace: 100,
            metadata_bytes: 16 * 1024,
        }
    }
}

/// Why a source of an untrusted namespace is held back (SPEC §9.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Capped {
    /// Its labels and annotations take this many bytes, over the cap.
    MetadataBytes(usize),
    /// Its namespace holds more opted-in sources than the cap, and older ones act.
    PerNamespace,
}

impl std::fmt::Display for Capped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capped::MetadataBytes(bytes) => write!(
                f,
                "its labels and annotations take {bytes} bytes, more than copyrator acts on for a source of a namespace it does not trust (--max-source-metadata-bytes)"
            ),
            Capped::PerNamespace => f.write_str(
                "its namespace holds more opted-in sources than copyrator acts on for a namespace it does not trust (--max-sources-per-namespace); older ones are copied",
            ),
        }
    }
}

/// Every rule in force, in precedence order (tier, then older first, then by id), plus the
/// sources whose inline configuration is invalid and the sources a cap holds back.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    pub invalid_sources: BTreeMap<ObjectKey, RuleError>,
    pub invalid_copy_rules: BTreeMap<String, RuleError>,
    /// Sources of untrusted namespaces over a cap: no rule applies to them, and their copies
    /// stay as they are (neither written nor deleted).
    pub capped_sources: BTreeMap<ObjectKey, Capped>,
}

impl RuleSet {
    /// Builds the rule set from the labelled sources' metadata and the CopyRules; `trust`
    /// decides the tier of each inline rule.
    pub fn build<'a>(
        labelled_sources: impl IntoIterator<Item = &'a SourceInfo>,
        copy_rules: impl IntoIterator<Item = &'a CopyRule>,
        trust: &TrustPolicy,
    ) -> Self {
        Self::build_capped(labelled_sources, copy_rules, trust, &SourceCaps::default())
    }

    /// [`RuleSet::build`], the sources of untrusted namespaces over `caps` held back: no
    /// rule, inline or CopyRule, applies to them.
    pub fn build_capped<'a>(
        labelled_sources: impl IntoIterator<Item = &'a SourceInfo>,
        copy_rules: impl IntoIterator<Item = &'a CopyRule>,
        trust: &TrustPolicy,
        caps: &SourceCaps,
    ) -> Self {
        let mut set = RuleSet::default();
        // The sources of each untrusted namespace, oldest first: the first ones act.
        let mut untrusted: BTreeMap<&str, Vec<&SourceInfo>> = BTreeMap::new();
        let mut acting = Vec::new();
        for source in labelled_sources {
            if trust.is_trusted(&source.key.namespace) {
                acting.push(source);
            } else {
                untrusted
                    .entry(source.key.namespace.as_str())
                    .or_default()
                    .push(source);
            }
        }
        for (_, mut sources) in untrusted {
            sources.sort_by(|a, b| (a.created, &a.key).cmp(&(b.created, &b.key)));
            let mut held = 0;
            for source in sources {
                let bytes = source.dropped.unwrap_or_else(|| source.metadata_bytes());
                if bytes > caps.metadata_bytes {
                    set.capped_sources
                        .insert(source.key.clone(), Capped::MetadataBytes(bytes));
                } else if source.deleting || source.is_copy() {
                    acting.push(source);
                } else if held >= caps.per_namespace {
                    set.capped_sources
                        .insert(source.key.clone(), Capped::PerNamespace);
                } else {
                    held += 1;
                    acting.push(source);
                }
            }
        }
        for source in acting {
            if source.deleting {
                continue;
            }
            match Rule::inline_tiered(source, trust) {
                Ok(Some(rule)) if rule.has_targets() => set.rules.push(rule),
                Ok(_) => {}
                Err(e) => {
                    set.invalid_sources.insert(source.key.clone(), e);
                }
            }
        }
        for cr in copy_rules {
            if cr.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match Rule::from_copy_rule(cr) {
                Ok(rule) => set.rules.push(rule),
                Err(e) => {
                    set.invalid_copy_rules
                        .insert(cr.metadata.name.clone().unwrap_or_default(), e);
                }
            }
        }
        set.rules
            .sort_by(|a, b| (a.tier, a.created, &a.id).cmp(&(b.tier, b.created, &b.id)));
        set
    }

    /// The rules that apply to `source`.
    pub fn for_source<'a>(&'a self, source: &'a SourceInfo) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.applies_to(source))
    }

    pub fn get(&self, id: &RuleId) -> Option<&Rule> {
        self.rules.iter().find(|r| &r.id == id)
    }

    pub fn copy_rule(&self, name: &str) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.id.copy_rule_name() == Some(name))
    }
}

/// `key` as a key of the copies: what the API server accepts, else the denial at `field`.
pub(crate) fn check_key(field: impl Into<String>, key: &str) -> Result<(), RuleError> {
    if transform::is_valid_key(key) {
        Ok(())
    } else {
        Err(RuleError::new(
            field,
            format!(
                "{key:?} is not a valid key (at most 253 characters of letters, digits, '-', '_' and '.')"
            ),
        ))
    }
}

/// `spec.target.type` for copies of `kind`: only Secrets have a type, one the API server
/// accepts, and never a service-account token's.
fn check_secret_type(kind: Kind, type_: &str) -> Result<(), RuleError> {
    if kind != Kind::Secret {
        return Err(RuleError::new(
            "spec.target.type",
            "is only for copies that are Secrets (a ConfigMap has no type)",
        ));
    }
    if type_.is_empty()
        || type_.len() > 253
        || !type_
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
    {
        return Err(RuleError::new(
            "spec.target.type",
            format!("{type_:?} is not a Secret type (Opaque, kubernetes.io/tls, ...)"),
        ));
    }
    if let Some((_, why)) = crate::model::kind_table::NEVER_COPIED_SECRET_TYPES
        .iter()
        .find(|(t, _)| *t == type_)
    {
        return Err(RuleError::new(
            "spec.target.type",
            format!("copyrator never makes Secrets of type {type_}: {why}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copyrule::CopyRuleSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    pub(crate) fn source(
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> SourceInfo {
        SourceInfo {
            key: ObjectKey::new(Kind::Secret, ns, name),
            uid: format!("uid-{ns}-{name}"),
            resource_version: "1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            created: 0,
            deleting: false,
            dropped: None,
        }
    }

    fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
        NamespaceInfo {
            name: name.into(),
            resource_version: String::new(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            accept_from: None,
            terminating: false,
        }
    }

    fn spec() -> CopyRuleSpec {
        CopyRuleSpec {
            api_version: None,
            kind: "ConfigMap".into(),
            source_namespace: "platform".into(),
            sources: None,
            drop_expired: false,
            source_name: Some("shared".into()),
            source_selector: None,
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("team".to_string(), "a".to_string())].into()),
                match_expressions: None,
            }),
            namespaces: vec![],
            exclude_namespaces: vec![],
            target_name: None,
            deletion_policy: DeletionPolicy::Delete,
            conflict_policy: ConflictPolicy::Skip,
            image_pull_secret: false,
            read_only: None,
            keys: None,
            target: None,
        }
    }

    fn copy_rule(spec: CopyRuleSpec) -> CopyRule {
        CopyRule::new("r", spec)
    }

    #[test]
    fn unlabelled_source_has_no_inline_rule() {
        let s = source("default", "s", &[], &[(marks::NAMESPACES_ANNOTATION, "a")]);
        assert_eq!(Rule::inline(&s), Ok(None));
    }

    #[test]
    fn inline_rule_from_annotations() {
        let s = source(
            "platform",
            "registry-cred",
            &[(marks::SOURCE_LABEL, "true")],
            &[
                (
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    "registry=enabled,env in (prod,staging)",
                ),
                (marks::NAMESPACES_ANNOTATION, "team-a, team-b,"),
            ],
        );
        let rule = Rule::inline(&s).unwrap().unwrap();
        assert_eq!(rule.id.mark(), "inline");
        assert!(rule.targets_namespace(&ns("team-a", &[])));
        assert!(rule.targets_namespace(&ns("x", &[("registry", "enabled"), ("env", "prod")])));
        assert!(!rule.targets_namespace(&ns("x", &[("registry", "enabled")])));
        assert!(
            !rule.targets_namespace(&ns("platform", &[("registry", "enabled"), ("env", "prod")]))
        );
        assert!(rule.selects_source(&s));
    }

    #[test]
    fn an_untrusted_namespace_copies_no_powerful_kind_even_with_consent() {
        let np = Kind::register(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        )
        .unwrap();
        let mut s = source(
            "tenant",
            "deny-all",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACES_ANNOTATION, "victim")],
        );
        s.key.kind = np;
        let trust = TrustPolicy {
            trusted_namespaces: tenancy::NamespacePatterns::parse("platform").unwrap(),
        };
        let e = Rule::inline_tiered(&s, &trust).unwrap_err();
        assert_eq!(e.field, marks::SOURCE_LABEL);
        assert!(e.message.contains("never suffices"), "{e}");
        let set = RuleSet::build([&s], [], &trust);
        assert!(set.rules.is_empty());
        assert!(set.invalid_sources.contains_key(&s.key));
        // A Secret of the same namespace is a consented inline rule, as before.
        s.key.kind = Kind::Secret;
        let rule = Rule::inline_tiered(&s, &trust).unwrap().unwrap();
        assert_eq!(rule.tier, Tier::ConsentedInline);
        // From a trusted namespace the NetworkPolicy is copied.
        s.key.kind = np;
        s.key.namespace = "platform".into();
        let rule = Rule::inline_tiered(&s, &trust).unwrap().unwrap();
        assert_eq!(rule.tier, Tier::TrustedInline);
    }

    #[test]
    fn copy_rules_name_any_registered_kind_by_api_version() {
        Kind::register(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        )
        .unwrap();
        let mut spec = spec();
        spec.api_version = Some("rbac.authorization.k8s.io/v1".into());
        spec.kind = "RoleBinding".into();
        let rule = Rule::from_copy_rule(&CopyRule::new("r", spec.clone())).unwrap();
        assert_eq!(rule.kind.plural(), "rolebindings");
        spec.api_version = None;
        let e = Rule::from_copy_rule(&CopyRule::new("r", spec.clone())).unwrap_err();
        assert_eq!(e.field, "spec.kind");
        assert!(e.message.contains("--copy-kinds"), "{e}");
        spec.kind = "Pod".into();
        let e = Rule::from_copy_rule(&CopyRule::new("r", spec)).unwrap_err();
        assert!(e.message.contains("never copied"), "{e}");
    }

    #[test]
    fn labelled_source_without_annotations_targets_nothing() {
        let s = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &[]);
        let rule = Rule::inline(&s).unwrap().unwrap();
        assert!(!rule.has_targets());
    }

    #[test]
    fn image_pull_secret_is_asked_by_annotation_or_spec_and_only_for_secrets() {
        let with = |kind: Kind, value: &str| {
            let mut s = source(
                "default",
                "s",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::IMAGE_PULL_SECRET_ANNOTATION, value)],
            );
            s.key.kind = kind;
            Rule::inline(&s)
        };
        assert!(
            with(Kind::Secret, "true")
                .unwrap()
                .unwrap()
                .image_pull_secret
        );
        assert!(
            !with(Kind::Secret, "false")
                .unwrap()
                .unwrap()
                .image_pull_secret
        );
        let plain = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &[]);
        assert!(!Rule::inline(&plain).unwrap().unwrap().image_pull_secret);
        let e = with(Kind::ConfigMap, "true").unwrap_err();
        assert_eq!(e.field, marks::IMAGE_PULL_SECRET_ANNOTATION);
        assert!(e.to_string().contains("only for Secrets"), "{e}");
        let e = with(Kind::Secret, "yes").unwrap_err();
        assert!(e.to_string().contains("\"true\" or \"false\""), "{e}");

        let mut secret = spec();
        secret.kind = "Secret".into();
        secret.image_pull_secret = true;
        let rule = Rule::from_copy_rule(&CopyRule::new("r", secret)).unwrap();
        assert!(rule.image_pull_secret);
        let mut config_map = spec();
        config_map.image_pull_secret = true;
        let e = Rule::from_copy_rule(&CopyRule::new("r", config_map)).unwrap_err();
        assert_eq!(e.field, "spec.imagePullSecret");
    }

    #[test]
    fn read_only_is_asked_by_annotation_or_spec() {
        let with = |value: &str| {
            let s = source(
                "default",
                "s",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::READ_ONLY, value)],
            );
            Rule::inline(&s)
        };
        assert!(with("true").unwrap().unwrap().read_only);
        assert!(!with("false").unwrap().unwrap().read_only);
        let plain = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &[]);
        assert!(!Rule::inline(&plain).unwrap().unwrap().read_only);
        let e = with("yes").unwrap_err();
        assert_eq!(e.field, marks::READ_ONLY);
        assert!(e.to_string().contains("\"true\" or \"false\""), "{e}");

        let mut read_only = spec();
        read_only.read_only = Some(true);
        assert!(
            Rule::from_copy_rule(&CopyRule::new("r", read_only))
                .unwrap()
                .read_only
        );
        assert!(
            !Rule::from_copy_rule(&CopyRule::new("r", spec()))
                .unwrap()
                .read_only
        );
    }

    #[test]
    fn invalid_inline_annotations_name_the_annotation() {
        let cases: &[(&str, &str, &str)] = &[
            (
                marks::NAMESPACE_SELECTOR_ANNOTATION,
                "env in prod",
                "expected '('",
            ),
            (marks::NAMESPACE_SELECTOR_ANNOTATION, " ", "is empty"),
            (
                marks::NAMESPACES_ANNOTATION,
                "Team_A",
                "not a valid namespace name",
            ),
            (marks::NAMESPACES_ANNOTATION, "a,default", "own namespace"),
        ];
        for (annotation, value, needle) in cases {
            let s = source(
                "default",
                "s",
                &[(marks::SOURCE_LABEL, "true")],
                &[(annotation, value)],
            );
            let e = Rule::inline(&s).unwrap_err();
            assert_eq!(&e.field, annotation);
            assert!(e.to_string().starts_with(annotation));
            assert!(e.message.contains(needle), "{e} should mention {needle:?}");
        }
    }

    #[test]
    fn copy_rule_validation_names_the_field() {
        let sel = LabelSelector {
            match_labels: Some([("copyrator".to_string(), "true".to_string())].into()),
            match_expressions: None,
        };
        let bad_op = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Like".into(),
                values: Some(vec!["x".into()]),
            }]),
        };
        let cases: Vec<(CopyRuleSpec, &str, &str)> = vec![
            (
                CopyRuleSpec {
                    source_selector: Some(sel.clone()),
                    ..spec()
                },
                "spec.sourceName",
                "mutually exclusive",
            ),
            (
                CopyRuleSpec {
                    source_name: None,
                    ..spec()
                },
                "spec.sourceName",
                "is required",
            ),
            (
                CopyRuleSpec {
                    source_name: None,
                    source_selector: Some(sel.clone()),
                    target_name: Some("x".into()),
                    ..spec()
                },
                "spec.targetName",
                "only allowed with spec.sourceName",
            ),
            (
                CopyRuleSpec {
                    namespace_selector: Some(bad_op.clone()),
                    ..spec()
                },
                "spec.namespaceSelector",
                "not one of In",
            ),
            (
                CopyRuleSpec {
                    source_name: None,
                    source_selector: Some(bad_op),
                    ..spec()
                },
                "spec.sourceSelector",
                "not one of In",
            ),
            (
                CopyRuleSpec {
                    namespaces: vec!["platform".into()],
                    ..spec()
                },
                "spec.namespaces",
                "source namespace",
            ),
            (
                CopyRuleSpec {
                    namespaces: vec!["Bad".into()],
                    ..spec()
                },
                "spec.namespaces",
                "not a valid namespace",
            ),
            (
                CopyRuleSpec {
                    exclude_namespaces: vec!["a b".into()],
                    ..spec()
                },
                "spec.excludeNamespaces",
                "not a valid namespace",
            ),
            (
                CopyRuleSpec {
                    namespace_selector: None,
                    ..spec()
                },
                "spec.namespaceSelector",
                "is required",
            ),
            (
                CopyRuleSpec {
                    source_namespace: "".into(),
                    ..spec()
                },
                "spec.sourceNamespace",
                "not a valid namespace",
            ),
        ];
        for (spec, field, needle) in cases {
            let e = Rule::from_copy_rule(&copy_rule(spec.clone())).expect_err(&format!("{spec:?}"));
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(needle), "{e} should mention {needle:?}");
        }
    }

    /// SPEC §9.7: of an untrusted namespace's sources the oldest act, up to the cap; one whose
    /// labels and annotations are over the byte cap does not; trusted namespaces are not
    /// capped.
    #[test]
    fn caps_hold_back_the_newest_and_the_largest_sources_of_untrusted_namespaces() {
        let caps = SourceCaps {
            per_namespace: 2,
            metadata_bytes: 100,
        };
        let trust = TrustPolicy {
            trusted_namespaces: tenancy::NamespacePatterns::parse("platform").unwrap(),
        };
        let opted = [(marks::SOURCE_LABEL, "true")];
        let annotated = [(marks::NAMESPACES_ANNOTATION, "team-a")];
        let at = |ns: &str, name: &str, created: i64| SourceInfo {
            created,
            ..source(ns, name, &opted, &annotated)
        };
        let big = "x".repeat(200);
        let mut large = at("tenant", "large", 0);
        large
            .annotations
            .insert("example.com/big".into(), big.clone());
        // Tracking metadata is never copied: it does not count.
        let mut applied = at("tenant", "applied", 1);
        applied.annotations.insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            big.clone(),
        );
        let sources = [
            large,
            applied,
            at("tenant", "b", 2),
            at("tenant", "a", 2),
            at("tenant", "newest", 3),
            at("platform", "p1", 1),
            at("platform", "p2", 2),
            at("platform", "p3", 3),
        ];
        // The opt-in label, the namespaces annotation and the big one.
        let large_bytes = marks::SOURCE_LABEL.len()
            + "true".len()
            + marks::NAMESPACES_ANNOTATION.len()
            + "team-a".len()
            + "example.com/big".len()
            + big.len();
        let set = RuleSet::build_capped(&sources, [], &trust, &caps);
        let capped: Vec<(&str, &Capped)> = set
            .capped_sources
            .iter()
            .map(|(k, why)| (k.name.as_str(), why))
            .collect();
        assert_eq!(
            capped,
            [
                ("b", &Capped::PerNamespace),
                ("large", &Capped::MetadataBytes(large_bytes)),
                ("newest", &Capped::PerNamespace),
            ],
            "the oldest two act (applied, then a before b by name)"
        );
        let acting: BTreeSet<&str> = set
            .rules
            .iter()
            .filter_map(|r| match &r.id {
                RuleId::Inline(k) => Some(k.name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(acting, BTreeSet::from(["a", "applied", "p1", "p2", "p3"]));
        // What is kept of a source over the byte cap is its key and opt-in label, and its size.
        let kept = sources[0].clone().kept(Some(caps.metadata_bytes));
        assert!(kept.annotations.is_empty());
        assert_eq!(kept.labels.len(), 1);
        assert_eq!(kept.dropped, Some(large_bytes));
        let again = RuleSet::build_capped([&kept], [], &trust, &caps);
        assert!(matches!(
            again.capped_sources.values().next(),
            Some(Capped::MetadataBytes(_))
        ));
        // Within the cap, only what is never copied is dropped.
        let kept = sources[1].clone().kept(Some(caps.metadata_bytes));
        assert_eq!(kept.dropped, None);
        assert!(
            !kept
                .annotations
                .contains_key("kubectl.kubernetes.io/last-applied-configuration")
        );
        assert!(kept.annotations.contains_key(marks::NAMESPACES_ANNOTATION));
    }

    #[test]
    fn a_copy_is_never_a_source() {
        let copy = source(
            "shared",
            "cacerts",
            &[
                (marks::SOURCE_LABEL, "true"),
                (marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE),
            ],
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, "")],
        );
        let err = Rule::inline(&copy).unwrap_err();
        assert_eq!(err.field, marks::SOURCE_LABEL);
        assert!(err.message.contains("a copy is never a source"), "{err}");
        // Named by a CopyRule's sourceName: not selected either.
        let rule = Rule::from_copy_rule(&copy_rule(CopyRuleSpec {
            kind: "Secret".into(),
            source_namespace: "shared".into(),
            source_name: Some("cacerts".into()),
            ..spec()
        }))
        .unwrap();
        assert!(!rule.selects_source(&copy));
        let mut original = copy.clone();
        original.labels.remove(marks::MANAGED_BY_LABEL);
        assert!(rule.selects_source(&original));
        let set = RuleSet::build([&copy], [], &TrustPolicy::trust_all());
        assert!(set.rules.is_empty());
        assert!(set.invalid_sources.contains_key(&copy.key));
    }

    #[test]
    fn copy_rule_selects_sources_and_namespaces() {
        let rule = Rule::from_copy_rule(&copy_rule(CopyRuleSpec {
            kind: "Secret".into(),
            source_name: None,
            source_selector: Some(LabelSelector {
                match_labels: Some([("copyrator".to_string(), "true".to_string())].into()),
                match_expressions: None,
            }),
            namespaces: vec!["explicit".into()],
            exclude_namespaces: vec!["sandbox".into()],
            ..spec()
        }))
        .unwrap();
        assert_eq!(rule.id.mark(), "copyrule/r");
        assert!(rule.selects_source(&source("platform", "a", &[("copyrator", "true")], &[])));
        assert!(!rule.selects_source(&source("other", "a", &[("copyrator", "true")], &[])));
        assert!(!rule.selects_source(&source("platform", "a", &[], &[])));
        // A copy never is a source, whatever labels it carried over (SPEC §9.6).
        let copy = source(
            "platform",
            "a",
            &[
                ("copyrator", "true"),
                (marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE),
            ],
            &[],
        );
        assert!(!rule.selects_source(&copy) && !rule.applies_to(&copy));
        assert!(rule.targets_namespace(&ns("explicit", &[])));
        assert!(rule.targets_namespace(&ns("t", &[("team", "a")])));
        assert!(!rule.targets_namespace(&ns("sandbox", &[("team", "a")])));
        assert!(!rule.targets_namespace(&ns("t", &[("team", "b")])));
        assert_eq!(rule.source_description(), "platform/{copyrator=true}");
    }

    #[test]
    fn selection_says_why_a_namespace_is_or_is_not_a_target() {
        let rule = Rule::from_copy_rule(&copy_rule(CopyRuleSpec {
            namespaces: vec!["explicit".into(), "sandbox".into()],
            exclude_namespaces: vec!["sandbox".into()],
            ..spec()
        }))
        .unwrap();
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Selection);
        let cases: &[Case] = &[
            ("explicit", &[], Selection::Listed),
            ("t", &[("team", "a")], Selection::SelectorMatches),
            ("t", &[("team", "b")], Selection::NotSelected),
            ("platform", &[("team", "a")], Selection::SourceNamespace),
            ("sandbox", &[("team", "a")], Selection::Excluded),
        ];
        for (name, labels, want) in cases {
            let n = ns(name, labels);
            assert_eq!(rule.selection(&n), *want, "{name}");
            assert_eq!(rule.targets_namespace(&n), want.selects(), "{name}");
        }
    }

    #[test]
    fn annotations_without_the_opt_in_label_are_reported_as_ignored() {
        let annotated = [(marks::NAMESPACES_ANNOTATION, "a")];
        let unlabelled = source("default", "s", &[], &annotated);
        assert_eq!(
            ignored_annotations(&unlabelled),
            [marks::NAMESPACES_ANNOTATION]
        );
        let labelled = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &annotated);
        assert!(ignored_annotations(&labelled).is_empty());
        let wrong_value = source("default", "s", &[(marks::SOURCE_LABEL, "yes")], &annotated);
        assert_eq!(ignored_annotations(&wrong_value).len(), 1);
        assert!(ignored_annotations(&source("default", "s", &[], &[])).is_empty());
    }

    #[test]
    fn rule_set_orders_older_rules_first_and_collects_invalid_ones() {
        let mut newer = copy_rule(spec());
        newer.metadata.name = Some("newer".into());
        newer.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(200).unwrap(),
            ));
        let mut older = newer.clone();
        older.metadata.name = Some("older".into());
        older.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(100).unwrap(),
            ));
        let mut invalid = newer.clone();
        invalid.metadata.name = Some("invalid".into());
        invalid.spec.source_name = None;
        let bad_source = source(
            "default",
            "bad",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACES_ANNOTATION, "-x")],
        );
        let set = RuleSet::build(
            [&bad_source],
            [&newer, &older, &invalid],
            &TrustPolicy::default(),
        );
        let ids: Vec<_> = set.rules.iter().map(|r| r.id.mark()).collect();
        assert_eq!(ids, ["copyrule/older", "copyrule/newer"]);
        assert!(set.invalid_copy_rules.contains_key("invalid"));
        assert!(set.invalid_sources.contains_key(&bad_source.key));
    }
}
