//! Which connection gives way when a new one finds no room (SPEC §6.1): pure, so that the
//! rules are tested without sockets. A connection verified by `--client-ca` and one whose
//! review is being answered never give way; of the others, one that never answered a request
//! goes first, oldest first, then the one quiet longest.

use std::{collections::HashMap, hash::Hash};

/// What eviction weighs of one open connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// Its client presented a certificate `--client-ca` verified.
    pub verified: bool,
    /// A review of it is being answered (its whole body is in).
    pub reviewing: bool,
    /// It has answered a request.
    pub answered: bool,
    /// It has a request open (headers in, answer not sent): with nothing reviewing, one whose
    /// body has not all come.
    pub waiting: bool,
    /// Since when it made no progress: its last answer, else its opening (ms on one clock).
    pub quiet_since_ms: u64,
    /// Its place in the order connections opened: the older of two goes first.
    pub opened_seq: u64,
}

impl Standing {
    /// `None`: never evicted. Lower goes first.
    fn rank(&self) -> Option<(u8, u64, u64)> {
        if self.verified || self.reviewing {
            return None;
        }
        Some((
            u8::from(self.answered),
            self.quiet_since_ms,
            self.opened_seq,
        ))
    }

    /// The `state` label of `copyrator_webhook_connections_evicted_total`.
    pub fn metric_label(&self) -> &'static str {
        match (self.answered, self.waiting) {
            (false, _) => "stalled",
            (true, true) => "waiting",
            (true, false) => "idle",
        }
    }
}

/// What to do for a new connection that found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Close the open connection at this index to make room.
    Evict(usize),
    /// Close the new connection.
    Refuse,
}

/// Chooses for a new connection from `newcomer`, given the open connections (address and
/// standing each): `at_cap` when its address holds its cap of connections (then only one of
/// its own may give way), else the table is full. The address holding the most connections
/// gives way to one holding at least two fewer (so that two addresses never take turns
/// evicting each other); failing that, the connection that has waited longest without
/// answering anything, whoever holds it; failing that, the newcomer is refused.
pub fn choose<P: Eq + Hash>(open: &[(P, Standing)], newcomer: &P, at_cap: bool) -> Choice {
    let best_of = |pick: &dyn Fn(&P, &Standing) -> bool| {
        open.iter()
            .enumerate()
            .filter(|(_, (p, s))| pick(p, s))
            .filter_map(|(i, (_, s))| Some((s.rank()?, i)))
            .min()
            .map(|(_, i)| i)
    };
    if at_cap {
        return best_of(&|p, _| p == newcomer).map_or(Choice::Refuse, Choice::Evict);
    }
    let mut held: HashMap<&P, usize> = HashMap::new();
    for (p, _) in open {
        *held.entry(p).or_default() += 1;
    }
    let mine = held.get(newcomer).copied().unwrap_or(0);
    let greediest = held
        .iter()
        .filter(|(p, n)| **p != newcomer && **n >= mine + 2)
        .filter(|(p, _)| open.iter().any(|(q, s)| q == **p && s.rank().is_some()))
        .max_by_key(|(_, n)| **n)
        .map(|(p, _)| *p);
    if let Some(victim) = greediest {
        return best_of(&|p, _| p == victim).map_or(Choice::Refuse, Choice::Evict);
    }
    best_of(&|_, s| !s.answered).map_or(Choice::Refuse, Choice::Evict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stalled(since: u64) -> Standing {
        Standing {
            verified: false,
            reviewing: false,
            answered: false,
            waiting: false,
            quiet_since_ms: since,
            opened_seq: 0,
        }
    }

    fn idle(since: u64) -> Standing {
        Standing {
            answered: true,
            ..stalled(since)
        }
    }

    fn reviewing(since: u64) -> Standing {
        Standing {
            reviewing: true,
            ..idle(since)
        }
    }

    fn verified(since: u64) -> Standing {
        Standing {
            verified: true,
            ..stalled(since)
        }
    }

    #[test]
    fn the_address_holding_most_gives_way_its_oldest_stalled_first() {
        let open = [
            ("attacker", idle(1)),
            ("attacker", stalled(5)),
            ("attacker", stalled(3)),
            ("apiserver", idle(0)),
        ];
        assert_eq!(choose(&open, &"apiserver", false), Choice::Evict(2));
    }

    #[test]
    fn a_newcomer_from_the_greediest_address_replaces_the_oldest_stalled_connection() {
        let open = [
            ("attacker", stalled(2)),
            ("attacker", stalled(1)),
            ("apiserver", idle(0)),
        ];
        assert_eq!(choose(&open, &"attacker", false), Choice::Evict(1));
    }

    #[test]
    fn two_addresses_one_apart_do_not_take_turns() {
        // The API server's idle connection stays: the attacker holds only one more.
        let open = [
            ("attacker", idle(2)),
            ("attacker", idle(3)),
            ("apiserver", idle(0)),
        ];
        assert_eq!(choose(&open, &"apiserver", false), Choice::Refuse);
        // ... but a stalled connection anywhere still gives way.
        let open = [
            ("attacker", idle(2)),
            ("attacker", stalled(3)),
            ("apiserver", idle(0)),
        ];
        assert_eq!(choose(&open, &"apiserver", false), Choice::Evict(1));
    }

    #[test]
    fn verified_and_reviewing_connections_never_give_way() {
        let open = [
            ("apiserver", verified(0)),
            ("apiserver", verified(1)),
            ("apiserver", verified(2)),
            ("other", reviewing(0)),
        ];
        assert_eq!(choose(&open, &"new", false), Choice::Refuse);
        assert_eq!(choose(&open, &"apiserver", true), Choice::Refuse);
        // A greedy address whose only evictable connection is its newest: that one goes.
        let open = [
            ("apiserver", verified(0)),
            ("apiserver", verified(1)),
            ("apiserver", stalled(9)),
        ];
        assert_eq!(choose(&open, &"new", false), Choice::Evict(2));
    }

    #[test]
    fn at_its_cap_an_address_evicts_only_its_own() {
        let open = [
            ("other", stalled(0)),
            ("apiserver", idle(4)),
            ("apiserver", stalled(7)),
            ("apiserver", reviewing(1)),
        ];
        assert_eq!(choose(&open, &"apiserver", true), Choice::Evict(2));
        let open = [("other", stalled(0)), ("apiserver", reviewing(1))];
        assert_eq!(choose(&open, &"apiserver", true), Choice::Refuse);
    }

    #[test]
    fn of_answered_connections_the_one_quiet_longest_goes() {
        let open = [
            ("a", idle(9)),
            ("a", idle(4)),
            (
                "a",
                Standing {
                    waiting: true,
                    ..idle(6)
                },
            ),
            ("b", idle(0)),
        ];
        assert_eq!(choose(&open, &"b", false), Choice::Evict(1));
        assert_eq!(open[2].1.metric_label(), "waiting");
        assert_eq!(open[1].1.metric_label(), "idle");
        assert_eq!(stalled(0).metric_label(), "stalled");
    }
}
