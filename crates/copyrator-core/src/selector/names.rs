//! Validation of Kubernetes names, label keys and label values.

use super::{SelectorError, err};

/// A label name segment: at most 63 characters, alphanumerics with `-`, `_`, `.` inside.
fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS-1123 subdomain: at most 253 characters of lowercase alphanumerics, `-` and `.`.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A DNS-1123 label (namespace names): at most 63 lowercase alphanumerics and `-`.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// Validates a label key (`[prefix/]name`).
pub fn validate_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return Err(err(format!(
            "invalid label key {key:?}: the prefix must be a DNS subdomain"
        )));
    }
    if !is_qualified_name_part(name) {
        return Err(err(format!(
            "invalid label key {key:?}: the name must be 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
        )));
    }
    Ok(())
}

/// Validates a label value (may be empty).
pub fn validate_value(value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_qualified_name_part(value) {
        Ok(())
    } else {
        Err(err(format!(
            "invalid label value {value:?}: at most 63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
        )))
    }
}
