//! What the hubs' last reads hold, as namespace syncs share them (SPEC §10.1, §14.2): the
//! leader's hub loop publishes them (`hub/reads.rs`), every sync reads them from its context.

use std::sync::{Arc, RwLock};

use crate::{freshness::ready::ReadyIndex, hub::Hubs, plan::Contents};

/// What this replica knows of its hubs' last reads.
#[derive(Clone, Debug, Default)]
pub enum HubReads {
    /// Hubs are not followed (`--hub-sync-interval` 0): local copies only.
    #[default]
    Off,
    /// Hubs are followed, but not by this replica (it does not lead) or its HubLinks are not
    /// listed yet: a namespace's hub copies are not known here.
    Unknown,
    /// Every link as last read, and the payloads of the placed sources read.
    Known {
        hubs: Arc<Hubs>,
        contents: Arc<Contents>,
    },
}

impl HubReads {
    /// Whether this replica can vouch for a namespace's hub copies: hubs are not followed, or
    /// their last reads are known here.
    pub fn vouches(&self) -> bool {
        !matches!(self, HubReads::Unknown)
    }

    /// The same as far as a plan goes: the same links, placements and sources' versions (a
    /// payload read again at the same version is the same payload).
    fn same(&self, other: &HubReads) -> bool {
        match (self, other) {
            (HubReads::Off, HubReads::Off) | (HubReads::Unknown, HubReads::Unknown) => true,
            (HubReads::Known { hubs: a, .. }, HubReads::Known { hubs: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// The reads shared between the hub loop (the writer) and namespace syncs (readers).
#[derive(Debug, Default)]
pub struct SharedReads {
    current: RwLock<Arc<HubReads>>,
}

impl SharedReads {
    /// The reads as last published.
    pub fn get(&self) -> Arc<HubReads> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Publishes `reads`; when they differ from the last, every namespace known settled is
    /// forgotten (a copy may be due, or no longer be vouched for). Published first, forgotten
    /// after: a sync that read the old reads began before the forgetting, so it records
    /// nothing ([`ReadyIndex::record`]).
    pub fn publish(&self, ready: &ReadyIndex, reads: HubReads) {
        let changed = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            let changed = !current.same(&reads);
            if changed {
                *current = Arc::new(reads);
            }
            changed
        };
        if changed {
            ready.touch_all();
        }
    }
}
