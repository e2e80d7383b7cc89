//! A hub cluster beside the test cluster (the member): a second control plane from
//! scripts/control-plane.sh in a directory of its own, the CopyRule CRD on it, a member
//! identity that reads the hub's CopyRules and only the sources it is granted, and the
//! member's HubLink to it.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use base64::Engine as _;
use copyrator::{
    cluster::client as serve,
    copyrule::{ClusterPlacement, ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy},
    hub::HubLink,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::{
    api::{
        authorization::v1::SubjectAccessReview,
        core::v1::{Namespace, Secret, ServiceAccount},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api, Client, CustomResourceExt, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;
use std::fmt::Debug;

use crate::common::{TestEnv, eventually, service_account_token};

/// The member's name on the hub.
pub const MEMBER: &str = "member-1";
/// The namespace of member identities on the hub.
pub const MEMBERS_NS: &str = "copyrator-members";

/// Starts a control plane of its own in `dir` (scripts/control-plane.sh, stopped when this
/// process ends), whatever cluster the tests use; returns its admin kubeconfig. `what` names
/// it in a failure.
pub fn control_plane_up(dir: &Path, what: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/control-plane.sh"))
        .env_remove("COPYRATOR_KUBECONFIG")
        .args(["up", "--dir"])
        .arg(dir)
        .args(["--owner-pid", &std::process::id().to_string()])
        .output()
        .expect("running scripts/control-plane.sh");
    assert!(
        out.status.success(),
        "{what} control plane failed to start:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A hub control plane, stopped and deleted when dropped.
pub struct Hub {
    dir: PathBuf,
    /// The hub's admin kubeconfig (for kubectl).
    pub kubeconfig: PathBuf,
    pub client: Client,
    pub server: String,
    /// The hub's serving CA, base64 PEM (a HubLink's `caBundle`).
    pub ca_bundle: String,
}

impl Hub {
    /// Starts a hub control plane and installs the CopyRule CRD and the member's identity.
    pub async fn start() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = std::env::temp_dir().join(format!("copyrator-hub.{}", std::process::id()));
        let _ = Command::new(root.join("scripts/control-plane.sh"))
            .env_remove("COPYRATOR_KUBECONFIG")
            .args(["down", "--dir"])
            .arg(&dir)
            .output();
        // Its own control plane, whatever cluster the member is.
        let kubeconfig = control_plane_up(&dir, "hub");
        let client = serve::kube_client_with_timeout(Some(&kubeconfig), Duration::from_secs(30))
            .await
            .expect("hub client");
        let config = kube::config::Kubeconfig::read_from(&kubeconfig).expect("hub kubeconfig");
        let server = config.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone())
            .expect("hub server");
        let ca = std::fs::read(dir.join("certs/apiserver.crt")).expect("hub CA");
        let hub = Self {
            dir,
            kubeconfig,
            client,
            server,
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca),
        };
        install_crd::<CopyRule>(&hub.client).await;
        hub.member_identity().await;
        hub
    }

    /// The members' namespace on the hub and [`MEMBER`]'s ServiceAccount there; what it may
    /// read is granted by copyrator ([`Hub::grant_members`]).
    async fn member_identity(&self) {
        self.namespace(MEMBERS_NS).await;
        self.service_account(MEMBER).await;
    }

    /// The ServiceAccount of member `cluster` on the hub.
    pub async fn service_account(&self, cluster: &str) {
        let name = copyrator::hub::member_identity(cluster);
        create_in(
            &self.client,
            MEMBERS_NS,
            serde_json::from_value::<ServiceAccount>(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await;
    }

    /// What the hub's copyrator does every round (`--hub-members-namespace`): each member may
    /// read what is placed on it. Returns what it could not grant (said on the rules and in
    /// Events too).
    pub async fn grant_members(&self) -> copyrator::sync::hub::Granted {
        self.grant_round()
            .await
            .expect("granting members their sources")
    }

    /// One round of the hub's copyrator granting members their sources, its error returned
    /// (the hub's copyrator logs it and tries again next round).
    pub async fn grant_round(&self) -> kube::Result<copyrator::sync::hub::Granted> {
        let events = copyrator::report::events::Events::new(
            self.client.clone(),
            "copyrator-e2e-hub".into(),
            std::sync::Arc::new(copyrator::metrics::Metrics::new()),
        );
        copyrator::sync::hub::grant_members(&self.client, MEMBERS_NS, &events).await
    }

    /// Whether member `cluster`'s identity may get the Secret `namespace/name` (the hub's
    /// answer to a SubjectAccessReview, as `kubectl auth can-i --as` asks it).
    pub async fn can_get(&self, cluster: &str, namespace: &str, name: &str) -> bool {
        self.can(cluster, "get", namespace, name).await
    }

    /// Whether member `cluster`'s identity may `verb` the Secret `namespace/name` (a `list`
    /// or `watch` by name is one with `fieldSelector=metadata.name=<name>`); `name` empty:
    /// every Secret there.
    pub async fn can(&self, cluster: &str, verb: &str, namespace: &str, name: &str) -> bool {
        self.may(cluster, verb, "secrets", namespace, name).await
    }

    /// Whether member `cluster`'s identity may `verb` the `resource` (core group)
    /// `namespace/name`.
    pub async fn may(
        &self,
        cluster: &str,
        verb: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        let user = format!(
            "system:serviceaccount:{MEMBERS_NS}:{}",
            copyrator::hub::member_identity(cluster)
        );
        let review: SubjectAccessReview = serde_json::from_value(json!({
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{MEMBERS_NS}")],
                "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace, "name": name},
            },
        }))
        .unwrap();
        Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .expect("a SubjectAccessReview")
            .status
            .is_some_and(|s| s.allowed)
    }

    pub async fn delete_rule(&self, name: &str) {
        Api::<CopyRule>::all(self.client.clone())
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleting a hub CopyRule");
    }

    /// A new token of the member's identity on the hub.
    pub async fn member_token(&self) -> String {
        let name = copyrator::hub::member_identity(MEMBER);
        service_account_token(&self.client, MEMBERS_NS, &name).await
    }

    /// A token of the member's identity on the hub bound to a Secret `handle` there: deleting
    /// the Secret ([`Hub::revoke`]) revokes the token.
    pub async fn member_token_bound(&self, handle: &str) -> String {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": handle}})).expect("a Secret");
        let secret = Api::<Secret>::namespaced(self.client.clone(), MEMBERS_NS)
            .create(&PostParams::default(), &secret)
            .await
            .expect("the token's Secret");
        let name = copyrator::hub::member_identity(MEMBER);
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
            self.client.clone(),
            MEMBERS_NS,
        )
        .create_token_request(
            &name,
            &Default::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Secret".into()),
                        name: Some(handle.into()),
                        uid: secret.metadata.uid,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .expect("a bound token")
        .status
        .and_then(|s| s.token)
        .expect("a token in the TokenRequest status")
    }

    /// Revokes the tokens bound to Secret `handle` (see [`Hub::member_token_bound`]).
    pub async fn revoke(&self, handle: &str) {
        Api::<Secret>::namespaced(self.client.clone(), MEMBERS_NS)
            .delete(handle, &DeleteParams::default())
            .await
            .expect("deleting the token's Secret");
    }

    /// Whether the hub authenticates `token` (a TokenReview).
    pub async fn authenticates(&self, token: &str) -> bool {
        use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<TokenReview>::all(self.client.clone())
            .create(&Default::default(), &review)
            .await
            .expect("a TokenReview")
            .status
            .and_then(|s| s.authenticated)
            .unwrap_or(false)
    }

    pub async fn namespace(&self, name: &str) {
        create(
            &self.client,
            serde_json::from_value::<Namespace>(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await;
    }

    /// Creates or replaces the Secret `namespace/name` holding `token=value`.
    pub async fn source(&self, namespace: &str, name: &str, value: &str) {
        let secret = serde_json::from_value::<Secret>(json!({
            "metadata": {"name": name},
            "stringData": {"token": value},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .patch(
                name,
                &PatchParams::apply("copyrator-e2e").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap_or_else(|e| panic!("hub Secret {namespace}/{name}: {e}"));
    }

    pub async fn delete_source(&self, namespace: &str, name: &str) {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting hub Secret {namespace}/{name}: {e}"));
    }

    /// A hub CopyRule placed on [`MEMBER`], copying the Secret `namespace/name` into the
    /// member's namespaces labelled `key=value`, overwriting what it finds if it could.
    pub async fn rule(&self, rule: &str, source: (&str, &str), selector: (&str, &str)) {
        self.rule_on(rule, source, selector, MEMBER).await;
    }

    /// As [`Hub::rule`], placed on member `cluster`.
    pub async fn rule_on(
        &self,
        rule: &str,
        (namespace, name): (&str, &str),
        (key, value): (&str, &str),
        cluster: &str,
    ) {
        let spec = CopyRuleSpec {
            kind: "Secret".into(),
            source_namespace: namespace.into(),
            source_name: Some(name.into()),
            namespace_selector: Some(LabelSelector {
                match_labels: Some([(key.to_string(), value.to_string())].into()),
                match_expressions: None,
            }),
            deletion_policy: DeletionPolicy::Delete,
            conflict_policy: ConflictPolicy::Overwrite,
            clusters: Some(ClusterPlacement {
                names: vec![cluster.into()],
                selector: None,
            }),
            ..Default::default()
        };
        create(&self.client, CopyRule::new(rule, spec)).await;
    }

    /// The PEM file of the CA of the hub API server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("certs/apiserver.crt")
    }

    /// A token of member `cluster`'s identity on the hub, as `kubectl create token` makes it
    /// (the test control plane has no token controller to fill a token Secret).
    pub async fn token_of(&self, cluster: &str) -> String {
        let name = copyrator::hub::member_identity(cluster);
        service_account_token(&self.client, MEMBERS_NS, &name).await
    }

    /// The hub's kube-apiserver process.
    fn apiserver_pid(&self) -> String {
        std::fs::read_to_string(self.dir.join("apiserver.pid"))
            .expect("hub apiserver.pid")
            .trim()
            .to_string()
    }

    /// Freezes (`STOP`) or thaws (`CONT`) the hub's API server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.apiserver_pid()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} the hub's API server");
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // Never leave it frozen: `down` waits for it to stop.
        let _ = Command::new("kill")
            .args(["-CONT".to_string(), self.apiserver_pid()])
            .status();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let _ = Command::new(root.join("scripts/control-plane.sh"))
            .env_remove("COPYRATOR_KUBECONFIG")
            .args(["down", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

/// Creates the cluster-scoped `obj`.
async fn create<K>(client: &Client, obj: K)
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
{
    created(
        Api::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await,
        &obj,
    );
}

/// Creates `obj` in `namespace`.
async fn create_in<K>(client: &Client, namespace: &str, obj: K)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    created(api.create(&PostParams::default(), &obj).await, &obj);
}

fn created<K: Resource<DynamicType = ()>>(result: kube::Result<K>, obj: &K) {
    if let Err(e) = result {
        let name = obj.meta().name.clone().unwrap_or_default();
        panic!("creating {} {name}: {e}", K::kind(&()));
    }
}

/// Installs `K`'s CRD and waits until it is served.
pub async fn install_crd<K>(client: &Client)
where
    K: CustomResourceExt
        + Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let crd = K::crd();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            &crd.name_any(),
            &PatchParams::apply("copyrator-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("installing a CRD");
    let api: Api<K> = Api::all(client.clone());
    eventually(Duration::from_secs(30), "the CRD being served", || {
        let api = api.clone();
        async move { api.list(&ListParams::default().limit(1)).await.ok() }
    })
    .await;
}

/// The member side: the HubLink CRD, copyrator's own namespace (given to it as
/// `--lease-namespace`) and the Secret there holding the member's hub token.
pub struct Member {
    pub own_namespace: String,
    pub link: String,
}

impl Member {
    pub async fn prepare(env: &TestEnv) -> Self {
        install_crd::<HubLink>(&env.client).await;
        let own_namespace = env.namespace("copyrator-own", &[]).await;
        Self {
            own_namespace,
            link: env.name("hub"),
        }
    }

    /// copyrator's extra arguments for this member: the hub read in full every second.
    pub fn args(&self) -> Vec<String> {
        self.args_every("1s")
    }

    /// copyrator's extra arguments for this member, the hub read in full every `interval`.
    pub fn args_every(&self, interval: &str) -> Vec<String> {
        vec![
            format!("--hub-sync-interval={interval}"),
            format!("--lease-namespace={}", self.own_namespace),
        ]
    }

    /// Writes `token` into the credential Secret.
    pub async fn set_token(&self, env: &TestEnv, token: &str) {
        let secret = serde_json::from_value::<Secret>(json!({
            "metadata": {"name": "hub-token"},
            "stringData": {"token": token},
        }))
        .unwrap();
        env.secrets(&self.own_namespace)
            .patch(
                "hub-token",
                &PatchParams::apply("copyrator-e2e").force(),
                &Patch::Apply(&secret),
            )
            .await
            .expect("writing the hub token Secret");
    }

    /// Creates the HubLink to `hub`: sources of `source_namespaces` (trusted), into the
    /// member's namespaces labelled `key=value`.
    pub async fn link(
        &self,
        env: &TestEnv,
        hub: &Hub,
        source_namespaces: &[&str],
        selector: (&str, &str),
    ) {
        self.link_through(env, hub, &hub.server, source_namespaces, selector)
            .await
    }

    /// As [`Member::link`], the hub reached at `server` (a proxy in front of it).
    pub async fn link_through(
        &self,
        env: &TestEnv,
        hub: &Hub,
        server: &str,
        source_namespaces: &[&str],
        selector: (&str, &str),
    ) {
        self.link_trusting(
            env,
            hub,
            server,
            source_namespaces,
            source_namespaces,
            selector,
        )
        .await
    }

    /// As [`Member::link_through`], trusting only the sources of `trusted`.
    pub async fn link_trusting(
        &self,
        env: &TestEnv,
        hub: &Hub,
        server: &str,
        source_namespaces: &[&str],
        trusted: &[&str],
        (key, value): (&str, &str),
    ) {
        let link: HubLink = serde_json::from_value(json!({
            "apiVersion": "copyrator.io/v1alpha1",
            "kind": "HubLink",
            "metadata": {"name": self.link},
            "spec": {
                "server": server,
                "caBundle": hub.ca_bundle,
                "credentialSecret": {"name": "hub-token"},
                "clusterName": MEMBER,
                "ceiling": {
                    "sourceNamespaces": source_namespaces,
                    "trustedSourceNamespaces": trusted,
                    "namespaceSelector": {"matchLabels": {key: value}},
                },
            },
        }))
        .expect("a HubLink");
        create(&env.client, link).await;
    }

    /// The link's `Reachable` condition: (status, reason, lastTransitionTime).
    pub async fn reachable(&self, env: &TestEnv) -> Option<(String, String, String)> {
        self.condition(env, "Reachable").await
    }

    /// The link's condition `type_`: (status, reason, lastTransitionTime).
    pub async fn condition(&self, env: &TestEnv, type_: &str) -> Option<(String, String, String)> {
        let link = Api::<HubLink>::all(env.client.clone())
            .get(&self.link)
            .await
            .ok()?;
        let c = link
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)?;
        Some((c.status, c.reason, format!("{:?}", c.last_transition_time)))
    }

    /// Waits until the link's `Reachable` condition is `status`; returns it.
    pub async fn wait_reachable(
        &self,
        env: &TestEnv,
        status: &str,
        timeout: Duration,
    ) -> (String, String, String) {
        eventually(timeout, &format!("HubLink Reachable={status}"), || async {
            self.reachable(env).await.filter(|c| c.0 == status)
        })
        .await
    }

    pub async fn delete_link(&self, env: &TestEnv) {
        let _ = Api::<HubLink>::all(env.client.clone())
            .delete(&self.link, &DeleteParams::default())
            .await;
    }
}
