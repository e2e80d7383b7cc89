//! The hubs' last reads, shared with namespace syncs and so with the Pod gate (SPEC §10.1,
//! §14.2): the leader's hub loop publishes, after each full read and each event, what every
//! link's last read places here and the placed sources' payloads as read; a namespace sync
//! converges the hub copies of its namespace from that memory, never calling a hub in the
//! admission path. A replica that does not lead holds no reads: its syncs leave hub copies as
//! they are and never claim a namespace settled.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use super::LinkState;
use crate::{
    cluster::load::Found,
    hub::{Hubs, LinkView},
    plan::{Contents, Existing, World},
    sync::{context::Context, hub_reads::HubReads},
};

/// Shares every link's last read (`states`) with the namespace syncs; `known`: this replica
/// leads and listed the HubLinks.
pub(super) fn publish_reads(ctx: &Context, states: &BTreeMap<String, LinkState>, known: bool) {
    if !known {
        ctx.hub_reads.publish(&ctx.ready, HubReads::Unknown);
        return;
    }
    let mut contents = Contents::default();
    let links = states
        .iter()
        .map(|(name, state)| match &state.read {
            Some((settings, read)) => {
                contents.payloads.extend(
                    read.contents
                        .payloads
                        .iter()
                        .map(|(k, p)| (k.clone(), Arc::clone(p))),
                );
                contents.known_hashes.extend(
                    read.contents
                        .known_hashes
                        .iter()
                        .map(|(k, h)| (k.clone(), h.clone())),
                );
                let mut view = LinkView::new(name.clone(), Ok(Arc::clone(settings)));
                view.placement = Some(Arc::clone(&read.placement));
                view.sources = read.sources.clone();
                view
            }
            None => LinkView::new(name.clone(), Err("its hub was never read".into())),
        })
        .collect();
    let hubs = Arc::new(Hubs {
        links_known: true,
        links,
    });
    let contents = Arc::new(contents);
    ctx.hub_reads
        .publish(&ctx.ready, HubReads::Known { hubs, contents });
}

/// Gives `world` (one namespace's, with the copies `found` there) the hubs as last read, and
/// returns the placed sources' payloads for its plan. A hub copy of a link the reads do not
/// hold (a deleted HubLink) stays as it is (SPEC §14.3). Nothing when the reads are not
/// known: hub copies are then held as they are.
pub fn hubs_for(reads: &HubReads, world: &mut World, found: &Found) -> Contents {
    let HubReads::Known { hubs, contents } = reads else {
        return Contents::default();
    };
    let others: BTreeSet<&str> = found
        .existing
        .values()
        .filter_map(|e| match e {
            Existing::Managed(m) => m.rule.hub_link(),
            _ => None,
        })
        .filter(|link| hubs.link(link).is_none())
        .collect();
    let hubs = match others.is_empty() {
        true => Arc::clone(hubs),
        false => {
            let mut all = Hubs::clone(hubs);
            all.links.extend(
                others
                    .into_iter()
                    .map(|l| LinkView::new(l, Err("not a HubLink of this cluster".into()))),
            );
            Arc::new(all)
        }
    };
    world.set_hubs(hubs);
    Contents::clone(contents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        freshness::{feed::Feed, ready::ReadyIndex},
        sync::hub_reads::SharedReads,
    };

    fn live() -> ReadyIndex {
        let index = ReadyIndex::new(100);
        for feed in Feed::all() {
            index.connected(feed);
        }
        index
    }

    fn known(links: &[&str]) -> HubReads {
        HubReads::Known {
            hubs: Arc::new(Hubs {
                links_known: true,
                links: links
                    .iter()
                    .map(|l| LinkView::new(*l, Err("x".into())))
                    .collect(),
            }),
            contents: Default::default(),
        }
    }

    #[test]
    fn a_new_read_forgets_every_settled_namespace_and_the_same_one_nothing() {
        let ready = live();
        let shared = SharedReads::default();
        assert!(
            shared.get().vouches(),
            "hubs not followed: local copies only"
        );
        let since = ready.begin();
        shared.publish(&ready, known(&["hub-a"]));
        assert!(
            !ready.record("team-a", since, Default::default()),
            "a sync that began before the read records nothing"
        );
        let since = ready.begin();
        assert!(ready.record("team-a", since, Default::default()));
        shared.publish(&ready, known(&["hub-a"]));
        assert!(
            ready.get("team-a").is_some(),
            "the same reads forget nothing"
        );
        shared.publish(&ready, known(&["hub-a", "hub-b"]));
        assert!(ready.get("team-a").is_none(), "a new read forgets");
        let since = ready.begin();
        assert!(ready.record("team-a", since, Default::default()));
        shared.publish(&ready, HubReads::Unknown);
        assert!(ready.get("team-a").is_none(), "no longer leading forgets");
        assert!(!shared.get().vouches());
    }
}
