//! The member's view of its hubs, as a plan takes it (SPEC §14.2, §14.3): per link, its
//! settings, what the hub places here and what each placed source was when last read. What is
//! not known (the links not listed yet, a link whose hub was never read, a source not read
//! yet or not readable) holds its copies as they are: a hub copy is deleted only on what was
//! read from a reachable hub, or on this cluster's own change.

use std::{collections::BTreeMap, sync::Arc};

use crate::model::{ObjectKey, SourceInfo};

use super::{LinkSettings, Placement};

/// Every link of this member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hubs {
    /// Whether the HubLinks are known: until then, every hub copy stays as it is, since a
    /// link not known may exist.
    pub links_known: bool,
    pub links: Vec<LinkView>,
}

/// One link as the member knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkView {
    /// The HubLink's name.
    pub name: String,
    /// Its settings, or why they are invalid (its copies then stay as they are).
    pub settings: Result<Arc<LinkSettings>, String>,
    /// What the hub places here, as last read from it; `None` until read once.
    pub placement: Option<Arc<Placement>>,
    /// The placed sources as last read.
    pub sources: BTreeMap<ObjectKey, HubSource>,
    /// Since when (seconds since the epoch) the hub has not been reachable, if it is not.
    pub unreachable_since: Option<i64>,
}

/// A placed source as last read from the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HubSource {
    /// Not read yet.
    Pending,
    /// Read: its metadata.
    Present(SourceInfo),
    /// The hub answered that it does not exist: its copies go per their deletion policy.
    Gone,
    /// The hub did not let it be read (a denied or failed read): its copies stay as they are.
    Unreadable(String),
}

impl LinkView {
    /// A link whose hub has not been read yet.
    pub fn new(name: impl Into<String>, settings: Result<Arc<LinkSettings>, String>) -> Self {
        Self {
            name: name.into(),
            settings,
            placement: None,
            sources: BTreeMap::new(),
            unreachable_since: None,
        }
    }

    /// Whether the member knows what the hub places here: the link is valid and its hub was
    /// read. Until then its copies stay as they are.
    pub fn known(&self) -> bool {
        self.settings.is_ok() && self.placement.is_some()
    }
}

impl Hubs {
    /// The link named `name`.
    pub fn link(&self, name: &str) -> Option<&LinkView> {
        self.links.iter().find(|l| l.name == name)
    }
}
