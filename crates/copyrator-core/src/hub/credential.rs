//! What a member's hub token says of itself (SPEC §14.3, §14.4): when it expires and was
//! issued, and its ServiceAccount's namespace, read from its JWT claims without verifying them
//! (the hub does that). A token that is not a JWT, or lacks a claim, says nothing of it.

use base64::Engine as _;

/// The claims of `token`, if it is a JWT (three dot-separated parts, the second base64url
/// JSON); read, not verified.
fn claims(token: &str) -> Option<serde_json::Value> {
    let mut parts = token.trim().split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The Unix time `token` expires at, if it is a JWT that says.
pub fn token_expiry(token: &str) -> Option<i64> {
    claims(token)?.get("exp")?.as_i64()
}

/// Whether a token expiring at `expiry` is due for replacement at `now`: within the last fifth
/// of a lifetime started at `issued` (a 10-minute token: its last 2 minutes), and always
/// within the last `floor` seconds.
pub fn expires_soon(issued: Option<i64>, expiry: i64, now: i64, floor: i64) -> bool {
    let left = expiry - now;
    let fifth = issued.map_or(0, |iat| (expiry - iat) / 5);
    left <= fifth.max(floor)
}

/// The `iat` (issued at) claim of `token`, if it is a JWT that says.
pub fn token_issued(token: &str) -> Option<i64> {
    claims(token)?.get("iat")?.as_i64()
}

/// The namespace of the ServiceAccount `token` was issued to, if it is a JWT that says (its
/// `kubernetes.io` claim, or a `sub` of `system:serviceaccount:<namespace>:<name>`): on a hub,
/// the members' namespace, where the member's report goes (SPEC §14.4).
pub fn token_namespace(token: &str) -> Option<String> {
    let claims = claims(token)?;
    if let Some(ns) = claims["kubernetes.io"]["namespace"].as_str() {
        return Some(ns.to_string());
    }
    let sub = claims.get("sub")?.as_str()?;
    let mut parts = sub.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("system"), Some("serviceaccount"), Some(ns), Some(_)) if !ns.is_empty() => {
            Some(ns.to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            e.encode(r#"{"alg":"RS256"}"#),
            e.encode(claims)
        )
    }

    #[test]
    fn a_jwts_expiry_and_issue_time_are_read_and_anything_else_has_none() {
        let t = jwt(r#"{"exp":1700000600,"iat":1700000000,"sub":"system:serviceaccount:m:x"}"#);
        assert_eq!(token_expiry(&t), Some(1_700_000_600));
        assert_eq!(token_issued(&t), Some(1_700_000_000));
        assert_eq!(
            token_expiry(&format!("{t}\n")),
            Some(1_700_000_600),
            "a file's newline"
        );
        assert_eq!(token_expiry(&jwt(r#"{"sub":"x"}"#)), None, "no exp");
        for not_jwt in ["", "opaque-token", "a.b", "a.!!.c", "a.b.c.d"] {
            assert_eq!(token_expiry(not_jwt), None, "{not_jwt:?}");
        }
    }

    #[test]
    fn a_service_account_tokens_namespace_is_read_from_its_claims() {
        let bound =
            jwt(r#"{"sub":"system:serviceaccount:x:y","kubernetes.io":{"namespace":"members"}}"#);
        assert_eq!(token_namespace(&bound).as_deref(), Some("members"));
        let legacy = jwt(r#"{"sub":"system:serviceaccount:members:copyrator-member-m1"}"#);
        assert_eq!(token_namespace(&legacy).as_deref(), Some("members"));
        for other in [
            jwt(r#"{"sub":"alice"}"#),
            jwt(r#"{"sub":"system:serviceaccount::x"}"#),
        ] {
            assert_eq!(token_namespace(&other), None, "{other}");
        }
        assert_eq!(token_namespace("opaque"), None);
    }

    #[test]
    fn a_token_is_due_in_the_last_fifth_of_its_life_or_its_last_minutes() {
        // A 10-minute token: due in its last 2 minutes.
        assert!(!expires_soon(Some(0), 600, 479, 60));
        assert!(expires_soon(Some(0), 600, 480, 60));
        // A year-long token: due in its last fifth, long before it bites.
        let year = 365 * 86_400;
        assert!(expires_soon(Some(0), year, year - year / 5, 60));
        // Issue time unknown: the floor only.
        assert!(!expires_soon(None, 600, 539, 60));
        assert!(expires_soon(None, 600, 540, 60));
        assert!(expires_soon(None, 600, 700, 60), "already expired");
    }
}
