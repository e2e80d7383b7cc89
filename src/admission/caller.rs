//! Who posted a review: the API server, as `--client-ca` or `--api-server-cidrs` verified, or
//! anyone who reached the webhook port. An answer to the second carries no cluster facts (SPEC
//! §9.8): what each check tells each caller is in `checks`. Where the API server can be told
//! apart, the second queues no work.

/// Who a review came from, as far as copyrator can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Over a connection whose client certificate `--client-ca` verified, or from an address
    /// of `--api-server-cidrs`: the API server.
    Verified,
    /// Anyone who reached the webhook port; without `--client-ca`, every caller. Its answer
    /// depends only on the review and copyrator's flags, never on the trust list, another
    /// namespace, or whether a namespace exists or is being deleted.
    Unverified,
}

impl Caller {
    /// Whether a review of this caller's queues the job it asks for. Where the API server can
    /// be told apart (`api_server_known`), a caller that is not verified is not the API
    /// server: what its review names is no change anyone made (a real change also reaches the
    /// watches), so it costs the queue nothing and forged reviews never crowd out real work.
    /// Where nothing can be verified, every review may be the API server's.
    pub fn queues_work(self, api_server_known: bool) -> bool {
        self == Caller::Verified || !api_server_known
    }
}

#[cfg(test)]
mod tests {
    use super::Caller;

    #[test]
    fn only_what_may_be_the_api_servers_review_queues_work() {
        assert!(Caller::Verified.queues_work(true));
        assert!(Caller::Verified.queues_work(false));
        assert!(
            Caller::Unverified.queues_work(false),
            "nothing can be verified"
        );
        assert!(!Caller::Unverified.queues_work(true), "not the API server");
    }
}
