//! How a call to a hub fails (SPEC §14.2): its timeout, and why a round could not read it.

use std::time::Duration;

/// How long a hub has to answer one request before it counts as unreachable.
pub const HUB_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the hub could not be read this round: its copies stay as they are.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("credential Secret {0}: {1}")]
    Credential(String, String),
    #[error("hub refused the credential (401): {0}")]
    Refused(String),
    #[error("hub unreachable: {0}")]
    Unreachable(String),
}

impl HubError {
    /// The `Reachable` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            HubError::Credential(..) => "CredentialUnreadable",
            HubError::Refused(_) => "CredentialRefused",
            HubError::Unreachable(_) => "HubUnreachable",
        }
    }
}

/// Whether a failed request says the credential is refused.
pub(super) fn classify(e: kube::Error) -> HubError {
    match &e {
        kube::Error::Api(s) if s.code == 401 => HubError::Refused(s.message.clone()),
        _ => HubError::Unreachable(e.to_string()),
    }
}
