//! The kinds copyrator copies (SPEC §3.1): Secret and ConfigMap always, and any namespaced kind
//! the operator enables with `--copy-kinds` once API discovery has resolved it. A [`Kind`] is a
//! `Copy` handle to an interned definition (group, version, kind, plural): kinds are compared,
//! hashed and indexed by a small number, and their names are `&'static str`, so a kind costs
//! nothing to pass around and names its resource in URLs and metrics without allocating.
//!
//! The registry only grows, and only with kinds the operator enabled (at most [`MAX_KINDS`]):
//! a name read from a review or a CopyRule is looked up, never interned.

use std::{
    cmp::Ordering,
    fmt,
    hash::{Hash, Hasher},
    sync::{
        Mutex, OnceLock,
        atomic::{self, AtomicBool, AtomicUsize},
    },
};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most kinds one process copies (Secret and ConfigMap included). Per-kind indexes are arrays
/// of this size.
pub const MAX_KINDS: usize = 16;

/// One kind's definition, as discovery resolved it.
#[derive(Debug)]
pub struct KindDef {
    index: usize,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
}

static SECRET: KindDef = KindDef {
    index: 0,
    group: "",
    version: "v1",
    kind: "Secret",
    plural: "secrets",
};
static CONFIG_MAP: KindDef = KindDef {
    index: 1,
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
};

/// Kinds the API server stopped serving (their CRD was deleted), by index.
static UNSERVED: [AtomicBool; MAX_KINDS] = [const { AtomicBool::new(false) }; MAX_KINDS];

/// The kinds registered beyond the two built in, at their index (0 and 1 stay empty). Read
/// without a lock: every admission review looks a kind up, and a slot, once set, never changes.
static SLOTS: [OnceLock<&'static KindDef>; MAX_KINDS] = [const { OnceLock::new() }; MAX_KINDS];
/// How many kinds are registered, the two built in included: slots below it are set.
static COUNT: AtomicUsize = AtomicUsize::new(2);
/// Serializes registrations (rare: at start and when discovery finds a new CRD).
static REGISTERING: Mutex<()> = Mutex::new(());

/// The definition at `index`, if a kind is registered there.
fn def_at(index: usize) -> Option<&'static KindDef> {
    match index {
        0 => Some(&SECRET),
        1 => Some(&CONFIG_MAP),
        i => SLOTS.get(i)?.get().copied(),
    }
}

/// The registered kinds in index order, optionally only the served ones; no lock, no
/// allocation.
#[derive(Clone, Debug)]
pub struct Kinds {
    next: usize,
    end: usize,
    served_only: bool,
}

impl Iterator for Kinds {
    type Item = Kind;

    fn next(&mut self) -> Option<Kind> {
        while self.next < self.end {
            let index = self.next;
            self.next += 1;
            if let Some(def) = def_at(index) {
                let kind = Kind(def);
                if !self.served_only || kind.is_served() {
                    return Some(kind);
                }
            }
        }
        None
    }
}

/// A kind of object copyrator copies.
#[derive(Clone, Copy)]
pub struct Kind(&'static KindDef);

#[allow(non_upper_case_globals)]
impl Kind {
    /// `v1` Secret.
    pub const Secret: Kind = Kind(&SECRET);
    /// `v1` ConfigMap.
    pub const ConfigMap: Kind = Kind(&CONFIG_MAP);
}

/// Why a kind cannot be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("at most {MAX_KINDS} kinds can be copied")]
    TooMany,
    #[error("{0}")]
    NotCopyable(String),
}

impl Kind {
    /// Every kind copied now: registered and served, Secret and ConfigMap first. What jobs
    /// read and watches follow; a kind whose CRD was deleted is left out until it is served
    /// again.
    pub fn all() -> Vec<Kind> {
        Kind::served().collect()
    }

    /// [`Kind::all`] without collecting it.
    pub fn served() -> Kinds {
        Kinds {
            next: 0,
            end: COUNT.load(atomic::Ordering::Acquire),
            served_only: true,
        }
    }

    /// Every kind registered so far, served or not.
    pub fn registered() -> Vec<Kind> {
        Kinds {
            next: 0,
            end: COUNT.load(atomic::Ordering::Acquire),
            served_only: false,
        }
        .collect()
    }

    /// The registered kind `kind` of API group `group` (`""` for the core group), served or
    /// not.
    pub fn lookup(group: &str, kind: &str) -> Option<Kind> {
        Kinds {
            next: 0,
            end: COUNT.load(atomic::Ordering::Acquire),
            served_only: false,
        }
        .find(|k| k.group() == group && k.as_str() == kind)
    }

    /// The registered kind named as `--copy-kinds` names it: `Kind` or `Kind.group`.
    pub fn from_name(name: &str) -> Option<Kind> {
        let (kind, group) = split_name(name);
        Kind::lookup(group, kind)
    }

    /// Registers a kind as discovery resolved it (idempotent: a kind already registered is
    /// returned as it is). Refuses kinds that are never copied ([`not_copyable`]).
    pub fn register(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
    ) -> Result<Kind, RegisterError> {
        if let Some(reason) = not_copyable(group, kind) {
            return Err(RegisterError::NotCopyable(reason));
        }
        let _registering = REGISTERING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = Kind::lookup(group, kind) {
            return Ok(k);
        }
        let index = COUNT.load(atomic::Ordering::Acquire);
        if index >= MAX_KINDS {
            return Err(RegisterError::TooMany);
        }
        let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
        let def: &'static KindDef = Box::leak(Box::new(KindDef {
            index,
            group: leak(group),
            version: leak(version),
            kind: leak(kind),
            plural: leak(plural),
        }));
        // Set the slot before the count says it is there: readers never see an empty slot
        // below the count.
        let _ = SLOTS[index].set(def);
        COUNT.store(index + 1, atomic::Ordering::Release);
        Ok(Kind(def))
    }

    /// Whether the API server serves the kind (as far as copyrator last looked): a kind
    /// whose CRD was deleted is not, and CopyRules naming it say so.
    pub fn is_served(self) -> bool {
        !UNSERVED[self.0.index].load(atomic::Ordering::Relaxed)
    }

    /// Records whether the API server serves the kind.
    pub fn set_served(self, served: bool) {
        UNSERVED[self.0.index].store(!served, atomic::Ordering::Relaxed);
    }

    /// Its number, `0..MAX_KINDS`: where per-kind arrays keep it.
    pub fn index(self) -> usize {
        self.0.index
    }

    /// The kind as objects name it: `Secret`, `NetworkPolicy`.
    pub fn as_str(self) -> &'static str {
        self.0.kind
    }

    /// Its API group, `""` for the core group.
    pub fn group(self) -> &'static str {
        self.0.group
    }

    /// The version copyrator reads and writes it in.
    pub fn version(self) -> &'static str {
        self.0.version
    }

    /// `v1` or `<group>/<version>`, as an object's `apiVersion`.
    pub fn api_version(self) -> String {
        if self.0.group.is_empty() {
            self.0.version.to_string()
        } else {
            format!("{}/{}", self.0.group, self.0.version)
        }
    }

    /// Its resource, as URLs name it: `secrets`, `networkpolicies`.
    pub fn plural(self) -> &'static str {
        self.0.plural
    }

    /// `Kind` for the core group, `Kind.group` otherwise, as `--copy-kinds`, content hashes
    /// and logs name it.
    pub fn name(self) -> String {
        if self.0.group.is_empty() {
            self.0.kind.to_string()
        } else {
            format!("{}.{}", self.0.kind, self.0.group)
        }
    }

    /// Secret or ConfigMap: the kinds whose copies a namespace may accept from an untrusted
    /// namespace (SPEC §9.2). Every other kind is copied only by a CopyRule or the inline
    /// rule of a trusted namespace: a RoleBinding, a NetworkPolicy or a quota changes what
    /// others may do in the namespace, which no consent to receive data stands for.
    pub fn is_consentable(self) -> bool {
        self.facts().consentable
    }

    /// What copyrator knows about the kind beyond its name ([`super::kind_table`]).
    pub fn facts(self) -> &'static super::kind_table::KindFacts {
        super::kind_table::facts(self.0.group, self.0.kind)
    }

    /// The kinds a source of this kind may have copies of, which are also the kinds the
    /// source of a copy of this kind may be: a Secret's copies may be ConfigMaps and a
    /// ConfigMap's Secrets (a rule's `target.kind`, SPEC §3.2); any other kind's copies are
    /// of its own kind.
    pub fn interchangeable(self) -> Vec<Kind> {
        if self.is_consentable() {
            vec![Kind::Secret, Kind::ConfigMap]
        } else {
            vec![self]
        }
    }

    /// Whether a name a copy of this kind may carry is valid: Secret and ConfigMap names
    /// are DNS subdomains; other kinds only need to be a path segment (RBAC names may hold
    /// `:`).
    pub fn is_valid_name(self, name: &str) -> bool {
        if self.is_consentable() {
            crate::selector::is_dns_subdomain(name)
        } else {
            !name.is_empty()
                && name.len() <= 253
                && name != "."
                && name != ".."
                && !name.contains(['/', '%'])
        }
    }
}

/// `Kind.group` → (`Kind`, `group`); a name without a dot is in the core group.
pub fn split_name(name: &str) -> (&str, &str) {
    name.split_once('.').unwrap_or((name, ""))
}

/// Why objects of `kind` in API group `group` are never copied, whatever the flags say;
/// `None` for every other kind ([`super::kind_table`]).
pub fn not_copyable(group: &str, kind: &str) -> Option<String> {
    let why = super::kind_table::facts(group, kind).never_copied?;
    Some(format!(
        "{} is never copied: {why}",
        display_name(group, kind)
    ))
}

fn display_name(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Self) -> bool {
        self.0.index == other.0.index
    }
}

impl Eq for Kind {}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.index.hash(state)
    }
}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.index.cmp(&other.0.index)
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialized as [`Kind::name`]: `Secret` and `ConfigMap` as before kinds were general, so the
/// content hashes of existing copies stay what they were.
impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Kind::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("{name:?} is not a kind copied here")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_keep_their_names_and_hash_form() {
        assert_eq!(Kind::Secret.name(), "Secret");
        assert_eq!(
            serde_json::to_string(&Kind::ConfigMap).unwrap(),
            "\"ConfigMap\""
        );
        assert_eq!(Kind::Secret.api_version(), "v1");
        assert_eq!(Kind::from_name("ConfigMap"), Some(Kind::ConfigMap));
        assert_ne!(Kind::Secret, Kind::ConfigMap);
    }

    #[test]
    fn registering_is_idempotent_and_refuses_what_is_never_copied() {
        let np = Kind::register(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        )
        .unwrap();
        let again = Kind::register(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        )
        .unwrap();
        assert_eq!(np, again);
        assert_eq!(np.name(), "NetworkPolicy.networking.k8s.io");
        assert_eq!(np.api_version(), "networking.k8s.io/v1");
        assert_eq!(Kind::from_name("NetworkPolicy.networking.k8s.io"), Some(np));
        assert_eq!(Kind::lookup("", "NetworkPolicy"), None);
        assert!(np.index() >= 2 && np.index() < MAX_KINDS);
        assert!(!np.is_consentable());
        for (group, kind) in [("", "Pod"), ("coordination.k8s.io", "Lease"), ("", "Event")] {
            assert!(matches!(
                Kind::register(group, "v1", kind, "x"),
                Err(RegisterError::NotCopyable(_))
            ));
        }
        assert!(Kind::lookup("", "Pod").is_none());
    }

    #[test]
    fn names_of_other_kinds_may_hold_colons() {
        let rb = Kind::register(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        )
        .unwrap();
        assert!(rb.is_valid_name("team:view"));
        assert!(!rb.is_valid_name("a/b"));
        assert!(!Kind::Secret.is_valid_name("team:view"));
    }
}
