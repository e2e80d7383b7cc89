//! The writes that apply a plan: create-if-absent, preconditioned replace and delete of
//! copies, a CopyRule's status, the one label copyrator adds to a CopyRule's source, and the
//! marks `migrate --adopt` adds to a peer's copy.

use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde_json::json;

use super::{ApiResult, Cluster, Written, error::written};
use crate::{
    content::DesiredCopy,
    copyrule::{CopyRule, CopyRuleStatus},
    marks,
    model::{MetaItem, ObjectKey},
};

impl Cluster {
    /// Writes a CopyRule's status subresource, preconditioned on the resourceVersion the status
    /// was computed from: a status computed from an older view never overwrites a newer one.
    pub async fn patch_rule_status(
        &self,
        name: &str,
        resource_version: &str,
        status: &CopyRuleStatus,
    ) -> ApiResult<Written> {
        let api: Api<CopyRule> = Api::all(self.client.clone());
        let patch =
            json!({ "metadata": { "resourceVersion": resource_version }, "status": status });
        let pp = PatchParams {
            field_manager: Some(marks::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let res = self
            .call(
                "patch",
                "copyrules/status",
                api.patch_status(name, &pp, &Patch::Merge(&patch)),
            )
            .await;
        written(res)
    }

    /// Adds copyrator's ownership marks to an object another tool made (`copyrator migrate
    /// --adopt`): a metadata-only merge patch of these labels and annotations, preconditioned
    /// on the uid and resourceVersion that were read; nothing else of it is touched.
    pub async fn add_marks(
        &self,
        key: &ObjectKey,
        uid: &str,
        resource_version: &str,
        labels: &serde_json::Value,
        annotations: &serde_json::Value,
    ) -> ApiResult<Written> {
        let api = self.objects(key.kind, Some(&key.namespace));
        let patch = json!({
            "metadata": {
                "uid": uid,
                "resourceVersion": resource_version,
                "labels": labels,
                "annotations": annotations,
            }
        });
        let pp = PatchParams {
            field_manager: Some(marks::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let res = self
            .call(
                "patch",
                key.kind.plural(),
                api.patch_metadata(&key.name, &pp, &Patch::Merge(&patch)),
            )
            .await;
        written(res)
    }

    /// Adds `copyrator.io/source: "true"` to a source a CopyRule references, so its changes
    /// reach the sources webhook (SPEC §2.2). A metadata-only merge patch of that one label,
    /// preconditioned on the uid that was read; nothing else of the source is touched.
    pub async fn label_source(&self, key: &ObjectKey, uid: &str) -> ApiResult<Written> {
        let api = self.objects(key.kind, Some(&key.namespace));
        let patch = json!({
            "metadata": { "uid": uid, "labels": { marks::SOURCE_LABEL: "true" } }
        });
        let pp = PatchParams {
            field_manager: Some(marks::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let res = self
            .call(
                "patch",
                key.kind.plural(),
                api.patch_metadata(&key.name, &pp, &Patch::Merge(&patch)),
            )
            .await;
        written(res)
    }

    /// Creates a copy if the name is free. The body is serialized from the copy's shared
    /// parts, and of the answer (the whole object again) only the metadata is kept, in the
    /// copy index. Writes to copies update the index before their watch events arrive, and
    /// the index knows their events by the resourceVersion the answer carries (SPEC §5).
    pub async fn create_copy(&self, copy: &DesiredCopy) -> ApiResult<Written> {
        let key = &copy.key;
        self.indexes.copies.writing(key);
        let send = async {
            let body = copy.body(None).map_err(kube::Error::SerdeError)?;
            let req = Self::objects_request(key.kind, Some(&key.namespace))
                .create(&post_params(), body)
                .map_err(kube::Error::BuildRequest)?;
            self.fetch::<MetaItem>(req).await
        };
        let res = self.call("create", key.kind.plural(), send).await;
        self.indexes
            .copies
            .write_answered(key, res.as_ref().ok().map(|item| item.metadata.clone()));
        match res {
            Err(e) if e.is_namespace_terminating() => Ok(Written::NamespaceTerminating),
            other => written(other.map(|_| ())),
        }
    }

    /// Replaces a copy, preconditioned on the resourceVersion it was planned from.
    pub async fn replace_copy(
        &self,
        copy: &DesiredCopy,
        resource_version: &str,
    ) -> ApiResult<Written> {
        let key = &copy.key;
        self.indexes.copies.writing(key);
        let send = async {
            let body = copy
                .body(Some(resource_version))
                .map_err(kube::Error::SerdeError)?;
            let req = Self::objects_request(key.kind, Some(&key.namespace))
                .replace(&key.name, &post_params(), body)
                .map_err(kube::Error::BuildRequest)?;
            self.fetch::<MetaItem>(req).await
        };
        let res = self.call("update", key.kind.plural(), send).await;
        self.indexes
            .copies
            .write_answered(key, res.as_ref().ok().map(|item| item.metadata.clone()));
        written(res.map(|_| ()))
    }

    /// Deletes a copy, preconditioned on the resourceVersion it was planned from.
    pub async fn delete(&self, key: &ObjectKey, resource_version: &str) -> ApiResult<Written> {
        let api = self.objects(key.kind, Some(&key.namespace));
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_string()),
                uid: None,
            }),
            ..Default::default()
        };
        // Its DELETED event is copyrator's own echo, not a deletion to restore.
        self.indexes.copies.deleting(key);
        let res = self
            .call("delete", key.kind.plural(), api.delete(&key.name, &dp))
            .await;
        match &res {
            Ok(_) => self.indexes.copies.forget(key, None),
            Err(_) => self.indexes.copies.delete_failed(key),
        }
        written(res)
    }
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(marks::FIELD_MANAGER.into()),
    }
}
