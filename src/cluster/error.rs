//! API errors classified by what the API server says (HTTP code, `reason`, `details.causes`),
//! never by the wording of its message.

/// An API call that failed, classified for the callers that care.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {resource}: {source}")]
pub struct ApiError {
    pub verb: &'static str,
    pub resource: &'static str,
    #[source]
    pub source: kube::Error,
}

/// The machine-readable `reason`s (metav1.StatusReason) and cause types (metav1.CauseType)
/// copyrator acts on.
mod reason {
    pub const ALREADY_EXISTS: &str = "AlreadyExists";
    pub const CONFLICT: &str = "Conflict";
    pub const FORBIDDEN: &str = "Forbidden";
    pub const INVALID: &str = "Invalid";
    pub const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
    pub const FIELD_VALUE_FORBIDDEN: &str = "FieldValueForbidden";
    pub const FIELD_VALUE_INVALID: &str = "FieldValueInvalid";
}

/// Fields that cannot change in place once a Secret or ConfigMap is `immutable`: its payload
/// and `immutable` itself. Per kind, the fields its row in the kind table says force a
/// replace (a Secret's `type`, a RoleBinding's `roleRef`) count too, and so does any field the
/// API server calls immutable in its answer (SPEC §3.1).
const IMMUTABLE_PAYLOAD: [&str; 4] = ["data", "binaryData", "stringData", "immutable"];

/// Whether a change of `field` is answered as one that cannot be made in place.
fn replaced_when_changed(field: &str) -> bool {
    IMMUTABLE_PAYLOAD.contains(&field)
        || copyrator_core::model::kind_table::replaced_fields().any(|f| f == field)
}

impl ApiError {
    /// An error of copyrator's own about a `verb` on `resource` (no API server answer).
    pub fn other(verb: &'static str, resource: &'static str, why: String) -> Self {
        Self {
            verb,
            resource,
            source: kube::Error::Service(why.into()),
        }
    }

    fn status(&self) -> Option<&kube::core::Status> {
        match &self.source {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }

    /// HTTP status of the API server's answer (0 when there was none).
    pub fn code(&self) -> u16 {
        self.status().map_or(0, |s| s.code)
    }

    fn reason(&self) -> &str {
        self.status().map_or("", |s| s.reason.as_str())
    }

    fn causes(&self) -> impl Iterator<Item = &kube::core::response::StatusCause> {
        self.status()
            .and_then(|s| s.details.as_ref())
            .into_iter()
            .flat_map(|d| d.causes.iter())
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == 404
    }

    /// 409 AlreadyExists from a create: the name is taken.
    pub fn is_already_exists(&self) -> bool {
        self.code() == 409 && self.reason() == reason::ALREADY_EXISTS
    }

    /// 409 Conflict from a preconditioned write: the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        self.code() == 409 && self.reason() == reason::CONFLICT
    }

    /// 403 Forbidden with the cause NamespaceTerminating: the namespace is being deleted and
    /// takes no new content.
    pub fn is_namespace_terminating(&self) -> bool {
        self.code() == 403
            && self.reason() == reason::FORBIDDEN
            && self
                .causes()
                .any(|c| c.reason == reason::NAMESPACE_TERMINATING)
    }

    /// 403 Forbidden by the API server's authorizer (RBAC): copyrator holds no right to it. In
    /// a namespace-scoped install, a namespace that answers so has not bound copyrator
    /// (SPEC §13).
    pub fn is_forbidden(&self) -> bool {
        self.code() == 403 && !self.is_namespace_terminating()
    }

    /// 422 Invalid because an update tried to change a field that cannot change in place
    /// (the existing copy is immutable, or a Secret's type changed): the copy is recreated.
    pub fn is_immutable_rejection(&self) -> bool {
        self.code() == 422
            && self.reason() == reason::INVALID
            && self.causes().any(|c| {
                matches!(
                    c.reason.as_str(),
                    reason::FIELD_VALUE_FORBIDDEN | reason::FIELD_VALUE_INVALID
                ) && (replaced_when_changed(&c.field) || c.message.contains("field is immutable"))
            })
    }

    /// Why the call failed, as a metric label: a fixed set, so a label never carries a
    /// message or a name.
    pub fn metric_label(&self) -> &'static str {
        match self.code() {
            _ if self.is_namespace_terminating() => "namespace_terminating",
            _ if self.is_immutable_rejection() => "immutable",
            _ if self.is_already_exists() => "already_exists",
            _ if self.is_conflict() => "conflict",
            0 => "unreachable",
            401 => "unauthorized",
            403 => "forbidden",
            404 => "not_found",
            409 => "conflict",
            413 => "too_large",
            422 => "invalid",
            429 => "throttled",
            504 => "timeout",
            500..=599 => "server_error",
            _ => "other",
        }
    }

    /// Worth retrying the whole job (server busy, network, timeouts).
    pub fn is_transient(&self) -> bool {
        matches!(self.code(), 0 | 429 | 500 | 502 | 503 | 504)
    }
}

/// Result of an API call.
pub type ApiResult<T> = Result<T, ApiError>;

/// The outcome of a write whose failure is an expected, handled case.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Done,
    /// The name is taken (create) or the object changed/vanished since it was read
    /// (update/delete precondition failed): re-read and plan again.
    Stale,
    /// The namespace is being deleted: nothing may be created there.
    NamespaceTerminating,
}

/// Maps the expected failures of a write to what the job does next.
pub(super) fn written<T>(res: ApiResult<T>) -> ApiResult<Written> {
    match res {
        Ok(_) => Ok(Written::Done),
        Err(e) if e.is_already_exists() || e.is_conflict() || e.is_not_found() => {
            Ok(Written::Stale)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Status exactly as the test kube-apiserver returned it (scripts/capture-fixtures.sh).
    fn captured(name: &str) -> ApiError {
        let path = format!(
            "{}/tests/data/status-{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        ApiError {
            verb: "create",
            resource: "secrets",
            source: kube::Error::Api(Box::new(serde_json::from_str(&text).unwrap())),
        }
    }

    #[test]
    fn each_captured_status_has_exactly_its_class() {
        type Class = (&'static str, fn(&ApiError) -> bool);
        let classes: [Class; 5] = [
            ("already-exists", ApiError::is_already_exists),
            ("conflict", ApiError::is_conflict),
            ("namespace-terminating", ApiError::is_namespace_terminating),
            ("immutable", ApiError::is_immutable_rejection),
            ("not-found", ApiError::is_not_found),
        ];
        let fixtures = [
            ("already-exists", "already-exists"),
            ("conflict", "conflict"),
            ("delete-precondition", "conflict"),
            ("namespace-terminating", "namespace-terminating"),
            ("immutable", "immutable"),
            ("not-found", "not-found"),
        ];
        for (fixture, class) in fixtures {
            let err = captured(fixture);
            for (name, is) in classes {
                assert_eq!(is(&err), name == class, "{fixture}: is {name}?");
            }
            assert!(!err.is_transient(), "{fixture}");
        }
    }

    #[test]
    fn expected_write_failures_make_the_job_re_read() {
        for fixture in [
            "already-exists",
            "conflict",
            "delete-precondition",
            "not-found",
        ] {
            assert_eq!(
                written::<()>(Err(captured(fixture))).unwrap(),
                Written::Stale,
                "{fixture}"
            );
        }
        for fixture in ["namespace-terminating", "immutable"] {
            assert!(written::<()>(Err(captured(fixture))).is_err(), "{fixture}");
        }
    }

    #[test]
    fn a_message_alone_classifies_nothing() {
        // The same words without the reason and cause are an ordinary 403 / 422.
        let mut terminating = captured("namespace-terminating");
        let mut immutable = captured("immutable");
        for err in [&mut terminating, &mut immutable] {
            if let kube::Error::Api(s) = &mut err.source {
                s.details = None;
            }
        }
        assert!(!terminating.is_namespace_terminating());
        assert!(!immutable.is_immutable_rejection());
    }

    fn error(code: u16, reason: &str, causes: &[(&str, &str)]) -> ApiError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": "a message that names secret team-a/app",
            "details": {"causes": causes.iter().map(|(r, f)| serde_json::json!({"reason": r, "field": f})).collect::<Vec<_>>()},
        }))
        .expect("a Status");
        ApiError {
            verb: "update",
            resource: "secrets",
            source: kube::Error::Api(Box::new(status)),
        }
    }

    #[test]
    fn failures_are_labelled_by_reason_never_by_message() {
        let cases = [
            (captured("conflict"), "conflict"),
            (captured("delete-precondition"), "conflict"),
            (captured("already-exists"), "already_exists"),
            (captured("namespace-terminating"), "namespace_terminating"),
            (captured("immutable"), "immutable"),
            (captured("not-found"), "not_found"),
            (error(403, "Forbidden", &[]), "forbidden"),
            (
                error(422, "Invalid", &[("FieldValueRequired", "metadata.name")]),
                "invalid",
            ),
            (error(429, "TooManyRequests", &[]), "throttled"),
            (error(503, "ServiceUnavailable", &[]), "server_error"),
        ];
        for (e, label) in cases {
            assert_eq!(e.metric_label(), label, "{e}");
        }
    }
}
