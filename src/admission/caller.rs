//! Who posted a review: the API server, as `--client-ca` verified, or anyone who reached the
//! webhook port. An answer to the second carries no cluster facts (SPEC §9.8): what each check
//! tells each caller is in `checks`.

/// Who a review came from, as far as copyrator can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Over a connection whose client certificate `--client-ca` verified: the API server.
    Verified,
    /// Anyone who reached the webhook port; without `--client-ca`, every caller. Its answer
    /// depends only on the review and copyrator's flags, never on the trust list, another
    /// namespace, or whether a namespace exists or is being deleted.
    Unverified,
}
