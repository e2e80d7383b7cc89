//! Truststores' passwords read from Secrets (`passwordSecretRef`, SPEC §3.2), for a bundle's
//! stores and a single-source rule's alike: one GET per Secret per job, only in trusted
//! namespaces, nothing kept between jobs. The values are never logged.

use base64::{Engine, engine::general_purpose::STANDARD};
use copyrator_core::transform::{
    PasswordMissing, PasswordRef, ReadPasswords,
    truststores::{Password, is_store_password},
};

use crate::{
    cluster::{ApiResult, Cluster},
    model::{Kind, Object, ObjectKey},
    tenancy::TrustPolicy,
};

/// Reads into `into` the passwords `refs` name that it lacks, each from its Secret if that is
/// in a trusted namespace (a CopyRule is no way to read any Secret's value into a store's
/// integrity key, SPEC §3.2). A Secret or key that is not there is recorded as such; only a
/// failed read fails.
pub async fn read(
    cluster: &Cluster,
    trust: &TrustPolicy,
    refs: &[PasswordRef],
    into: &mut ReadPasswords,
) -> ApiResult<()> {
    for from in refs {
        if into.contains_key(from) {
            continue;
        }
        let read = if trust.is_trusted(&from.namespace) {
            let key = ObjectKey::new(Kind::Secret, &from.namespace, &from.name);
            password_of(cluster.get(&key).await?.as_ref(), &from.key)
        } else {
            Err(PasswordMissing::Untrusted)
        };
        into.insert(from.clone(), read);
    }
    Ok(())
}

/// The password a Secret holds under `key`: its bytes as they are (UTF-8, no trimming).
fn password_of(secret: Option<&Object>, key: &str) -> Result<Password, PasswordMissing> {
    let secret = secret.ok_or(PasswordMissing::SecretNotFound)?;
    let b64 = secret
        .payload
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or(PasswordMissing::NoKey)?;
    let bytes = STANDARD.decode(b64).map_err(|_| PasswordMissing::Invalid)?;
    let text = String::from_utf8(bytes).map_err(|_| PasswordMissing::Invalid)?;
    if !is_store_password(&text) {
        return Err(PasswordMissing::Invalid);
    }
    Ok(Password(text))
}
