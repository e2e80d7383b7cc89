//! The reads of NamespacedCopyRules (SPEC §2.2): whether their CRD is installed (once, at
//! start: not installed, they are not read again, and nothing loops), every one of them, in
//! every namespace or in each listed one copyrator is bound in (SPEC §13), and one by name.
//! Each is handed on as the CopyRule it stands for (`copyrator_core::namespaced`).

use kube::{Api, discovery};

use super::{ApiResult, Cluster, ReadMode};
use crate::{copyrule::CopyRule, namespaced::NamespacedCopyRule};

/// The resource, as API-call metrics name it.
const RESOURCE: &str = "namespacedcopyrules";

impl Cluster {
    /// Whether the API server serves NamespacedCopyRules (discovery of `copyrator.io/v1alpha1`,
    /// which any authenticated client may read); recorded in the scope. A failed discovery
    /// counts as served: the watches then tell, and a 404 there is nothing there.
    pub async fn find_namespaced_rules(&self) -> bool {
        let gv = kube::core::GroupVersion::gv("copyrator.io", "v1alpha1");
        let served = match discovery::pinned_group(&self.client, &gv).await {
            Ok(group) => group
                .versioned_resources("v1alpha1")
                .iter()
                .any(|(r, _)| r.plural == RESOURCE),
            Err(kube::Error::Api(s)) if s.code == 404 => false,
            Err(kube::Error::Discovery(_)) => false,
            Err(e) => {
                tracing::warn!(error = %e, "discovery of NamespacedCopyRules failed; watching them");
                true
            }
        };
        self.scope.set_namespaced_rules_served(served);
        served
    }

    /// Every NamespacedCopyRule copyrator reads, as the CopyRules they stand for; none when
    /// their CRD is not installed.
    pub async fn list_namespaced_rules(&self, fresh: ReadMode) -> ApiResult<Vec<CopyRule>> {
        let index = &self.indexes.namespaced_rules;
        let since = index.listing();
        if !self.scope.reads_namespaced_rules() {
            index.listed(since, &[]);
            return Ok(Vec::new());
        }
        let apis: Vec<Api<NamespacedCopyRule>> = match self.scope.namespaces_read() {
            None => vec![Api::all(self.client.clone())],
            Some(listed) => listed
                .iter()
                .map(|ns| Api::namespaced(self.client.clone(), ns))
                .collect(),
        };
        let mut out = Vec::new();
        for api in apis {
            let mut lp = fresh.list_params(self.page_size);
            loop {
                match self.call("list", RESOURCE, api.list(&lp)).await {
                    // Not installed, or not granted (there): none readable, as the watch has
                    // it. Known as none until the watch looks again, so jobs do not ask again.
                    Err(e) if e.is_not_found() || e.is_forbidden() => {
                        tracing::debug!(error = %e, "NamespacedCopyRules not readable: none read");
                        break;
                    }
                    Err(e) => return Err(e),
                    Ok(page) => {
                        out.extend(
                            page.items
                                .iter()
                                .filter_map(NamespacedCopyRule::as_copy_rule),
                        );
                        match page.metadata.continue_ {
                            Some(token) if !token.is_empty() => lp.continue_token = Some(token),
                            _ => break,
                        }
                    }
                }
            }
        }
        index.listed(since, &out);
        Ok(out)
    }

    /// The NamespacedCopyRule copyrator knows as `<namespace>/<name>`, as the CopyRule it
    /// stands for.
    pub async fn get_namespaced_rule(&self, name: &str) -> ApiResult<Option<CopyRule>> {
        let Some((ns, name)) = crate::namespaced::split_rule_name(name) else {
            return Ok(None);
        };
        if !self.scope.reads_namespaced_rules() || !self.scope.reads(ns) {
            return Ok(None);
        }
        let api: Api<NamespacedCopyRule> = Api::namespaced(self.client.clone(), ns);
        match self.call("get", RESOURCE, api.get_opt(name)).await {
            Err(e) if e.is_not_found() || e.is_forbidden() => Ok(None),
            Err(e) => Err(e),
            Ok(rule) => Ok(rule.and_then(|r| r.as_copy_rule())),
        }
    }

    /// The rule resource copyrator knows as `name`: a CopyRule, or a NamespacedCopyRule
    /// (`<namespace>/<name>`) as the CopyRule it stands for.
    pub async fn get_rule(&self, name: &str) -> ApiResult<Option<CopyRule>> {
        match crate::namespaced::split_rule_name(name) {
            Some(_) => self.get_namespaced_rule(name).await,
            None => self.get_copy_rule(name).await,
        }
    }
}
