//! The planner: a pure function from what copyrator knows (rules, sources, namespaces,
//! existing copies) to what it must do (create, update, delete, skip, conflict). All of the
//! product's copy and safety rules (SPEC §2.3, §3, §4, §9) are decided here, without I/O.

mod action;
mod existing;
pub mod explain;
pub mod preview;
mod world;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

pub use action::{Action, Adopt, ConflictReason};
pub use existing::{Contents, CopyMarks, Existing, ManagedCopy, MarksError, SharedMarks};
pub use world::{
    Claim, ClaimParts, ClaimRef, Claims, Policy, Refusal, SourceCaps, Targeting, Unreadable, World,
    merge_into, reach,
};

use crate::{
    content::{CopyTemplate, DesiredCopy, Marks},
    copyrule::{ConflictPolicy, DeletionPolicy},
    model::ObjectKey,
    rules::RuleId,
    tenancy::TrustPolicy,
    transform::Refused,
};

/// A bundle's copy template for the sources one namespace takes, or why none is written.
type BundleTemplate = Result<Arc<CopyTemplate>, ConflictReason>;

/// What the targets of one claim (rule, source) share within one plan: the claim's
/// [`ClaimRef`] and the copy template. Made once per claim, not per target: a full resync plans
/// one action per copy (SPEC §5), keyed by reference so a lookup copies no string.
#[derive(Default)]
struct Shared<'w> {
    refs: HashMap<(&'w RuleId, &'w ObjectKey), ClaimRef>,
    templates: HashMap<(&'w RuleId, &'w ObjectKey), Result<Arc<CopyTemplate>, Refused>>,
    /// What the claims' templates said once each, beside the targets' actions: keys their
    /// sources lack ([`Action::MissingKeys`]), sources a bundle left out ([`Action::LeftOut`]).
    reports: Vec<Action>,
    /// Bundles' copies, by rule and the inputs admitted into the target's namespace: targets
    /// that admit the same sources share one payload, or why none is written.
    bundles: HashMap<(&'w RuleId, Vec<usize>), BundleTemplate>,
    /// Bundles whose left-out sources were reported in this plan.
    bundles_reported: HashSet<&'w RuleId>,
    /// Whether each claim's source may be copied at all (see [`Shared::admissible`]).
    admissible: HashMap<(&'w RuleId, &'w ObjectKey), Result<(), ConflictReason>>,
    /// Template rules' copies, by rule and namespace ("" when the same everywhere).
    from_templates: HashMap<(RuleId, String), Arc<CopyTemplate>>,
}

impl<'w> Shared<'w> {
    /// Whether `claim`'s copies of `payload` may exist at all, judged once per plan: not a
    /// credential's Secret nor an object that runs code (SPEC §3.1), and no RBAC object
    /// granting what copyrator may not hand out (SPEC §9.10).
    fn admissible(
        &mut self,
        world: &World,
        claim: &Claim<'w>,
        payload: &crate::model::Payload,
        shared_by_targets: bool,
    ) -> Result<(), ConflictReason> {
        let key = (&claim.rule.id, &claim.source.key);
        if shared_by_targets && let Some(verdict) = self.admissible.get(&key) {
            return verdict.clone();
        }
        // A bundle's or template's copies come from the CopyRule itself: an administrator's.
        let from = (!claim.source.key.is_bundle()).then_some(claim.source.key.namespace.as_str());
        let policy = world.policy();
        let verdict = match payload.never_copied(claim.source.key.kind) {
            Some(never) => Err(ConflictReason::NeverCopied(never)),
            None => crate::grants::judge(
                claim.rule.target_kind(),
                claim.rule.target_name(&claim.source.key.name),
                from,
                payload,
                &policy.grants,
                &policy.trust,
            )
            .map_err(ConflictReason::Grant),
        };
        if shared_by_targets {
            self.admissible.insert(key, verdict.clone());
        }
        verdict
    }

    /// The copy template of a template rule's claim in `namespace` (SPEC §3.3): one for
    /// every namespace unless the template names the namespace.
    fn template_copy(
        &mut self,
        claim: &Claim<'w>,
        t: &crate::template::Template,
        namespace: &str,
    ) -> Arc<CopyTemplate> {
        let at = if t.per_namespace { namespace } else { "" };
        let key = (claim.rule.id.clone(), at.to_string());
        if let Some(made) = self.from_templates.get(&key) {
            return Arc::clone(made);
        }
        let (owner, payload) = t.for_namespace(claim.rule.kind, namespace);
        let made = Arc::new(
            CopyTemplate::new(claim.rule, &owner, &Arc::new(payload))
                .expect("a template's copies are not transformed"),
        );
        self.from_templates.insert(key, Arc::clone(&made));
        made
    }

    fn by(&mut self, claim: &Claim<'w>) -> ClaimRef {
        self.refs
            .entry((&claim.rule.id, &claim.source.key))
            .or_insert_with(|| claim.to_ref())
            .clone()
    }

    /// The template of `claim`'s copies, made once per plan (the rule's transform applied
    /// once, whatever the number of targets), its truststores' passwords taken from
    /// `contents` (SPEC §3.2).
    fn template(
        &mut self,
        claim: &Claim<'w>,
        payload: &Arc<crate::model::Payload>,
        trust: &TrustPolicy,
        contents: &Contents,
    ) -> Result<Arc<CopyTemplate>, Refused> {
        let key = (&claim.rule.id, &claim.source.key);
        if let Some(made) = self.templates.get(&key) {
            return made.clone();
        }
        let made = match &claim.rule.transform.formats {
            Some(f) if f.password_refs().next().is_some() => f
                .with_passwords(trust, &contents.passwords)
                .and_then(|formats| {
                    let transform = crate::transform::Transform {
                        formats: Some(formats),
                        ..claim.rule.transform.clone()
                    };
                    CopyTemplate::shaped_by(claim.rule, &transform, claim.source, payload)
                }),
            _ => CopyTemplate::new(claim.rule, claim.source, payload),
        }
        .map(Arc::new);
        if let Ok(t) = &made
            && !t.missing_keys.is_empty()
        {
            let by = self.by(claim);
            self.reports.push(Action::MissingKeys {
                by,
                keys: t.missing_keys.clone(),
            });
        }
        self.templates.insert(key, made.clone());
        made
    }

    /// The template of a bundle claim's copy in `target`'s namespace, made once per set of
    /// admitted sources; the bundle's left-out sources reported once per plan. A source's
    /// certificates go where its namespace is trusted, where the target namespace accepts
    /// copies from it, and into its own namespace (SPEC §3.2, §9).
    fn bundle_template(
        &mut self,
        world: &World,
        target: &ObjectKey,
        claim: &Claim<'w>,
        bundle: &crate::bundle::Bundle,
        inputs: &crate::bundle::BundleInputs,
        passwords: &crate::transform::ReadPasswords,
    ) -> BundleTemplate {
        if self.bundles_reported.insert(&claim.rule.id) {
            for (input, why) in inputs.left_out() {
                self.reports.push(Action::LeftOut {
                    by: ClaimRef::new(claim.rule.id.clone(), input.source.clone()),
                    key: input.key.clone(),
                    why,
                });
            }
        }
        let trust = &world.policy().trust;
        let admitted = inputs.admitted(|from| world.bundle_admits(&target.namespace, from));
        self.bundles
            .entry((&claim.rule.id, admitted))
            .or_insert_with_key(|(_, admitted)| {
                // The default CAs are the platform's: every copy takes them (SPEC §3.2).
                let pem = inputs
                    .combine(
                        admitted,
                        world.policy().default_certificates(bundle),
                        bundle.drop_expired,
                    )
                    .ok_or(ConflictReason::EmptyBundle)?;
                let formats = bundle
                    .formats
                    .as_ref()
                    .map(|f| f.with_passwords(trust, passwords))
                    .transpose()
                    .map_err(ConflictReason::Refused)?;
                let payload = crate::bundle::payload(
                    claim.rule.target_kind(),
                    &bundle.key,
                    bundle.type_.as_deref(),
                    pem,
                    formats.as_ref(),
                )
                .map_err(ConflictReason::Refused)?;
                // The identity transform: refused never.
                CopyTemplate::new(claim.rule, claim.source, &Arc::new(payload))
                    .map(Arc::new)
                    .map_err(ConflictReason::Refused)
            })
            .clone()
    }
}

/// Which targets a job is responsible for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Source(ObjectKey),
    Namespace(String),
    Target(ObjectKey),
    /// Several targets (re-planned after a stale write, or once their source's payload is read).
    Targets(BTreeSet<ObjectKey>),
    Rule(RuleId),
    /// Every target in these namespaces: a full resync plans the cluster a chunk of namespaces
    /// at a time, so that what planning holds is one chunk's (SPEC §5).
    Namespaces(BTreeSet<String>),
    /// Every target of one link's hub (SPEC §14): its rules' claims and its copies.
    Link(String),
}

impl Scope {
    fn covers(&self, target: &ObjectKey, claims: &[Claim<'_>], existing: &Existing) -> bool {
        let managed = match existing {
            Existing::Managed(m) => Some(m),
            _ => None,
        };
        match self {
            Scope::All => true,
            Scope::Namespace(ns) => &target.namespace == ns,
            Scope::Namespaces(nss) => nss.contains(&target.namespace),
            Scope::Target(t) => t == target,
            Scope::Targets(ts) => ts.contains(target),
            Scope::Source(src) => {
                claims.iter().any(|c| &c.source.key == src)
                    || managed.is_some_and(|m| &m.source == src)
            }
            Scope::Rule(id) => {
                claims.iter().any(|c| &c.rule.id == id) || managed.is_some_and(|m| &m.rule == id)
            }
            Scope::Link(link) => {
                let of = |id: &RuleId| id.hub_link() == Some(link.as_str());
                claims.iter().any(|c| of(&c.rule.id)) || managed.is_some_and(|m| of(&m.rule))
            }
        }
    }
}

/// Plans every target in `scope`: targets some rule claims and targets where a copy exists.
pub fn plan(
    world: &World,
    scope: &Scope,
    existing: &BTreeMap<ObjectKey, Existing>,
    contents: &Contents,
) -> Vec<Action> {
    // Scopes that name their targets plan only those (a payload batch, a stale write, a
    // copy job): their claims alone are computed.
    let named: Option<BTreeSet<&ObjectKey>> = match scope {
        Scope::Target(t) => Some(BTreeSet::from([t])),
        Scope::Targets(ts) => Some(ts.iter().collect()),
        _ => None,
    };
    let claims = match (&named, scope) {
        (Some(ts), _) => world.claims_on(ts),
        (None, Scope::Namespaces(nss)) => world.claims_in(nss),
        (None, _) => world.claims(),
    };
    let none = Existing::None;
    let mut shared = Shared::default();
    let targets: BTreeSet<&ObjectKey> = match named {
        Some(ts) => ts
            .into_iter()
            .filter(|t| claims.wanted.contains_key(*t) || existing.contains_key(*t))
            .collect(),
        None => {
            let mut all: BTreeSet<&ObjectKey> = claims.wanted.keys().collect();
            match scope {
                Scope::Namespaces(nss) => {
                    all.extend(existing.keys().filter(|k| nss.contains(&k.namespace)));
                }
                _ => all.extend(existing.keys()),
            }
            all
        }
    };
    // At least one action per target; sized once (a full resync has one per copy).
    let mut actions = Vec::with_capacity(targets.len());
    for target in targets {
        let wanted = claims.wanted.get(target).map(Vec::as_slice).unwrap_or(&[]);
        let found = existing.get(target).unwrap_or(&none);
        if scope.covers(target, wanted, found) {
            actions.extend(plan_target(
                world,
                target,
                wanted,
                found,
                contents,
                &mut shared,
            ));
        }
    }
    actions.append(&mut shared.reports);
    actions
}

/// Plans one target given every claim on it and what exists there.
fn plan_target<'w>(
    world: &World,
    target: &ObjectKey,
    claims: &[Claim<'w>],
    existing: &Existing,
    contents: &Contents,
    shared: &mut Shared<'w>,
) -> Vec<Action> {
    if let Some(ns) = world.namespaces().get(&target.namespace)
        && ns.terminating
    {
        return vec![Action::Skip {
            target: target.clone(),
            reason: "namespace is terminating",
        }];
    }
    // An excluded namespace is not this install's (another may serve it, SPEC §13): nothing
    // is written or deleted there, a copy made before included.
    if world.policy().is_excluded(&target.namespace) {
        return vec![Action::Skip {
            target: target.clone(),
            reason: "namespace is excluded (--exclude-namespaces)",
        }];
    }
    if let Existing::Managed(m) = existing
        && m.deleting
    {
        return vec![Action::Skip {
            target: target.clone(),
            reason: "copy is being deleted",
        }];
    }
    let unreadable = world.unreadable();
    if matches!(existing, Existing::Managed(m)
        if unreadable.capped.contains(&m.source) || unreadable.capped_rules.contains(&m.rule))
    {
        return vec![Action::Skip {
            target: target.clone(),
            reason: "its source is held back by a cap (SPEC §9.7)",
        }];
    }
    if unreadable.namespaces.contains(&target.namespace)
        || matches!(existing, Existing::Managed(m) if unreadable.holds(&m.source))
        || claims.iter().any(|c| unreadable.holds(&c.source.key))
    {
        return vec![Action::Skip {
            target: target.clone(),
            reason: "its source or namespace could not be read",
        }];
    }

    let winner = match winner(&world.policy().trust, claims, existing) {
        None => return plan_orphan(world, target, existing),
        Some(Ok(winner)) => winner,
        Some(Err(held)) => {
            return claims
                .iter()
                .map(|c| Action::Conflict {
                    target: target.clone(),
                    by: shared.by(c),
                    reason: held.clone(),
                })
                .collect();
        }
    };
    let mut actions: Vec<Action> = claims
        .iter()
        .filter(|c| c.rule.id != winner.rule.id || c.source.key != winner.source.key)
        .map(|c| Action::Conflict {
            target: target.clone(),
            by: shared.by(c),
            reason: ConflictReason::OwnedBy(shared.by(&winner)),
        })
        .collect();
    // What is never copied, or an RBAC copy that would grant what may not be granted, is
    // refused before anything is planned, and a copy this claim made before is taken away.
    let verdict = if let Some(t) = winner.rule.template() {
        let (_, payload) = t.for_namespace(winner.rule.kind, &target.namespace);
        Some(shared.admissible(world, &winner, &payload, !t.per_namespace))
    } else if winner.rule.bundle().is_none() {
        contents
            .payloads
            .get(&winner.source.key)
            .map(|p| shared.admissible(world, &winner, p, true))
    } else {
        None
    };
    if let Some(Err(reason)) = verdict {
        actions.extend(refuse(
            target,
            shared.by(&winner),
            reason,
            &winner,
            existing,
        ));
        return actions;
    }
    actions.push(plan_winner(
        world, target, winner, existing, contents, shared,
    ));
    actions
}

/// A refused claim (see [`Shared::admissible`]): reported as a conflict, and the copy it made
/// there before, if any, deleted (its own copy: never another's or an unmanaged object).
fn refuse(
    target: &ObjectKey,
    by: ClaimRef,
    reason: ConflictReason,
    claim: &Claim<'_>,
    existing: &Existing,
) -> Vec<Action> {
    let mut out = vec![Action::Conflict {
        target: target.clone(),
        by,
        reason,
    }];
    // Made by this rule of this source (whatever the source's uid since).
    if let Existing::Managed(m) = existing
        && m.rule == claim.rule.id
        && m.source == claim.source.key
    {
        out.push(Action::Delete {
            target: target.clone(),
            resource_version: m.resource_version.clone(),
            rule: Some(m.rule.clone()),
        });
    }
    out
}

/// The claim that gets the target (SPEC §9.3): among the claims of the highest tier, the one
/// whose copy is already there, else the oldest. A copy made by a lower tier is taken over; a
/// copy recorded with a higher tier than any claim (retained, its rule gone) is not: `Err`.
/// `None` when nothing claims the target.
fn winner<'w>(
    trust: &TrustPolicy,
    claims: &[Claim<'w>],
    existing: &Existing,
) -> Option<Result<Claim<'w>, ConflictReason>> {
    let first = claims.first()?;
    let top = first.rule.tier;
    if let Existing::Managed(m) = existing {
        let mut contenders = claims.iter().take_while(|c| c.rule.tier == top);
        if let Some(owner) = contenders.find(|c| c.owns(m)) {
            return Some(Ok(*owner));
        }
        if m.recorded_tier(trust) < top {
            return Some(Err(ConflictReason::HeldByHigherTier(Some(m.rule.clone()))));
        }
    }
    Some(Ok(*first))
}

/// The action for the claim that gets `target`: what its copy should be ([`desired_copy`]),
/// then what to do about what is there ([`create_once`], [`Placing::act`]).
fn plan_winner<'w>(
    world: &World,
    target: &ObjectKey,
    claim: Claim<'w>,
    existing: &Existing,
    contents: &Contents,
    shared: &mut Shared<'w>,
) -> Action {
    let by = shared.by(&claim);
    let template = match desired_copy(world, target, &claim, contents, shared, &by) {
        Ok(template) => template,
        Err(instead) => return *instead,
    };
    let placing = Placing {
        world,
        target,
        claim: &claim,
        contents,
        by,
        template: template.as_ref(),
    };
    if claim.rule.create_once {
        return placing.create_once(existing);
    }
    placing.act(existing)
}

/// What `claim`'s copy in `target`'s namespace should be: its template, `None` when only its
/// source's hash is known; `Err`: the action instead (read the source, or refuse).
fn desired_copy<'w>(
    world: &World,
    target: &ObjectKey,
    claim: &Claim<'w>,
    contents: &Contents,
    shared: &mut Shared<'w>,
    by: &ClaimRef,
) -> Result<Option<Arc<CopyTemplate>>, Box<Action>> {
    let need_source = || {
        Box::new(Action::NeedSource {
            target: target.clone(),
            source: claim.source.key.clone(),
        })
    };
    let conflict = |reason| {
        Box::new(Action::Conflict {
            target: target.clone(),
            by: by.clone(),
            reason,
        })
    };
    if let Some(bundle) = claim.rule.bundle() {
        // A bundle (SPEC §3.2): its sources' certificates admitted here, never an empty copy.
        let Some(inputs) = contents.bundles.get(&claim.source.key) else {
            return Err(need_source());
        };
        return shared
            .bundle_template(world, target, claim, bundle, inputs, &contents.passwords)
            .map(Some)
            .map_err(conflict);
    }
    if let Some(t) = claim.rule.template() {
        // A template (SPEC §3.3): the rule's own content, the namespace's name put in.
        return Ok(Some(shared.template_copy(claim, t, &target.namespace)));
    }
    let payload = contents.payloads.get(&claim.source.key);
    // One template per (rule, source): every target shares its payload and content hash.
    let trust = &world.policy().trust;
    match payload
        .map(|p| shared.template(claim, p, trust, contents))
        .transpose()
    {
        Ok(template) => Ok(template),
        // A store's password this job has not read yet: read with the payload.
        Err(Refused::NoPassword {
            why: crate::transform::PasswordMissing::NotRead,
            ..
        }) => Err(need_source()),
        // Key material for a ConfigMap (SPEC §3.2): nothing written, the copy there as it
        // was.
        Err(refused) => Err(conflict(ConflictReason::Refused(refused))),
    }
}

/// One target's copy, once what it should be is known: decides what to do about what is
/// there.
struct Placing<'a, 'w> {
    world: &'a World,
    target: &'a ObjectKey,
    claim: &'a Claim<'w>,
    contents: &'a Contents,
    by: ClaimRef,
    /// What the copy should be; `None`: not known yet (only its source's hash may be).
    template: Option<&'a Arc<CopyTemplate>>,
}

impl Placing<'_, '_> {
    fn need_source(&self) -> Action {
        Action::NeedSource {
            target: self.target.clone(),
            source: self.claim.source.key.clone(),
        }
    }

    fn in_sync(self) -> Action {
        Action::InSync {
            target: self.target.clone(),
            by: self.by,
        }
    }

    fn conflict(self, reason: ConflictReason) -> Action {
        Action::Conflict {
            target: self.target.clone(),
            by: self.by,
            reason,
        }
    }

    /// Where nothing is: the copy made, unless a Role's creation must wait or is refused.
    fn create(self) -> Action {
        let Some(t) = self.template else {
            return self.need_source();
        };
        role_creation(self.world, self.target, self.contents, &self.by).unwrap_or_else(|| {
            Action::Create {
                copy: Box::new(DesiredCopy::in_namespace(t, &self.target.namespace)),
                by: self.by,
            }
        })
    }

    /// Create-once (SPEC §3.4): made where missing, once; what it made there, changed or
    /// deleted since, is its namespace's. An object it did not make holds the name: reported,
    /// never written.
    fn create_once(self, existing: &Existing) -> Action {
        let made_here = self.claim.rule.created_in.contains(&self.target.namespace);
        match existing {
            Existing::None if made_here => self.in_sync(),
            Existing::None => self.create(),
            Existing::Unmanaged { .. } if !made_here => self.conflict(ConflictReason::Unmanaged),
            _ => self.in_sync(),
        }
    }

    /// What to do about what is at the target: create, leave, update or take over.
    fn act(self, existing: &Existing) -> Action {
        match existing {
            Existing::None => self.create(),
            Existing::Managed(m) => {
                if self.desired_hash().is_some_and(|hash| {
                    let marks = Marks::new(self.claim.rule, self.claim.source, hash.clone());
                    m.held_hash() == Some(&hash) && marks.recorded_in(m)
                }) {
                    return self.in_sync();
                }
                self.write(m.resource_version.clone(), Adopt::No)
            }
            Existing::Unmanaged { resource_version } => {
                // The name of a read-only copy the CopyRule held here (SPEC §4 item 11):
                // someone else's object took it, most likely while copyrator was down; the
                // copy goes back.
                let rule = self.claim.rule;
                let adopt = if rule.conflict_policy == ConflictPolicy::Overwrite {
                    Adopt::Overwrite
                } else if rule.holds_its_names()
                    && rule.read_only_in.contains(&self.target.namespace)
                {
                    Adopt::Reclaim
                } else {
                    return self.conflict(ConflictReason::Unmanaged);
                };
                if self.template.is_none() {
                    return self.need_source();
                }
                if let Some(instead) =
                    role_creation(self.world, self.target, self.contents, &self.by)
                {
                    return instead;
                }
                self.write(resource_version.clone(), adopt)
            }
        }
    }

    /// The content hash the copy should hold, when known. A known hash is of the source's
    /// payload as it is: a transformed copy is judged from the payload itself (its hash
    /// depends on the rule).
    fn desired_hash(&self) -> Option<String> {
        let rule = self.claim.rule;
        match self.template {
            Some(t) => Some(t.marks.content_hash.clone()),
            // Kinds judged on their content (SPEC §3.1, §9.10) are judged on each version of
            // it: their payload is read, not only its hash.
            None if rule.transform.is_identity()
                && rule.bundle().is_none()
                && rule.kind.is_consentable() =>
            {
                self.contents
                    .known_hashes
                    .get(&self.claim.source.key)
                    .cloned()
            }
            None => None,
        }
    }

    /// Overwrites the object at `resource_version` with the copy (recreated when immutable).
    fn write(self, resource_version: String, adopt: Adopt) -> Action {
        let Some(t) = self.template else {
            return self.need_source();
        };
        let copy = Box::new(DesiredCopy::in_namespace(t, &self.target.namespace));
        if t.payload.is_immutable() {
            Action::Recreate {
                copy,
                resource_version,
                adopt,
                by: self.by,
            }
        } else {
            Action::Update {
                copy,
                resource_version,
                adopt,
                by: self.by,
            }
        }
    }
}

/// What stands in the way of a Role copy about to be created, or of an object about to be
/// adopted, at `target` (SPEC §9.10): the action to take instead (read the namespace's
/// RoleBindings first, or refuse), `None` when nothing does. A binding carrying copyrator's
/// marks is its copy only if a rule wants that very copy there now; any other is foreign.
fn role_creation(
    world: &World,
    target: &ObjectKey,
    contents: &Contents,
    by: &ClaimRef,
) -> Option<Action> {
    if target.kind.facts().grants != Some(crate::model::kind_table::Grants::Role) {
        return None;
    }
    let Some(bindings) = contents.role_bindings.get(&target.namespace) else {
        return Some(Action::NeedBindings {
            target: target.clone(),
        });
    };
    let is_copy = |b: &crate::grants::BindingToRole| {
        let Some((rule, source)) = &b.marked else {
            return false;
        };
        let key = ObjectKey::new(source.kind, &target.namespace, &b.name);
        world
            .claims_on(&BTreeSet::from([&key]))
            .wanted
            .get(&key)
            .is_some_and(|claims| {
                claims
                    .iter()
                    .any(|c| &c.rule.id == rule && &c.source.key == source)
            })
    };
    crate::grants::judge_role_creation(&target.name, bindings, is_copy)
        .err()
        .map(|refused| Action::Conflict {
            target: target.clone(),
            by: by.clone(),
            reason: ConflictReason::Grant(refused),
        })
}

/// A target no rule wants: a managed copy there is deleted or retained per its deletion
/// policy (the live rule's when it still exists, else the one recorded on the copy).
fn plan_orphan(world: &World, target: &ObjectKey, existing: &Existing) -> Vec<Action> {
    let Existing::Managed(m) = existing else {
        return Vec::new();
    };
    let live_rule = world.rules().rules.iter().find(|r| r.id == m.rule);
    let policy = live_rule
        .map(|r| r.deletion_policy)
        .unwrap_or_else(|| m.deletion_policy.unwrap_or_default());
    let rule = Some(m.rule.clone());
    match policy {
        DeletionPolicy::Delete => vec![Action::Delete {
            target: target.clone(),
            resource_version: m.resource_version.clone(),
            rule,
        }],
        DeletionPolicy::Retain => vec![Action::Retain {
            target: target.clone(),
            rule,
        }],
    }
}

#[cfg(test)]
mod bundle_tests;
#[cfg(test)]
mod default_cas_tests;
#[cfg(test)]
mod grants_tests;
#[cfg(test)]
mod hub_tests;
#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod promises_tests;
#[cfg(test)]
mod template_tests;
#[cfg(test)]
mod tests;
