//! The share of the queue held by jobs waiting for an admitted change that no watch event has
//! shown yet (SPEC §4 item 6): bounded, and fair between classes of reviews, so that a flood of
//! reviews of changes that never happen gives way within its own class.
//!
//! A real change is persisted within milliseconds of its review, and its watch event ends its
//! job's wait; a review nobody persists (posted by whoever reaches the webhook port, or denied
//! by a later webhook) waits until its deadline. Under a flood, what fills this share is the
//! flood. When more jobs wait than it holds, the class holding the most gives up its oldest
//! (longest-queue drop, as fair queueing does): a class holding no more than the capacity over
//! the number of classes waiting never gives way while another holds more, and within a
//! flooded class the oldest wait, the least likely to be real, goes first. See
//! docs/design/admission-floods.md.

use std::collections::{HashMap, VecDeque};

use super::job::JobKey;

/// Reviews that share one slice of the share: one endpoint's, and for sources and copies one
/// namespace's (a flood naming one namespace does not crowd out the others).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    Sources(String),
    Copies(String),
    Namespaces,
    Rules,
}

impl Class {
    /// The class of a job of `key`; `None` for a resync, which waits for no change.
    pub fn of(key: &JobKey) -> Option<Class> {
        match key {
            JobKey::Source(k) => Some(Class::Sources(k.namespace.clone())),
            JobKey::Copy(k) => Some(Class::Copies(k.namespace.clone())),
            JobKey::Namespace(_) => Some(Class::Namespaces),
            JobKey::Rule(_) => Some(Class::Rules),
            JobKey::Resync => None,
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Class::Sources(ns) => write!(f, "sources in namespace {ns}"),
            Class::Copies(ns) => write!(f, "copies in namespace {ns}"),
            Class::Namespaces => f.write_str("namespaces"),
            Class::Rules => f.write_str("CopyRules"),
        }
    }
}

/// See the module documentation.
pub struct Unseen {
    capacity: usize,
    /// Each job in the share, with the sequence number of its entry in its class's queue.
    jobs: HashMap<JobKey, u64>,
    classes: HashMap<Class, ClassQueue>,
    seq: u64,
}

#[derive(Default)]
struct ClassQueue {
    /// Jobs in the order they joined (entries of jobs no longer here are stale: their sequence
    /// number no longer matches).
    order: VecDeque<(u64, JobKey)>,
    live: usize,
}

impl Unseen {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            jobs: HashMap::new(),
            classes: HashMap::new(),
            seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// `job` waits for a change no event has shown; returns the jobs that give way for it
    /// (possibly itself), each with its class. A job already here keeps its place.
    pub fn insert(&mut self, job: &JobKey) -> Vec<(JobKey, Class)> {
        let Some(class) = Class::of(job) else {
            return Vec::new();
        };
        if self.jobs.contains_key(job) {
            return Vec::new();
        }
        self.seq += 1;
        self.jobs.insert(job.clone(), self.seq);
        let queue = self.classes.entry(class).or_default();
        queue.order.push_back((self.seq, job.clone()));
        queue.live += 1;
        let mut gone = Vec::new();
        while self.jobs.len() > self.capacity {
            match self.victim() {
                Some(victim) => gone.push(victim),
                None => break,
            }
        }
        gone
    }

    /// `job` no longer waits for an unseen change (its event came, it saw its change, or it
    /// left the queue); whether it was here.
    pub fn remove(&mut self, job: &JobKey) -> bool {
        if self.jobs.remove(job).is_none() {
            return false;
        }
        let Some(class) = Class::of(job) else {
            return true;
        };
        if let Some(queue) = self.classes.get_mut(&class) {
            queue.live -= 1;
            if queue.live == 0 {
                self.classes.remove(&class);
            } else if queue.order.len() > 2 * queue.live + 16 {
                let jobs = &self.jobs;
                queue.order.retain(|(seq, key)| jobs.get(key) == Some(seq));
            }
        }
        true
    }

    /// Takes the oldest job of the class holding the most (of two such classes, the one whose
    /// oldest job is older).
    fn victim(&mut self) -> Option<(JobKey, Class)> {
        let jobs = &self.jobs;
        let mut pick: Option<(usize, u64, &Class)> = None;
        for (class, queue) in self.classes.iter_mut() {
            while let Some((seq, key)) = queue.order.front() {
                if jobs.get(key) == Some(seq) {
                    break;
                }
                queue.order.pop_front();
            }
            let Some((oldest, _)) = queue.order.front() else {
                continue;
            };
            let better = pick.is_none_or(|(live, seq, _)| {
                queue.live > live || (queue.live == live && *oldest < seq)
            });
            if better {
                pick = Some((queue.live, *oldest, class));
            }
        }
        let class = pick?.2.clone();
        let (_, key) = self.classes.get_mut(&class)?.order.pop_front()?;
        self.remove(&key);
        Some((key, class))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, ObjectKey};

    fn source(ns: &str, name: &str) -> JobKey {
        JobKey::Source(ObjectKey::new(Kind::Secret, ns, name))
    }

    fn namespace(name: &str) -> JobKey {
        JobKey::Namespace(name.into())
    }

    #[test]
    fn a_flood_of_one_class_gives_way_within_it() {
        let mut share = Unseen::new(4);
        assert!(share.insert(&source("team-a", "real")).is_empty());
        assert!(share.insert(&namespace("real")).is_empty());
        let mut gone = Vec::new();
        for i in 0..100 {
            gone.extend(share.insert(&source("ghost", &format!("s-{i}"))));
        }
        assert_eq!(share.len(), 4);
        assert_eq!(gone.len(), 98);
        assert!(
            gone.iter()
                .all(|(_, class)| *class == Class::Sources("ghost".into())),
            "only the flooding class gave way: {gone:?}"
        );
        // The oldest of the flood went first; the newest two wait.
        assert_eq!(gone[0].0, source("ghost", "s-0"));
        assert!(share.remove(&source("ghost", "s-99")));
        assert!(share.remove(&source("ghost", "s-98")));
        assert!(share.remove(&source("team-a", "real")));
        assert!(share.remove(&namespace("real")));
        assert!(share.is_empty());
    }

    #[test]
    fn classes_of_equal_size_give_way_oldest_first() {
        let mut share = Unseen::new(4);
        for key in [
            namespace("a"),
            source("x", "1"),
            namespace("b"),
            source("x", "2"),
        ] {
            assert!(share.insert(&key).is_empty());
        }
        // Two classes of two: the one whose oldest is older (the namespaces) gives way.
        let gone = share.insert(&JobKey::Rule("r".into()));
        assert_eq!(gone, vec![(namespace("a"), Class::Namespaces)]);
    }

    #[test]
    fn a_job_that_left_is_never_given_up() {
        let mut share = Unseen::new(2);
        share.insert(&namespace("a"));
        share.insert(&namespace("b"));
        assert!(share.remove(&namespace("a")), "its event came");
        assert!(!share.remove(&namespace("a")));
        assert!(share.insert(&namespace("a")).is_empty(), "back, at the end");
        let gone = share.insert(&namespace("c"));
        assert_eq!(gone, vec![(namespace("b"), Class::Namespaces)]);
        // Inserting a job already here changes nothing.
        assert!(share.insert(&namespace("a")).is_empty());
        assert_eq!(share.len(), 2);
    }

    #[test]
    fn stale_entries_do_not_pile_up() {
        let mut share = Unseen::new(1000);
        share.insert(&namespace("keep"));
        for i in 0..10_000 {
            let key = namespace(&format!("n-{i}"));
            share.insert(&key);
            share.remove(&key);
        }
        let queue = &share.classes[&Class::Namespaces];
        assert_eq!(queue.live, 1);
        assert!(queue.order.len() <= 2 + 16, "{} entries", queue.order.len());
    }
}
