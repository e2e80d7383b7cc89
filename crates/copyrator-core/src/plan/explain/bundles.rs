//! A bundle copy's sources as `explain` shows them (SPEC §11, §3.2 Bundles): each entry of the
//! rule's `spec.sources`, the objects it matched, and whether each gives its certificates to
//! the copy in one namespace or is left out there, and why. Trust is the planner's own
//! decision ([`World::bundle_admits`]); the copy's certificates are what the planner's
//! `combine` makes of the sources admitted there.

use std::collections::BTreeMap;

use crate::{
    bundle::{Bundle, BundleInput, BundleInputs, BundleSource, LeftOut},
    model::ObjectKey,
    plan::World,
};

/// A bundle's sources as read, per entry of its `spec.sources` (in their order): each named
/// object, and each object a selector entry matched. Flattened ([`BundleReads::inputs`]), they
/// are the inputs the planner combines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleReads {
    pub entries: Vec<Vec<BundleInput>>,
    /// Seconds since the epoch (what "expired" is judged against).
    pub read_at: i64,
}

impl BundleReads {
    /// Every object read, in the order of the entries: what a job's read of the bundle gives.
    pub fn inputs(&self) -> BundleInputs {
        BundleInputs {
            inputs: self.entries.iter().flatten().cloned().collect(),
            read_at: self.read_at,
        }
    }
}

/// The bundle reads of an explanation, by the bundle's stand-in source ([`ObjectKey::bundle`]).
pub type Bundles = BTreeMap<ObjectKey, BundleReads>;

/// What a bundle copy in one namespace is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleSources {
    /// The copies' key holding the certificates.
    pub key: String,
    /// One per entry of `spec.sources` (for a source explained: the entries that read it).
    pub entries: Vec<EntryFinding>,
    /// Certificates the copy holds here: the admitted sources' certificates, deduplicated and
    /// without expired ones when asked. `None` when the sources could not be read, or the
    /// default CAs the bundle takes are not known here.
    pub certificates: Option<usize>,
    /// The default CAs, when the bundle takes them (`{defaultCAs: true}`): every copy holds
    /// them, whatever the namespace trusts.
    pub default_cas: Option<DefaultCasFinding>,
}

/// The default CAs a bundle takes, as copyrator has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultCasFinding {
    /// Where they come from (`webpki-root-certs 1.0.11`, `file PATH sha256:…`); `None`:
    /// copyrator has none.
    pub origin: Option<String>,
    /// How many certificates they are; `None` when not known here (the running copyrator
    /// reads them from a file `explain` cannot read).
    pub certificates: Option<usize>,
}

impl DefaultCasFinding {
    /// In words: `taken: webpki-root-certs 1.0.11, 146 certificates`.
    pub fn describe(&self) -> String {
        match (&self.origin, self.certificates) {
            (None, _) => "left out: copyrator has no default CAs".to_string(),
            (Some(origin), Some(n)) => format!("taken: {origin}, {n} certificates"),
            (Some(origin), None) => {
                format!("taken: {origin} (copyrator's; not readable here, so not counted)")
            }
        }
    }
}

/// One entry of `spec.sources`, and what it matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryFinding {
    pub entry: BundleSource,
    /// The objects it read; `None` when the sources could not be read.
    pub objects: Option<Vec<ObjectFinding>>,
}

/// One object a bundle read, judged for one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectFinding {
    pub source: ObjectKey,
    /// Whether its namespace gives certificates to this namespace's copy (trusted, accepted
    /// by the namespace, or its own).
    pub trusted: bool,
    /// How many certificates its key holds, or why it gives none.
    pub read: Result<usize, LeftOut>,
}

impl ObjectFinding {
    /// Whether its certificates are in the copy.
    pub fn taken(&self) -> bool {
        self.trusted && self.read.is_ok()
    }

    /// A stable name for scripts: `Taken`, `NotTrusted` (judged first: it is this
    /// namespace's own decision), `SourceNotFound`, `KeyNotFound`, `NotCertificates`.
    pub fn code(&self) -> &'static str {
        match (self.trusted, &self.read) {
            (false, _) => "NotTrusted",
            (true, Ok(_)) => "Taken",
            (true, Err(LeftOut::SourceNotFound)) => "SourceNotFound",
            (true, Err(LeftOut::NoKey)) => "KeyNotFound",
            (true, Err(LeftOut::NotCertificates(_))) => "NotCertificates",
        }
    }

    /// In words, for the copy in `namespace`.
    pub fn describe(&self, namespace: &str) -> String {
        let from = &self.source.namespace;
        match (self.trusted, &self.read) {
            (false, _) => format!(
                "left out: {from} is not a trusted namespace (--trusted-namespaces) and \
                 {namespace} does not accept copies from it (copyrator.io/accept-from)"
            ),
            (true, Ok(1)) => "taken: 1 certificate".to_string(),
            (true, Ok(n)) => format!("taken: {n} certificates"),
            (true, Err(why)) => format!("left out: {why}"),
        }
    }
}

/// What `bundle`'s sources give its copy in `namespace`, from `reads` (`None`: not read).
/// `only`: the source explained; then only the entries that read it and only it are shown.
pub fn sources_in(
    world: &World,
    bundle: &Bundle,
    namespace: &str,
    reads: Option<&BundleReads>,
    only: Option<&ObjectKey>,
) -> BundleSources {
    let entries = bundle
        .sources
        .iter()
        .enumerate()
        .filter(|(_, e)| only.is_none_or(|k| e.may_select(k)))
        .map(|(i, entry)| EntryFinding {
            entry: entry.clone(),
            objects: reads.map(|r| {
                r.entries
                    .get(i)
                    .into_iter()
                    .flatten()
                    .filter(|input| only.is_none_or(|k| &input.source == k))
                    .map(|input| ObjectFinding {
                        source: input.source.clone(),
                        trusted: world.bundle_admits(namespace, &input.source.namespace),
                        read: input.read.as_ref().map(Vec::len).map_err(|why| *why),
                    })
                    .collect()
            }),
        })
        .collect();
    // An empty set of default CAs is one not known here: a set copyrator runs with never is.
    let default_cas = bundle.default_cas.then(|| {
        let cas = world.policy().default_cas.as_deref();
        DefaultCasFinding {
            origin: cas.map(|c| c.origin.to_string()),
            certificates: match cas {
                None => Some(0),
                Some(c) if c.certificates.is_empty() => None,
                Some(c) => Some(c.certificates.len()),
            },
        }
    });
    let defaults_known = default_cas
        .as_ref()
        .is_none_or(|d| d.certificates.is_some());
    let certificates = reads.filter(|_| defaults_known).map(|r| {
        let inputs = r.inputs();
        let admitted = inputs.admitted(|from| world.bundle_admits(namespace, from));
        inputs
            .combine(
                &admitted,
                world.policy().default_certificates(bundle),
                bundle.drop_expired,
            )
            .map_or(0, |pem| pem.matches("-----BEGIN CERTIFICATE-----").count())
    });
    BundleSources {
        key: bundle.key.clone(),
        entries,
        certificates,
        default_cas,
    }
}

impl BundleSources {
    /// In one clause, for a finding's message: `the copy's ca.pem holds 2 certificates, from 1
    /// of 3 sources: Secret platform/root`.
    pub fn summary(&self) -> String {
        let objects: Vec<&ObjectFinding> = self
            .entries
            .iter()
            .filter_map(|e| e.objects.as_ref())
            .flatten()
            .collect();
        let Some(certs) = self.certificates else {
            if self
                .default_cas
                .as_ref()
                .is_some_and(|d| d.certificates.is_none())
            {
                return "its certificates are not counted: copyrator's default CAs are not \
                        readable here"
                    .to_string();
            }
            return format!(
                "its sources ({} entries of spec.sources) could not be read",
                self.entries.len()
            );
        };
        let taken: Vec<String> = objects
            .iter()
            .filter(|o| o.taken())
            .map(|o| format!("{} {}", o.source.kind, o.source.namespaced_name()))
            .collect();
        let defaults = match &self.default_cas {
            Some(DefaultCasFinding {
                origin: Some(origin),
                ..
            }) => format!(" and the default CAs ({origin})"),
            _ => String::new(),
        };
        format!(
            "the copy's {} holds {certs} certificate{}, from {} of {} source{}{}{defaults}",
            self.key,
            if certs == 1 { "" } else { "s" },
            taken.len(),
            objects.len(),
            if objects.len() == 1 { "" } else { "s" },
            if taken.is_empty() {
                String::new()
            } else {
                format!(": {}", taken.join(", "))
            }
        )
    }
}
