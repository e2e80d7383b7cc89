//! The watches of one link's hub (SPEC §14.2): its CopyRules, each placed source by name
//! (`fieldSelector=metadata.name=<name>`, which the hub authorizes against the member's Role
//! and its `resourceNames`), and so the member's own ClusterProfile, whose labels place
//! rules. They run the project's one watch loop (`crate::cluster::watch`) against the hub
//! and hand what they see to the member's hub sync as triggers: an event is never a copy's
//! content, only a reason to read one object again.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use kube::Client;
use tokio::sync::{mpsc, watch};

use crate::{
    cluster::{
        ApiLimits, Cluster,
        progress::WatchProgress,
        ratelimit::RateLimiter,
        watch::{Target, WatchSink, spawn_into},
    },
    freshness::{
        dispatch::{Change, Ended},
        feed::Feed,
    },
    hub::{CLUSTER_PROFILE_PLURAL, HubLink, HubLinkSpec, cluster_profiles_path},
    metrics::Metrics,
    model::{Kind, Meta, ObjectKey},
};

use super::{
    error::{HUB_TIMEOUT, HubError},
    remote::hub_client,
};
use crate::cluster::client::Transport;

/// Events queued for the sync at most; past it they are dropped and a full read is due.
pub const EVENTS_QUEUED: usize = 1024;

/// What a hub watch saw, for the sync of link `link`.
#[derive(Debug)]
pub struct HubEvent {
    pub link: String,
    pub what: Seen,
}

/// See [`HubEvent`].
#[derive(Debug)]
pub enum Seen {
    /// A hub CopyRule changed.
    Rule(Change, Meta),
    /// The hub's CopyRules were listed again: what changed meanwhile is not known.
    RulesRelisted,
    /// A placed source (its member key) is as `meta` says; `None`: the hub has it no more.
    Source(ObjectKey, Option<Meta>),
    /// This cluster's ClusterProfile is as `meta` says; `None`: the hub has it no more.
    Profile(Option<Meta>),
    /// The CopyRules watch failed (its connection went silent, the hub froze or refused it):
    /// the hub is unreachable from now until read in full again.
    Down(String),
    /// The CopyRules watch is up (started, renewed, or back after [`Seen::Down`]).
    Up,
}

/// What one hub watch follows.
#[derive(Clone, Debug)]
enum Watching {
    Rules,
    /// A placed source, by its member key.
    Source(ObjectKey),
    /// This cluster's ClusterProfile.
    Profile,
}

/// What the sync's hub watches share.
#[derive(Clone)]
pub struct Deps {
    pub metrics: Arc<Metrics>,
    pub progress: Arc<WatchProgress>,
    pub shutdown: watch::Receiver<bool>,
    pub events: mpsc::Sender<HubEvent>,
    /// How long a hub connection may stay silent (`--api-timeout`, as the member's own).
    pub api_timeout: Duration,
}

/// The hub watches of one link, with the token they use; stopped when dropped.
pub struct Follow {
    pub token: String,
    pub spec: HubLinkSpec,
    /// For the reads an event asks for (short timeouts).
    pub hub: Client,
    /// Set when an event could not be queued: a full read is due.
    pub missed: Arc<AtomicBool>,
    watches: Cluster,
    link: String,
    deps: Deps,
    rules: tokio::task::JoinHandle<()>,
    /// The watch of this cluster's ClusterProfile, when the link names its namespace.
    profile: Option<tokio::task::JoinHandle<()>>,
    sources: BTreeMap<ObjectKey, tokio::task::JoinHandle<()>>,
}

impl Follow {
    /// Starts watching the CopyRules of `link`'s hub with `token`, and this cluster's
    /// ClusterProfile there when the link names its namespace.
    pub fn start(deps: &Deps, link: &HubLink, token: &str) -> Result<Follow, HubError> {
        let name = link.metadata.name.clone().unwrap_or_default();
        let hub = hub_client(link, token, HUB_TIMEOUT, Transport::PerRequest)?;
        // The watches share one HTTP/2 connection, as a namespace-scoped install's watches do
        // (a watch lane): its PINGs, every third of `--api-timeout`, find a black-holed or
        // frozen hub within it however quiet the watches are. A failed PING fails every watch
        // on it: each resumes on a new connection, and the CopyRules watch's failure marks the
        // link unreachable (`Seen::Down`) with no full read due. Chosen over a periodic probe:
        // no request every few seconds for the hub to serve, and nothing that blocks the sync
        // while a frozen hub does not answer.
        let watch_client = hub_client(link, token, deps.api_timeout, Transport::Multiplexed)?;
        // The hub's calls are not this cluster's: counted apart (in the hub's own metrics).
        let limits = ApiLimits {
            writes: RateLimiter::unlimited(),
            reads: RateLimiter::unlimited(),
            read_concurrency: 4,
        };
        let watches = Cluster::new(watch_client.clone(), Arc::new(Metrics::new()), limits, 500)
            .with_api_timeout(deps.api_timeout)
            .with_watch_lanes(vec![watch_client]);
        let missed = Arc::new(AtomicBool::new(false));
        let spawn = |watching: Watching, target: Target| {
            let sink = HubSink {
                link: name.clone(),
                watching,
                events: deps.events.clone(),
                missed: Arc::clone(&missed),
                rules_listed: AtomicBool::new(false),
            };
            let sink = Arc::new(sink);
            spawn_into(
                &watches,
                sink,
                &deps.metrics,
                &deps.progress,
                &deps.shutdown,
                target,
            )
        };
        let target = Target {
            feed: Feed::CopyRules,
            namespace: None,
            selector: None,
            fields: None,
            name: "hub copyrules",
            resource: None,
        };
        let rules = spawn(Watching::Rules, target);
        let profile = link.spec.cluster_profile_namespace.as_ref().map(|ns| {
            // The sink is told it is the CopyRules feed: it tells its events apart itself.
            let target = Target {
                feed: Feed::CopyRules,
                namespace: Some(ns.clone()),
                selector: None,
                fields: Some(format!("metadata.name={}", link.spec.cluster_name)),
                name: "hub clusterprofile",
                resource: Some((CLUSTER_PROFILE_PLURAL, cluster_profiles_path(ns))),
            };
            spawn(Watching::Profile, target)
        });
        Ok(Follow {
            token: token.to_string(),
            spec: link.spec.clone(),
            hub,
            missed,
            watches,
            link: name,
            deps: deps.clone(),
            rules,
            profile,
            sources: BTreeMap::new(),
        })
    }

    /// Watches exactly `sources` (member keys of placed hub sources), each by its name.
    pub fn follow_sources<'a>(&mut self, sources: impl IntoIterator<Item = &'a ObjectKey>) {
        let wanted: BTreeMap<&ObjectKey, ()> = sources.into_iter().map(|k| (k, ())).collect();
        self.sources.retain(|key, task| {
            let kept = wanted.contains_key(key);
            if !kept {
                task.abort();
            }
            kept
        });
        for key in wanted.into_keys() {
            if self.sources.contains_key(key) {
                continue;
            }
            let on_hub = key.on_hub();
            let target = Target {
                feed: Feed::Selected(key.kind),
                namespace: Some(on_hub.namespace.clone()),
                selector: None,
                fields: Some(format!("metadata.name={}", on_hub.name)),
                name: if key.kind == Kind::Secret {
                    "hub secrets"
                } else {
                    "hub configmaps"
                },
                resource: None,
            };
            let sink = HubSink {
                link: self.link.clone(),
                watching: Watching::Source(key.clone()),
                events: self.deps.events.clone(),
                missed: Arc::clone(&self.missed),
                rules_listed: AtomicBool::new(false),
            };
            let task = spawn_into(
                &self.watches,
                Arc::new(sink),
                &self.deps.metrics,
                &self.deps.progress,
                &self.deps.shutdown,
                target,
            );
            self.sources.insert(key.clone(), task);
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.rules.abort();
        if let Some(task) = &self.profile {
            task.abort();
        }
        for task in self.sources.values() {
            task.abort();
        }
    }
}

/// Hands one hub watch's events to its link's sync, as [`HubEvent`]s.
struct HubSink {
    link: String,
    watching: Watching,
    events: mpsc::Sender<HubEvent>,
    missed: Arc<AtomicBool>,
    /// Whether the CopyRules were listed once: the first LIST comes with the full read the
    /// watches start beside, a later one may hide changes.
    rules_listed: AtomicBool,
}

/// A hub watch's seeding LIST: whether it found its object (a source's or the profile's
/// watch).
pub struct HubSeeding {
    found: bool,
}

impl HubSink {
    fn send(&self, what: Seen) {
        let event = HubEvent {
            link: self.link.clone(),
            what,
        };
        if self.events.try_send(event).is_err() {
            self.missed.store(true, Ordering::SeqCst);
        }
    }
}

impl WatchSink for HubSink {
    type Seeding = HubSeeding;

    fn seeding(&self, _feed: Feed, _part: Option<&str>) -> HubSeeding {
        HubSeeding { found: false }
    }

    fn listed(&self, seeding: &mut HubSeeding, meta: Meta) {
        // A rule listed is not read one by one (the full read does); a source, or the
        // profile, is compared with what was read of it.
        match &self.watching {
            Watching::Rules => {}
            Watching::Source(key) => {
                seeding.found = true;
                self.send(Seen::Source(key.clone(), Some(meta)));
            }
            Watching::Profile => {
                seeding.found = true;
                self.send(Seen::Profile(Some(meta)));
            }
        }
    }

    fn seeded(&self, seeding: HubSeeding) {
        // A source's or the profile's watch is of one name: an empty LIST says it is not
        // there now.
        match &self.watching {
            Watching::Source(key) if !seeding.found => self.send(Seen::Source(key.clone(), None)),
            Watching::Profile if !seeding.found => self.send(Seen::Profile(None)),
            Watching::Source(_) | Watching::Profile => {}
            Watching::Rules => {
                if self.rules_listed.swap(true, Ordering::SeqCst) {
                    self.send(Seen::RulesRelisted);
                }
            }
        }
    }

    fn event(&self, _feed: Feed, change: Change, meta: &Meta) {
        let meta_now = || (change != Change::Deleted).then(|| meta.clone());
        match &self.watching {
            Watching::Source(key) => self.send(Seen::Source(key.clone(), meta_now())),
            Watching::Profile => self.send(Seen::Profile(meta_now())),
            Watching::Rules => self.send(Seen::Rule(change, meta.clone())),
        }
    }

    fn up(&self, _feed: Feed, _part: Option<&str>) {
        if matches!(self.watching, Watching::Rules) {
            self.send(Seen::Up);
        }
    }

    fn down(&self, _feed: Feed, _part: Option<&str>, ended: &Ended) {
        // Every watch of the link shares the CopyRules watch's connection: its failure says
        // the hub's (a source's may be its own, as a 403).
        if let (Watching::Rules, Ended::Failed(why)) = (&self.watching, ended) {
            self.send(Seen::Down(why.clone()));
        }
    }

    fn stopped(&self, _feed: Feed, _part: Option<&str>) {}
}
