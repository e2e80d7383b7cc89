//! The status a CopyRule shows (SPEC §2.2), computed from one sync's outcomes.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use super::Tally;
use crate::{
    copyrule::{CopyRule, CopyRuleStatus, LeftOutSource, MissingKeys},
    plan::World,
    rules::{Rule, RuleError, SourceMatch},
};

/// The status a CopyRule should show after a sync that saw `tally`. `verified`: the leader's
/// full resync that began then checked every copy of the rule; otherwise the last such time
/// the rule shows is kept.
pub fn rule_status(
    rule: &CopyRule,
    parsed: Result<&Rule, &RuleError>,
    world: &World,
    tally: Option<&Tally>,
    now: Timestamp,
    verified: Option<Timestamp>,
) -> CopyRuleStatus {
    let empty = Tally::default();
    let tally = tally.unwrap_or(&empty);
    let (ready, why, message, source) = match parsed {
        Err(e) => (false, "Invalid", e.to_string(), None),
        Ok(r) => {
            let source = Some(r.source_description());
            let wanted = tally.wanted;
            let source_missing = matches!(&r.sources, SourceMatch::Name(_))
                && !world
                    .sources()
                    .values()
                    .any(|s| !s.deleting && r.selects_source(s));
            if source_missing {
                (
                    false,
                    "SourceNotFound",
                    format!("source {} not found", r.source_description()),
                    source,
                )
            } else if !tally.conflicts.is_empty() {
                (
                    false,
                    "Conflicts",
                    format!(
                        "{}/{wanted} copies in sync, {} in conflict",
                        tally.synced,
                        tally.conflicts.len()
                    ),
                    source,
                )
            } else if tally.failed > 0 {
                (
                    false,
                    "SyncFailed",
                    format!(
                        "{}/{wanted} copies in sync, {} failed (retrying)",
                        tally.synced, tally.failed
                    ),
                    source,
                )
            } else if wanted == 0 && matches!(&r.sources, SourceMatch::Selector(_)) {
                (
                    true,
                    "NoSources",
                    "no source matches the selector".to_string(),
                    source,
                )
            } else {
                let mut message = format!("{}/{wanted} copies in sync", tally.synced);
                // Said, but no failure: the copies are made without the keys (SPEC §3.2).
                for (source, keys) in &tally.missing_keys {
                    let keys = keys.iter().cloned().collect::<Vec<_>>().join(", ");
                    message.push_str(&format!("; {source} has no key {keys}"));
                }
                // Nor is a bundle's source that gives no certificate (SPEC §3.2).
                for (source, key, why) in &tally.left_out {
                    message.push_str(&format!("; {source} key {key} left out: {why}"));
                }
                (true, "Synced", message, source)
            }
        }
    };
    let previous = rule.status.as_ref();
    let status_str = if ready { "True" } else { "False" };
    let last_transition = previous
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == status_str)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let mut conflicts = tally.conflicts.clone();
    conflicts.sort();
    conflicts.dedup();
    let conflicting = conflicts.len() as u32;
    // Wanted and neither in sync nor in conflict: a write that failed, or one not attempted.
    let stale = tally
        .failed
        .max(tally.wanted.saturating_sub(tally.synced + conflicting));
    CopyRuleStatus {
        observed_generation: rule.metadata.generation,
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: status_str.into(),
            reason: why.into(),
            message,
            last_transition_time: last_transition,
            observed_generation: rule.metadata.generation,
        }],
        source,
        target_namespaces: tally.namespaces,
        synced_copies: tally.synced,
        stale_copies: stale,
        conflicting_copies: conflicting,
        conflicts,
        missing_keys: tally
            .missing_keys
            .iter()
            .map(|(source, keys)| MissingKeys {
                source: source.clone(),
                keys: keys.iter().cloned().collect(),
            })
            .collect(),
        left_out: tally
            .left_out
            .iter()
            .map(|(source, key, reason)| LeftOutSource {
                source: source.clone(),
                key: key.clone(),
                reason: reason.clone(),
            })
            .collect(),
        // The default CAs a bundle takes: the package and its version, or the file.
        default_cas: match parsed {
            Ok(Rule {
                sources: SourceMatch::Bundle(b),
                ..
            }) if b.default_cas => world.policy().default_cas.as_ref().map(|c| c.status()),
            _ => None,
        },
        created_in: created_in(rule, world, tally, verified.is_some()),
        read_only_in: read_only_in(rule, parsed.ok(), world, tally, verified.is_some()),
        last_sync_time: Some(Time(now)),
        last_verified_time: verified
            .map(Time)
            .or_else(|| previous.and_then(|s| s.last_verified_time.clone())),
        // The members' word, which the hub's leader gathers (SPEC §14.4): kept as it is.
        clusters: previous.map(|s| s.clusters.clone()).unwrap_or_default(),
    }
}

/// A create-once rule's record of the namespaces it created a copy in (SPEC §3.4): what it
/// held, and what this sync created. A namespace being deleted leaves it, and so does one a
/// leader's full resync (whose world holds every namespace) no longer finds: a namespace of
/// that name made again gets a copy again.
fn created_in(rule: &CopyRule, world: &World, tally: &Tally, all_namespaces: bool) -> Vec<String> {
    if !rule.spec.create_once {
        return Vec::new();
    }
    let previous = rule
        .status
        .iter()
        .flat_map(|s| s.created_in.iter().cloned());
    let mut record: std::collections::BTreeSet<String> =
        previous.chain(tally.created_in.iter().cloned()).collect();
    record.retain(|ns| match world.namespaces().get(ns) {
        Some(info) => !info.terminating,
        None => !all_namespaces,
    });
    record.into_iter().collect()
}

/// A read-only rule's record of the namespaces it holds its copy in (SPEC §4 item 11): what
/// it held for its current spec, and what this sync found in sync or wrote, less where its
/// copy was deleted or left; a namespace gone or being deleted leaves it, as in
/// [`created_in`].
fn read_only_in(
    rule: &CopyRule,
    parsed: Option<&Rule>,
    world: &World,
    tally: &Tally,
    all_namespaces: bool,
) -> Vec<String> {
    if !parsed.is_some_and(Rule::holds_its_names) {
        return Vec::new();
    }
    let mut record = crate::rules::recorded_read_only_in(rule);
    record.extend(tally.held_in.iter().cloned());
    for ns in &tally.released_in {
        if !tally.held_in.contains(ns) {
            record.remove(ns);
        }
    }
    record.retain(|ns| match world.namespaces().get(ns) {
        Some(info) => !info.terminating,
        None => !all_namespaces,
    });
    record.into_iter().collect()
}

/// Whether two statuses differ in anything but the sync time.
pub fn status_changed(old: Option<&CopyRuleStatus>, new: &CopyRuleStatus) -> bool {
    let Some(old) = old else {
        return true;
    };
    let strip = |s: &CopyRuleStatus| CopyRuleStatus {
        last_sync_time: None,
        ..s.clone()
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::{super::tally, *};
    use crate::{
        cluster::apply::Applied,
        content::DesiredCopy,
        copyrule::{ConflictPolicy, CopyRuleSpec, DeletionPolicy},
        model::{Kind, ObjectKey, Payload, SourceInfo},
        plan::{Action, ClaimRef, ConflictReason},
    };

    fn rule() -> CopyRule {
        let mut r = CopyRule::new(
            "r",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::ConfigMap.as_str().into(),
                source_namespace: "src".into(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: Some("cm".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec!["a".into(), "b".into(), "c".into()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: ConflictPolicy::Skip,
                image_pull_secret: false,
                read_only: None,
                keys: None,
                target: None,
            },
        );
        r.metadata.generation = Some(3);
        r
    }

    fn world_with_source() -> World {
        let key = ObjectKey::new(Kind::ConfigMap, "src", "cm");
        let mut w = World::default();
        w.set_sources([(
            key.clone(),
            Some(SourceInfo {
                key,
                uid: "u".into(),
                resource_version: "1".into(),
                labels: Default::default(),
                annotations: Default::default(),
                created: 0,
                deleting: false,
                dropped: None,
            }),
        )]);
        w
    }

    fn outcomes(cr: &CopyRule, w: &World) -> Vec<(Action, Applied)> {
        let parsed = Rule::from_copy_rule(cr).unwrap();
        let src = w.sources().values().next().unwrap();
        let by = ClaimRef::new(parsed.id.clone(), src.key.clone());
        let copy = Box::new(DesiredCopy::build(&parsed, src, &Payload::default(), "a").unwrap());
        vec![
            (
                Action::Create {
                    copy,
                    by: by.clone(),
                },
                Applied::Done,
            ),
            (
                Action::InSync {
                    target: ObjectKey::new(Kind::ConfigMap, "b", "cm"),
                    by: by.clone(),
                },
                Applied::NoWrite,
            ),
            (
                Action::Conflict {
                    target: ObjectKey::new(Kind::ConfigMap, "c", "cm"),
                    by,
                    reason: ConflictReason::Unmanaged,
                },
                Applied::NoWrite,
            ),
        ]
    }

    #[test]
    fn a_create_once_rule_records_where_it_created_copies_until_the_namespace_goes() {
        let mut cr = rule();
        cr.spec.create_once = true;
        cr.status = Some(CopyRuleStatus {
            created_in: vec!["gone".into(), "kept".into(), "terminating".into()],
            ..Default::default()
        });
        let mut w = world_with_source();
        let ns = |name: &str, terminating: bool| crate::model::NamespaceInfo {
            name: name.into(),
            resource_version: "1".into(),
            labels: Default::default(),
            accept_from: None,
            terminating,
        };
        w.insert_namespaces([ns("a", false), ns("kept", false), ns("terminating", true)]);
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let t = tally(&outcomes(&cr, &w));
        let tally = t.get(&parsed.id);
        let at = Timestamp::from_second(1000).unwrap();
        // A job's world may not hold every namespace: only one being deleted leaves.
        let s = rule_status(&cr, Ok(&parsed), &w, tally, at, None);
        assert_eq!(s.created_in, ["a", "gone", "kept"]);
        // The leader's full resync holds them all: one it does not find is gone too.
        let s = rule_status(&cr, Ok(&parsed), &w, tally, at, Some(at));
        assert_eq!(s.created_in, ["a", "kept"]);
        // A rule that copies as always keeps no record.
        let s = rule_status(&rule(), Ok(&parsed), &w, tally, at, None);
        assert!(s.created_in.is_empty());
    }

    /// SPEC §4 item 11: a read-only CopyRule records the namespaces it holds its copy in (in
    /// sync or written), keeps them while its spec is the one they were recorded for, and
    /// drops one where its copy was deleted or left, and one whose namespace goes.
    #[test]
    fn a_read_only_rule_records_where_it_holds_its_copy() {
        let mut cr = rule();
        cr.spec.read_only = Some(true);
        cr.status = Some(CopyRuleStatus {
            observed_generation: Some(3),
            read_only_in: vec!["kept".into(), "left".into(), "terminating".into()],
            ..Default::default()
        });
        let mut w = world_with_source();
        let ns = |name: &str, terminating: bool| crate::model::NamespaceInfo {
            name: name.into(),
            resource_version: "1".into(),
            labels: Default::default(),
            accept_from: None,
            terminating,
        };
        w.insert_namespaces([
            ns("a", false),
            ns("b", false),
            ns("kept", false),
            ns("left", false),
            ns("terminating", true),
        ]);
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let mut all = outcomes(&cr, &w);
        all.push((
            Action::Delete {
                target: ObjectKey::new(Kind::ConfigMap, "left", "cm"),
                resource_version: "4".into(),
                rule: Some(parsed.id.clone()),
            },
            Applied::Done,
        ));
        let t = tally(&all);
        let tally = t.get(&parsed.id);
        let at = Timestamp::from_second(1000).unwrap();
        // Written in a, in sync in b; c is someone else's (a conflict): not recorded.
        let s = rule_status(&cr, Ok(&parsed), &w, tally, at, None);
        assert_eq!(s.read_only_in, ["a", "b", "kept"]);
        // Recorded for another spec: only what this sync found.
        cr.metadata.generation = Some(4);
        let s = rule_status(&cr, Ok(&parsed), &w, tally, at, None);
        assert_eq!(s.read_only_in, ["a", "b"]);
        // Copies that are not read-only: no record.
        let plain = rule();
        let parsed = Rule::from_copy_rule(&plain).unwrap();
        let s = rule_status(&plain, Ok(&parsed), &w, tally, at, None);
        assert!(s.read_only_in.is_empty());
    }

    #[test]
    fn status_counts_targets_synced_copies_and_conflicts() {
        let cr = rule();
        let w = world_with_source();
        let t = tally(&outcomes(&cr, &w));
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let tally = t.get(&parsed.id).unwrap();
        assert_eq!(tally.created, 1);
        let s = rule_status(
            &cr,
            Ok(&parsed),
            &w,
            Some(tally),
            Timestamp::from_second(1000).unwrap(),
            None,
        );
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.target_namespaces, 3);
        assert_eq!(s.synced_copies, 2);
        assert_eq!(s.source.as_deref(), Some("src/cm"));
        assert_eq!(s.conflicts.len(), 1);
        assert_eq!(s.conflicts[0].namespace, "c");
        let ready = &s.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Conflicts")
        );
        assert_eq!(ready.message, "2/3 copies in sync, 1 in conflict");
    }

    #[test]
    fn missing_source_and_invalid_rule_are_not_ready() {
        let cr = rule();
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let s = rule_status(
            &cr,
            Ok(&parsed),
            &World::default(),
            None,
            Timestamp::from_second(1).unwrap(),
            None,
        );
        assert_eq!(s.conditions[0].reason, "SourceNotFound");
        let err = RuleError::new("spec.sourceName", "is required");
        let s = rule_status(
            &cr,
            Err(&err),
            &World::default(),
            None,
            Timestamp::from_second(1).unwrap(),
            None,
        );
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "Invalid");
        assert_eq!(s.conditions[0].message, "spec.sourceName: is required");
    }

    #[test]
    fn a_bundle_of_the_default_cas_shows_their_package_and_version() {
        let bundle = |default_cas: bool| {
            let mut r = rule();
            r.spec.source_namespace = String::new();
            r.spec.source_name = None;
            r.spec.target_name = Some("ca-bundle".into());
            r.spec.target = Some(crate::copyrule::TargetSpec {
                key: Some("ca.pem".into()),
                ..Default::default()
            });
            r.spec.sources = Some(vec![crate::copyrule::BundleSourceSpec {
                default_cas,
                kind: if default_cas { "" } else { "Secret" }.into(),
                namespace: if default_cas { "" } else { "platform" }.into(),
                name: (!default_cas).then(|| "root".into()),
                key: if default_cas { "" } else { "ca.crt" }.into(),
                ..Default::default()
            }]);
            r
        };
        let w = World::new(crate::plan::Policy {
            default_cas: Some(crate::default_cas::built_in()),
            ..Default::default()
        });
        let status = |cr: &CopyRule| {
            let parsed = Rule::from_copy_rule(cr).unwrap();
            rule_status(
                cr,
                Ok(&parsed),
                &w,
                None,
                Timestamp::from_second(1000).unwrap(),
                None,
            )
        };
        let shown = status(&bundle(true)).default_cas.unwrap();
        assert_eq!(shown.package.as_deref(), Some("webpki-root-certs"));
        assert_eq!(
            shown.version.as_deref(),
            Some(crate::default_cas::PACKAGE_VERSION)
        );
        assert!(shown.certificates > 100);
        assert_eq!(status(&bundle(false)).default_cas, None);
        let yaml = serde_json::to_value(status(&bundle(true))).unwrap();
        assert_eq!(yaml["defaultCAs"]["package"], "webpki-root-certs");
    }

    #[test]
    fn only_sync_time_changing_is_not_a_change() {
        let cr = rule();
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let w = world_with_source();
        let a = rule_status(
            &cr,
            Ok(&parsed),
            &w,
            None,
            Timestamp::from_second(1).unwrap(),
            None,
        );
        let mut with_status = cr.clone();
        with_status.status = Some(a.clone());
        let b = rule_status(
            &with_status,
            Ok(&parsed),
            &w,
            None,
            Timestamp::from_second(99).unwrap(),
            None,
        );
        assert!(
            !status_changed(Some(&a), &b),
            "transition time kept, sync time ignored"
        );
        assert!(status_changed(None, &b));
        let mut c = b.clone();
        c.synced_copies = 7;
        assert!(status_changed(Some(&a), &c));
    }

    #[test]
    fn only_a_verifying_resync_sets_the_verified_time_and_others_keep_it() {
        let cr = rule();
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let w = world_with_source();
        let t = tally(&outcomes(&cr, &w));
        let tally = t.get(&parsed.id);
        let at = |s| Timestamp::from_second(s).unwrap();
        let verified = rule_status(&cr, Ok(&parsed), &w, tally, at(10), Some(at(9)));
        assert_eq!(verified.last_verified_time, Some(Time(at(9))));
        assert_eq!(
            (verified.stale_copies, verified.conflicting_copies),
            (0, 1),
            "2 synced, 1 in conflict, none stale"
        );
        let mut cr = cr;
        cr.status = Some(verified.clone());
        let later = rule_status(&cr, Ok(&parsed), &w, tally, at(20), None);
        assert_eq!(later.last_verified_time, Some(Time(at(9))), "kept");
        assert!(!status_changed(Some(&verified), &later), "no write");
        let again = rule_status(&cr, Ok(&parsed), &w, tally, at(30), Some(at(29)));
        assert!(
            status_changed(Some(&verified), &again),
            "a new verification is written"
        );
        let failed = Tally {
            wanted: 3,
            namespaces: 3,
            synced: 1,
            failed: 2,
            ..Tally::default()
        };
        let s = rule_status(&cr, Ok(&parsed), &w, Some(&failed), at(40), None);
        assert_eq!((s.stale_copies, s.conflicting_copies), (2, 0));
    }
}
