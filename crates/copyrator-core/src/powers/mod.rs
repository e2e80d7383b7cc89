//! What each kind of rule author may ask for (SPEC §9.11), in one table, as
//! [`crate::model::kind_table`] is for kinds.
//!
//! Every rule source maps to an [`Author`] in one place ([`Author::of`]); what a rule may ask
//! for is that author's row of [`TABLE`]. The planner holds every rule to its row
//! ([`Rule::hold_to_powers`], for everyone, whoever wrote the rule and however it reached the
//! cluster), admission refuses what a row does not allow (`src/admission/rules.rs`), and
//! `explain` says what a rule asked for and did not get. A new rule source is a new row: the
//! promise matrix (`plan/promises_tests.rs`) builds one rule of every author and fails to
//! compile until the new one is built there too.

pub use crate::rules::Overreach;
use crate::{
    copyrule::ConflictPolicy,
    model::Kind,
    rules::{Rule, RuleId, SourceMatch},
    tenancy::Tier,
};

#[cfg(test)]
mod tests;

/// Who wrote a rule, as far as what it may ask for goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Author {
    /// A CopyRule naming or selecting its sources: a cluster administrator.
    CopyRule,
    /// A CopyRule with a `template`: a cluster administrator; the rule is the source.
    Template,
    /// A CopyRule with a `bundle`: a cluster administrator; the rule is the source.
    Bundle,
    /// The inline rule of a source in a trusted namespace (`--trusted-namespaces`).
    TrustedInline,
    /// A NamespacedCopyRule of a trusted namespace.
    TrustedNamespaced,
    /// The inline rule of a source in any other namespace: a tenant.
    TenantInline,
    /// A NamespacedCopyRule of any other namespace: a tenant.
    TenantNamespaced,
    /// A hub's CopyRule placed on this cluster (SPEC §14): an administrator of another cluster.
    Hub,
}

/// Which kinds a rule may copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kinds {
    /// Any kind not on the never-copied list (SPEC §3.1).
    Any,
    /// Any such kind but RBAC objects.
    NotRbac,
    /// Secrets and ConfigMaps: what a namespace consents to receive (SPEC §9.2).
    Data,
    /// The kinds its link's ceiling lists, RBAC objects never (SPEC §14.2).
    LinkCeiling,
}

/// Which namespaces a rule's copies may go into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Targets {
    /// Any namespace it selects (not excluded).
    Selected,
    /// Only namespaces that accept copies from its namespace (`copyrator.io/accept-from`).
    Consenting,
    /// Those within its link's ceiling; consenting ones only unless the link trusts its
    /// source's namespace (SPEC §14.2).
    WithinCeiling,
}

/// What copyrator's own namespace may receive from a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnNamespace {
    /// Secrets and ConfigMaps only (SPEC §9.10).
    Data,
    /// Nothing.
    Nothing,
}

/// One row of the table: what an author may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Powers {
    /// `conflictPolicy: Overwrite`: take over an object copyrator does not manage.
    pub overwrite: bool,
    pub kinds: Kinds,
    /// RBAC copies, within `--bind-*`/`--escalate-roles` and its author's own rights (§9.10).
    pub rbac: bool,
    /// Read-only copies (SPEC §4 item 11).
    pub read_only: bool,
    /// Create-once copies (SPEC §3.4).
    pub create_once: bool,
    /// Keystore passwords read from a Secret (`passwordSecretRef`, SPEC §3.2).
    pub password_refs: bool,
    pub targets: Targets,
    pub own_namespace: OwnNamespace,
}

const ADMIN: Powers = Powers {
    overwrite: true,
    kinds: Kinds::Any,
    rbac: true,
    read_only: true,
    create_once: true,
    password_refs: true,
    targets: Targets::Selected,
    own_namespace: OwnNamespace::Data,
};

const TENANT: Powers = Powers {
    overwrite: false,
    kinds: Kinds::Data,
    rbac: false,
    read_only: true,
    create_once: false,
    password_refs: false,
    targets: Targets::Consenting,
    own_namespace: OwnNamespace::Nothing,
};

/// The table: every author's powers (SPEC §9.11 shows it, and a test keeps the two equal).
pub const TABLE: [(Author, Powers); 8] = [
    (Author::CopyRule, ADMIN),
    (Author::Template, ADMIN),
    (
        Author::Bundle,
        Powers {
            kinds: Kinds::Data,
            rbac: false,
            ..ADMIN
        },
    ),
    (
        Author::TrustedInline,
        Powers {
            overwrite: false,
            kinds: Kinds::NotRbac,
            rbac: false,
            create_once: false,
            password_refs: false,
            ..ADMIN
        },
    ),
    (
        Author::TrustedNamespaced,
        Powers {
            overwrite: false,
            kinds: Kinds::NotRbac,
            rbac: false,
            create_once: false,
            own_namespace: OwnNamespace::Nothing,
            ..ADMIN
        },
    ),
    (Author::TenantInline, TENANT),
    (Author::TenantNamespaced, TENANT),
    (
        Author::Hub,
        Powers {
            kinds: Kinds::LinkCeiling,
            targets: Targets::WithinCeiling,
            ..TENANT
        },
    ),
];

impl Author {
    /// Every author, in the table's order.
    pub const ALL: [Author; 8] = [
        Author::CopyRule,
        Author::Template,
        Author::Bundle,
        Author::TrustedInline,
        Author::TrustedNamespaced,
        Author::TenantInline,
        Author::TenantNamespaced,
        Author::Hub,
    ];

    /// The author of `rule`: the one place every rule source maps into the table. A
    /// NamespacedCopyRule's and an inline rule's trust is their tier, decided by
    /// `--trusted-namespaces` when the rule is built.
    pub fn of(rule: &Rule) -> Author {
        match (&rule.id, &rule.sources) {
            (RuleId::Hub { .. }, _) => Author::Hub,
            (RuleId::CopyRule(_), SourceMatch::Template(_)) => Author::Template,
            (RuleId::CopyRule(_), SourceMatch::Bundle(_)) => Author::Bundle,
            (RuleId::CopyRule(_), _) => Author::CopyRule,
            (RuleId::Namespaced(_), _) if rule.tier == Tier::ConsentedInline => {
                Author::TenantNamespaced
            }
            (RuleId::Namespaced(_), _) => Author::TrustedNamespaced,
            (RuleId::Inline(_), _) if rule.tier == Tier::ConsentedInline => Author::TenantInline,
            (RuleId::Inline(_), _) => Author::TrustedInline,
        }
    }

    /// This author's row of [`TABLE`].
    pub fn powers(self) -> Powers {
        TABLE
            .iter()
            .find(|(a, _)| *a == self)
            .map(|(_, p)| *p)
            .expect("every author has a row")
    }

    /// How SPEC §9.11 names the author.
    pub fn as_str(self) -> &'static str {
        match self {
            Author::CopyRule => "CopyRule",
            Author::Template => "CopyRule with a template",
            Author::Bundle => "CopyRule with a bundle",
            Author::TrustedInline => "inline rule, trusted namespace",
            Author::TrustedNamespaced => "NamespacedCopyRule, trusted namespace",
            Author::TenantInline => "inline rule, other namespace",
            Author::TenantNamespaced => "NamespacedCopyRule, other namespace",
            Author::Hub => "hub rule",
        }
    }
}

/// What is said of an overreach depends on who asked: the author's row of the table.
impl Overreach {
    /// What the author of a rule of `author`'s row is told, naming nothing but the rule's
    /// own fields.
    pub fn message(&self, author: Author) -> String {
        self.message_to(author.as_str(), author.powers().kinds)
    }

    /// As [`Overreach::message`], for a rule `who`, allowed `kinds`.
    pub fn message_to(&self, who: &str, kinds: Kinds) -> String {
        match self {
            Overreach::Overwrite => format!(
                "conflictPolicy Overwrite is for CopyRules only: a {who} never takes over an object copyrator does not manage, and is held to Skip (SPEC §9.11)"
            ),
            Overreach::CreateOnce => {
                format!("create-once copies are for CopyRules only, not a {who} (SPEC §9.11)")
            }
            Overreach::Kind(kind) => format!(
                "a {who} may not copy a {kind}: {} (SPEC §9.11)",
                match kinds {
                    Kinds::Data => "it copies Secrets and ConfigMaps only",
                    Kinds::NotRbac | Kinds::LinkCeiling =>
                        "RBAC objects are copied only by a CopyRule naming its source",
                    Kinds::Any => "not one its author may grant",
                }
            ),
            Overreach::PasswordRef => format!(
                "a {who} may not read a keystore password from a Secret (passwordSecretRef): only CopyRules and rules of trusted namespaces may (SPEC §9.11)"
            ),
        }
    }
}

impl Powers {
    /// Whether these powers allow copying `kind` (to `target`, its copies' kind).
    pub fn allows_kind(&self, kind: Kind, target: Kind) -> bool {
        [kind, target].into_iter().all(|k| {
            let rbac = k.facts().grants.is_some();
            match self.kinds {
                Kinds::Any => !rbac || self.rbac,
                Kinds::NotRbac | Kinds::LinkCeiling => !rbac,
                Kinds::Data => k.is_consentable(),
            }
        })
    }

    /// What `rule` asks for beyond these powers.
    pub fn overreach(&self, rule: &Rule) -> Vec<Overreach> {
        let mut out = Vec::new();
        if rule.conflict_policy == ConflictPolicy::Overwrite && !self.overwrite {
            out.push(Overreach::Overwrite);
        }
        if rule.create_once && !self.create_once {
            out.push(Overreach::CreateOnce);
        }
        if !self.allows_kind(rule.kind, rule.target_kind()) {
            let kind = if self.allows_kind(rule.kind, rule.kind) {
                rule.target_kind()
            } else {
                rule.kind
            };
            out.push(Overreach::Kind(kind));
        }
        if rule.password_refs().next().is_some() && !self.password_refs {
            out.push(Overreach::PasswordRef);
        }
        out
    }
}

impl Rule {
    /// Who wrote this rule ([`Author::of`]).
    pub fn author(&self) -> Author {
        Author::of(self)
    }

    /// What this rule may ask for: its author's row. (A namespace-scoped install acts on
    /// inline rules and NamespacedCopyRules only, SPEC §13: their rows bound it.)
    pub fn powers(&self) -> Powers {
        self.author().powers()
    }

    /// The rule held to its powers: what it asked beyond them is returned. `Ok` with the
    /// overreaches it is held back from (`Overwrite` held to `Skip`); `Err` with those that
    /// leave it nothing to copy (a kind, create-once, a password reference).
    pub fn hold_to_powers(mut self) -> Result<(Rule, Vec<Overreach>), Vec<Overreach>> {
        let asked = self.powers().overreach(&self);
        if asked.iter().any(|o| !o.is_held()) {
            return Err(asked);
        }
        if asked.contains(&Overreach::Overwrite) {
            self.conflict_policy = ConflictPolicy::Skip;
        }
        self.held = asked.clone();
        Ok((self, asked))
    }
}

/// What `rule` asks for that no row it may stand for allows: a NamespacedCopyRule may be of a
/// trusted namespace or not (which, is said only to a verified caller, SPEC §9.8), any other
/// rule's row is its own. Admission denies these to every caller (SPEC §9.11).
pub fn beyond_every_row(rule: &Rule) -> Vec<Overreach> {
    let rows: &[Author] = match rule.id {
        RuleId::Namespaced(_) => &[Author::TrustedNamespaced, Author::TenantNamespaced],
        _ => &[Author::of(rule)],
    };
    let mut out = rows[0].powers().overreach(rule);
    for author in &rows[1..] {
        let more = author.powers().overreach(rule);
        out.retain(|o| more.contains(o));
    }
    out
}

/// SPEC §9.11's table, as Markdown (a test keeps the SPEC's equal to it).
pub fn markdown_table() -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut out = String::from(
        "| Author | Overwrite | Kinds | RBAC | Read-only | Create-once | Password refs | Targets | copyrator's namespace |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (author, p) in TABLE {
        let kinds = match p.kinds {
            Kinds::Any => "any",
            Kinds::NotRbac => "any but RBAC",
            Kinds::Data => "Secret, ConfigMap",
            Kinds::LinkCeiling => "the link's, not RBAC",
        };
        let targets = match p.targets {
            Targets::Selected => "selected",
            Targets::Consenting => "consenting",
            Targets::WithinCeiling => "within the link's ceiling",
        };
        let own = match p.own_namespace {
            OwnNamespace::Data => "Secret, ConfigMap",
            OwnNamespace::Nothing => "nothing",
        };
        out.push_str(&format!(
            "| {} | {} | {kinds} | {} | {} | {} | {} | {targets} | {own} |\n",
            author.as_str(),
            yes(p.overwrite),
            yes(p.rbac),
            yes(p.read_only),
            yes(p.create_once),
            yes(p.password_refs),
        ));
    }
    out
}
