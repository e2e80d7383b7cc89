//! Every admission check whose answer could tell a fact of the cluster (which namespaces are
//! trusted, what other namespaces hold, a Secret's content, a namespace's phase), in one table:
//! its answer to a verified caller (the API server) and to anyone else. This is SPEC §9.8,
//! applied once: the endpoints ask the table, never the caller.

use super::caller::Caller;

/// A check whose answer depends on who asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Sources: the source's namespace's trust decides its inline rule: the kinds it may
    /// copy, its targets' consent looked up (SPEC §9.4's warnings), `sources`.
    SourceTrust,
    /// Sources: a source over `--max-source-metadata-bytes` is held back, unless its
    /// namespace is trusted (SPEC §9.7), `sources`.
    SourceMetadataCap,
    /// Sources: a namespace at its cap of sources, which tells how many it holds (SPEC §9.7),
    /// `sources` and `advice`.
    SourceCountCap,
    /// Rules: a NamespacedCopyRule asks only what its namespace's tier may, `rules`.
    RuleTier,
    /// Rules: a store's password is read only from a trusted namespace (SPEC §3.2), `rules`.
    StorePassword,
    /// Rules: RBAC objects are copied only from a trusted namespace (SPEC §9.10), `rules`.
    GrantSource,
    /// Rules: a Secret's data for ConfigMaps holds only certificates now (SPEC §3.2),
    /// `certificates`.
    Certificates,
    /// Rules: the author may grant what the rule copies (SPEC §9.10), `grants`.
    Grant,
    /// Read-only copies: a DELETE is allowed once the copy's namespace is being deleted
    /// (SPEC §4 item 11), `read_only`.
    ReadOnlyDelete,
    /// Pods: the patch naming the namespace's pull secrets (SPEC §10.3), `pods`.
    PullSecrets,
}

/// What copyrator does about a check for one kind of caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Looks at what decides it (trust, the cluster, a Secret's content) and answers by what
    /// it finds: denies, warns or patches.
    Look,
    /// Does not look: answers as if it passed, and warns of what is checked when copies are
    /// made, whenever the request asks for something it decides.
    Warn,
    /// Does not look: says nothing of it.
    Omit,
    /// Does not look: denies, as it does when what it would look at allows nothing.
    Deny,
}

/// A check's answers to each caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answers {
    /// To the API server, as `--client-ca` or `--api-server-cidrs` verified it.
    pub verified: Answer,
    /// To anyone else who reached the webhook port.
    pub unverified: Answer,
}

impl Check {
    /// Every check, in the table's order.
    pub const ALL: [Check; 10] = [
        Check::SourceTrust,
        Check::SourceMetadataCap,
        Check::SourceCountCap,
        Check::RuleTier,
        Check::StorePassword,
        Check::GrantSource,
        Check::Certificates,
        Check::Grant,
        Check::ReadOnlyDelete,
        Check::PullSecrets,
    ];

    /// The table (SPEC §9.8).
    pub const fn answers(self) -> Answers {
        use Answer::{Deny, Look, Omit, Warn};
        let (verified, unverified) = match self {
            Check::SourceTrust => (Look, Warn),
            Check::SourceMetadataCap => (Look, Warn),
            Check::SourceCountCap => (Look, Omit),
            Check::RuleTier => (Look, Warn),
            Check::StorePassword => (Look, Warn),
            Check::GrantSource => (Look, Warn),
            Check::Certificates => (Look, Warn),
            Check::Grant => (Look, Warn),
            Check::ReadOnlyDelete => (Look, Deny),
            Check::PullSecrets => (Look, Omit),
        };
        Answers {
            verified,
            unverified,
        }
    }

    /// This check's answer to `caller`.
    pub fn answer(self, caller: Caller) -> Answer {
        let answers = self.answers();
        match caller {
            Caller::Verified => answers.verified,
            Caller::Unverified => answers.unverified,
        }
    }

    /// Whether the check looks, for `caller`, at what decides it.
    pub fn looks(self, caller: Caller) -> bool {
        self.answer(caller) == Answer::Look
    }

    /// The warning a caller the check does not look for gets, when the request asks for
    /// something the check decides; `None` when the endpoint words it (it names the kind or the
    /// size) or the answer is not a warning.
    pub fn unchecked_warning(self) -> Option<&'static str> {
        Some(match self {
            Check::RuleTier => {
                "copyrator: a NamespacedCopyRule copies kinds other than Secret and ConfigMap, and reads a store's password from a Secret, only in a trusted namespace (--trusted-namespaces): checked when copies are made (run copyrator with --client-ca to have it denied here)"
            }
            Check::StorePassword => {
                "copyrator: a store's passwordSecretRef is read only from a trusted namespace (--trusted-namespaces): checked when copies are made, and said in this CopyRule's status (run copyrator with --client-ca to have it denied here)"
            }
            Check::GrantSource => {
                "copyrator: RoleBindings and Roles are copied only from a trusted namespace (--trusted-namespaces): checked when copies are made, and said in this CopyRule's status (run copyrator with --client-ca to have it denied here)"
            }
            Check::Certificates => {
                "the sources' content is checked when copies are made: a copy that would put anything but PEM certificates into a ConfigMap or a truststore is refused then, and said in this CopyRule's status (run copyrator with --client-ca to have it denied here)"
            }
            Check::Grant => {
                "copyrator did not check that you may grant what this rule copies (run copyrator with --client-ca to have it checked here); it copies only RoleBindings to the roles its installer listed, and only from trusted namespaces"
            }
            Check::SourceTrust
            | Check::SourceMetadataCap
            | Check::SourceCountCap
            | Check::ReadOnlyDelete
            | Check::PullSecrets => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Answer::{self, Deny, Look, Omit, Warn},
        Check,
    };

    /// Every check with its answer to a verified caller and to anyone else (SPEC §9.8). A
    /// check added to [`Check`] does not compile here until both its answers are listed.
    fn listed(check: Check) -> (Answer, Answer) {
        match check {
            Check::SourceTrust => (Look, Warn),
            Check::SourceMetadataCap => (Look, Warn),
            Check::SourceCountCap => (Look, Omit),
            Check::RuleTier => (Look, Warn),
            Check::StorePassword => (Look, Warn),
            Check::GrantSource => (Look, Warn),
            Check::Certificates => (Look, Warn),
            Check::Grant => (Look, Warn),
            Check::ReadOnlyDelete => (Look, Deny),
            Check::PullSecrets => (Look, Omit),
        }
    }

    #[test]
    fn every_admission_check_has_its_answer_to_each_caller() {
        for check in Check::ALL {
            let answers = check.answers();
            assert_eq!(
                (answers.verified, answers.unverified),
                listed(check),
                "{check:?}"
            );
            // A verified caller hears what the check finds; anyone else, nothing that turns
            // on the cluster.
            assert_eq!(answers.verified, Look, "{check:?}");
            assert_ne!(answers.unverified, Look, "{check:?}");
        }
    }

    /// `Check::ALL` names every check once: the table's test above sees them all.
    #[test]
    fn the_list_of_checks_is_whole() {
        let source = include_str!("checks.rs");
        let declared = source
            .split_once("pub enum Check {")
            .and_then(|(_, rest)| rest.split_once("\n}"))
            .map(|(body, _)| body)
            .expect("the enum Check");
        let variants: Vec<&str> = declared
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("///") && l.ends_with(','))
            .map(|l| l.trim_end_matches(','))
            .collect();
        let all: Vec<String> = Check::ALL.iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(all, variants, "Check::ALL and the enum's variants differ");
    }

    #[test]
    fn a_check_that_warns_instead_has_its_warning_or_words_it_itself() {
        for check in Check::ALL {
            let words_it_itself = matches!(check, Check::SourceTrust | Check::SourceMetadataCap);
            assert_eq!(
                check.unchecked_warning().is_some(),
                check.answers().unverified == Warn && !words_it_itself,
                "{check:?}"
            );
        }
    }
}
