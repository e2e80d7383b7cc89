//! Command line (SPEC §6.3): the commands and their flags. `conventions` applies the rules
//! every flag follows (its environment variable `COPYRATOR_<FLAG>`, headings, a short `-h`);
//! `sizes` reads `6Mi`; `files` reads the YAML files one-off commands take.

pub mod conventions;
pub mod files;
pub mod sizes;

use std::{net::IpAddr, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{
    grants::GrantPolicy,
    plan::{Policy, SourceCaps},
    telemetry::LogFormat,
    tenancy::{NamespacePatterns, TrustPolicy},
};

#[derive(Debug, Parser)]
#[command(
    name = "copyrator",
    version,
    about = "Keeps Secrets and ConfigMaps copied across Kubernetes namespaces",
    long_about = "copyrator copies a source Secret or ConfigMap into every namespace that opts in \
by label, keeps the copies identical to the source, removes them when a namespace opts out and \
restores them when someone deletes or edits one. Changes arrive through admission webhooks; a \
lightweight periodic resync catches anything the webhooks missed."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: webhook server, workers and reconciler.
    Serve(Box<ServeArgs>),
    /// Write a CA and a serving certificate for local runs and tests.
    Certs(CertsArgs),
    /// Print Kubernetes manifests generated from the code.
    #[command(subcommand)]
    Manifests(ManifestsCommand),
    /// Explain why copies are or are not where you expect them (reads the cluster, writes
    /// nothing).
    #[command(subcommand)]
    Explain(ExplainCommand),
    /// Show what applying manifest files would do, before applying them (reads the cluster,
    /// writes nothing): which namespaces get which copy, what is refused and why, and which
    /// copies are deleted.
    Plan(Box<PlanArgs>),
    /// Print the copyrator configuration that expresses a peer's annotations (reflector,
    /// replicator, kubed) or Kyverno generate policies; with --adopt, take over the peer's
    /// copies of the same sources.
    Migrate(Box<MigrateArgs>),
    /// Ask the running copyrator for a full resync now: annotates its Lease, and the leader
    /// starts one within seconds (after a migration, or to repair drift at once).
    Resync(ResyncArgs),
}

/// `copyrator resync`: where the running copyrator's Lease is.
#[derive(Debug, Args)]
pub struct ResyncArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "COPYRATOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// The ValidatingWebhookConfiguration of the running copyrator: without
    /// --lease-namespace, its Lease is read in the namespace of the Service its webhooks call.
    /// Default: --lease-name (the chart names both after the release).
    #[arg(long, env = "COPYRATOR_WEBHOOK_CONFIGURATION")]
    pub webhook_configuration: Option<String>,
}

/// copyrator's policy (SPEC §2.3, §9): one set of flags and environment variables for
/// `serve` and for the commands that reason like it (`explain`, `migrate`), which must agree
/// with the running copyrator's.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Namespaces that never receive copies (comma-separated).
    #[arg(
        long,
        env = "COPYRATOR_EXCLUDE_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system,kube-node-lease"
    )]
    pub exclude_namespaces: Vec<String>,

    /// Namespaces whose sources' inline rules (annotations) are trusted to copy into any
    /// namespace: comma-separated names or patterns with `*` (`*` trusts every namespace, as a
    /// single-team cluster would). A source anywhere else copies only into namespaces whose
    /// `copyrator.io/accept-from` annotation lists its namespace. CopyRules are always
    /// trusted. Default: none (the chart trusts its release namespace).
    #[arg(
        long,
        env = "COPYRATOR_TRUSTED_NAMESPACES",
        default_value = "",
        value_parser = parse_namespace_patterns
    )]
    pub trusted_namespaces: NamespacePatterns,

    /// Opted-in sources copyrator acts on per namespace it does not trust: the oldest ones;
    /// the rest are held back (their copies left as they are) and reported (SPEC §9.7).
    #[arg(
        long,
        env = "COPYRATOR_MAX_SOURCES_PER_NAMESPACE",
        default_value_t = SourceCaps::default().per_namespace
    )]
    pub max_sources_per_namespace: usize,

    /// Bytes of labels and annotations (those its copies carry, and copyrator's own
    /// configuration) copyrator keeps of a source of a namespace it does not trust; a source
    /// over it is held back (its copies left as they are) and reported (SPEC §9.7).
    #[arg(
        long,
        env = "COPYRATOR_MAX_SOURCE_METADATA_BYTES",
        default_value = "16Ki",
        value_parser = sizes::parse_size_usize
    )]
    pub max_source_metadata_bytes: usize,

    /// Kinds copyrator copies (SPEC §3.1), comma-separated, as `Kind` for the core group or
    /// `Kind.group` (`NetworkPolicy.networking.k8s.io`, `RoleBinding.rbac.authorization.k8s.io`,
    /// a custom resource's `Widget.example.com`). Secret and ConfigMap are always copied. Each
    /// must be namespaced and served with get, list, watch, create, update and delete; a kind
    /// not served yet (a CRD installed later) is looked for again every 30 s. copyrator's
    /// RBAC must allow those verbs on each (the chart renders it from `copyKinds`). Kinds
    /// other than Secret and ConfigMap are copied only by CopyRules and the inline rules of
    /// trusted namespaces (SPEC §9.2).
    #[arg(
        long,
        env = "COPYRATOR_COPY_KINDS",
        value_delimiter = ',',
        default_value = "Secret,ConfigMap",
        value_parser = parse_copy_kind
    )]
    pub copy_kinds: Vec<String>,

    /// ClusterRoles a copied RoleBinding may reference, comma-separated (SPEC §9.10; the
    /// chart's `rbac.bindClusterRoles`). A copy binding any other role is refused, whatever
    /// the API server would allow; empty: no RoleBinding to a ClusterRole is copied.
    #[arg(
        long,
        env = "COPYRATOR_BIND_CLUSTER_ROLES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub bind_cluster_roles: Vec<String>,

    /// Roles (by name, in the copy's namespace) a copied RoleBinding may reference (SPEC
    /// §9.10; `rbac.bindRoles`).
    #[arg(
        long,
        env = "COPYRATOR_BIND_ROLES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub bind_roles: Vec<String>,

    /// Names a copied Role may have (SPEC §9.10; `rbac.escalateRoles`); empty: no Role is
    /// copied.
    #[arg(
        long,
        env = "COPYRATOR_ESCALATE_ROLES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub escalate_roles: Vec<String>,

    /// How often kinds of --copy-kinds not served yet (and whether registered kinds still
    /// are) are looked for again through discovery.
    #[arg(long, env = "COPYRATOR_KIND_RETRY_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration, hide = true)]
    pub kind_retry_interval: std::time::Duration,
}

impl ServeArgs {
    /// What each client address may hold of the webhook port: the flags given, the rest
    /// derived from `--memory-limit` (or the defaults), made consistent.
    pub fn peer_limits(&self) -> crate::listener::PeerLimits {
        let base = match self.memory_limit {
            Some(limit) => crate::listener::PeerLimits::within(limit, self.max_body_bytes),
            None => crate::listener::PeerLimits::default(),
        };
        crate::listener::PeerLimits {
            connections: self.webhook_max_connections.unwrap_or(base.connections),
            connections_per_peer: self
                .webhook_max_connections_per_peer
                .unwrap_or(base.connections_per_peer),
            in_flight: self.webhook_max_in_flight,
            in_flight_per_peer: self.webhook_max_in_flight_per_peer,
            body_bytes: self.webhook_body_bytes_in_flight.unwrap_or(base.body_bytes),
            body_bytes_per_peer: self
                .webhook_body_bytes_per_peer
                .unwrap_or(base.body_bytes_per_peer),
        }
        .sane(self.max_body_bytes)
    }
}

impl PolicyArgs {
    /// The policy these flags give: the one function that builds it, for every command.
    pub fn policy(&self) -> Policy {
        Policy {
            excluded_namespaces: self
                .exclude_namespaces
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            trust: TrustPolicy {
                trusted_namespaces: self.trusted_namespaces.clone(),
            },
            caps: SourceCaps {
                per_namespace: self.max_sources_per_namespace,
                metadata_bytes: self.max_source_metadata_bytes,
            },
            grants: GrantPolicy {
                bind_cluster_roles: names(&self.bind_cluster_roles),
                bind_roles: names(&self.bind_roles),
                roles: names(&self.escalate_roles),
            },
            own_namespace: None,
            // The package's; `serve --default-cas-file` replaces them.
            default_cas: Some(crate::default_cas::built_in()),
        }
    }
}

/// A comma-separated list's entries, trimmed, without empty ones.
fn names(list: &[String]) -> std::collections::BTreeSet<String> {
    list.iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The leader-election Lease, where the leader also publishes its policy: `serve` holds it,
/// `explain` reads the policy from it.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// Namespace of the leader-election Lease. serve: default copyrator's own namespace
    /// in-cluster ($POD_NAMESPACE, else the service account's namespace file), `default` out
    /// of cluster. explain: default, the namespace of the Service that copyrator's webhook
    /// configuration calls (--webhook-configuration); a Lease in any other namespace is
    /// ignored.
    #[arg(long, env = "COPYRATOR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Name of the leader-election Lease.
    #[arg(long, env = "COPYRATOR_LEASE_NAME", default_value = "copyrator")]
    pub lease_name: String,
}

/// Which policy flags were given (on the command line or in the environment) rather than
/// left to their defaults: `explain` lets those override the policy the running copyrator
/// publishes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExplicitPolicy {
    pub trusted_namespaces: bool,
    pub exclude_namespaces: bool,
    pub max_sources_per_namespace: bool,
    pub max_source_metadata_bytes: bool,
}

impl ExplicitPolicy {
    /// The policy flags given to the innermost subcommand of `matches`.
    pub fn from_matches(matches: &clap::ArgMatches) -> Self {
        let mut m = matches;
        while let Some((_, sub)) = m.subcommand() {
            m = sub;
        }
        let given = |id: &str| {
            m.try_get_raw(id).is_ok_and(|v| v.is_some())
                && !matches!(
                    m.value_source(id),
                    None | Some(clap::parser::ValueSource::DefaultValue)
                )
        };
        Self {
            trusted_namespaces: given("trusted_namespaces"),
            exclude_namespaces: given("exclude_namespaces"),
            max_sources_per_namespace: given("max_sources_per_namespace"),
            max_source_metadata_bytes: given("max_source_metadata_bytes"),
        }
    }
}

/// Output of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainOutput {
    Table,
    Json,
}

/// Options every `explain` takes.
#[derive(Debug, Clone, Args)]
pub struct ExplainOptions {
    /// Kubeconfig to use; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "COPYRATOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Output format: a table, or JSON for scripts (shapes: docs/explain-json.md,
    /// docs/plan-json.md).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: ExplainOutput,

    #[command(flatten)]
    pub policy: PolicyArgs,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// The ValidatingWebhookConfiguration of the running copyrator: without
    /// --lease-namespace, its Lease is read in the namespace of the Service its webhooks call.
    /// Default: --lease-name (the chart names both after the release).
    #[arg(long, env = "COPYRATOR_WEBHOOK_CONFIGURATION")]
    pub webhook_configuration: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ExplainCommand {
    /// Every rule that could copy into namespace NAMESPACE: whether it applies, why, the
    /// copy's state and the last Event.
    Namespace {
        namespace: String,
        #[command(flatten)]
        options: ExplainOptions,
    },
    /// Every rule of a source and where its copies go. SOURCE is NAMESPACE/NAME (a Secret,
    /// or the kind --kind says), or KIND/NAMESPACE/NAME: secret/, configmap/, or any kind
    /// copied here (networkpolicy/NAMESPACE/NAME).
    Source {
        source: String,
        /// Kind of the source when SOURCE does not say it.
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
        #[command(flatten)]
        options: ExplainOptions,
    },
}

/// `copyrator plan`: what applying the files would do.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Manifest files to plan (YAML, several documents each; `-` for stdin): CopyRules,
    /// objects of the kinds copied here (sources, with or without copyrator's annotations) and
    /// Namespaces; other documents are noted and left out.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,

    /// Namespace of the namespaced documents that name none (default: the kubeconfig
    /// context's, as for kubectl apply).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,

    #[command(flatten)]
    pub options: ExplainOptions,
}

/// A kind on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    #[value(alias = "secrets")]
    Secret,
    #[value(alias = "configmaps", alias = "cm")]
    Configmap,
}

impl From<KindArg> for crate::model::Kind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Secret => crate::model::Kind::Secret,
            KindArg::Configmap => crate::model::Kind::ConfigMap,
        }
    }
}

/// The peers `migrate` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Peer {
    /// emberstack kubernetes-reflector (`reflector.v1.k8s.emberstack.com/*`).
    Reflector,
    /// mittwald kubernetes-replicator (`replicator.v1.mittwald.de/*`).
    Replicator,
    /// appscode kubed / config-syncer (`kubed.appscode.com/*`).
    Kubed,
    /// Kyverno ClusterPolicies whose generate rules clone or hold an object for Namespaces
    /// (`clusterpolicies.kyverno.io`; namespaced Policies are reported), and GeneratingPolicies
    /// (`generatingpolicies.policies.kyverno.io`).
    Kyverno,
    /// cert-manager trust-manager Bundles and ClusterBundles (`bundles.trust.cert-manager.io`,
    /// `clusterbundles.trust-manager.io`).
    TrustManager,
}

/// Output of `migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MigrateOutput {
    /// A shell script of kubectl commands.
    Kubectl,
    /// YAML: merge patches of the sources (one `kubectl patch` each) and CopyRule manifests.
    Yaml,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The peer whose annotations (kyverno: ClusterPolicies; trust-manager: Bundles and
    /// ClusterBundles) are translated.
    #[arg(long)]
    pub from: Peer,

    /// Read these manifest files (YAML, several documents each, or `-` for stdin) instead of
    /// the cluster.
    #[arg(short = 'f', long = "filename", conflicts_with = "adopt")]
    pub files: Vec<PathBuf>,

    /// Only sources in this namespace; repeat it for several (`-n a -n b`). Default: every
    /// namespace.
    #[arg(short = 'n', long = "namespace", value_parser = parse_one_namespace)]
    pub namespaces: Vec<String>,

    /// Express every intent as a CopyRule instead of labels and annotations on the source.
    #[arg(long)]
    pub copy_rules: bool,

    /// Print in force the CopyRules for sources of namespaces not in --trusted-namespaces.
    /// Without it they are printed commented out, with a note: a CopyRule copies its source
    /// into every namespace it selects with no consent, at the highest precedence, so it is
    /// for content the cluster administrators take as theirs. Applies to every source read
    /// (narrow it with -n).
    #[arg(long)]
    pub trust_sources: bool,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "kubectl")]
    pub output: MigrateOutput,

    /// trust-manager's trust namespace (its own `--trust-namespace` flag), where its
    /// (Cluster)Bundles' sources are read from. Not copyrator's --trusted-namespaces.
    #[arg(long, default_value = "cert-manager", alias = "trust-namespace")]
    pub trust_manager_namespace: String,

    /// Exit non-zero when anything could not be carried over exactly: every note in the
    /// output, a source left out, a rule printed commented out, plain target names that
    /// files without Namespace objects cannot resolve. For scripts and CI.
    #[arg(long)]
    pub strict: bool,

    /// Take over the peer's existing copies (adds copyrator's ownership marks) when their
    /// peer annotations name the same source. Writes to the cluster. Not for kyverno or
    /// trust-manager.
    #[arg(long)]
    pub adopt: bool,

    /// Kubeconfig to use; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "COPYRATOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "COPYRATOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace-scoped install (SPEC §13): serve only these namespaces (comma-separated
    /// names), with no cluster-scoped right: one watch per namespace and kind, namespace labels
    /// read by a GET of each Namespace object, cluster-scoped CopyRules ignored. A listed
    /// namespace gets copies only once its owner binds copyrator's ServiceAccount there.
    #[arg(long, env = "COPYRATOR_NAMESPACES", value_delimiter = ',', value_parser = parse_listed_namespace)]
    pub namespaces: Vec<String>,

    /// Address of the HTTPS webhook server.
    #[arg(long, env = "COPYRATOR_WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,

    /// Address of the plain HTTP server (/metrics, /healthz, /readyz, /livez).
    #[arg(long, env = "COPYRATOR_HTTP_ADDR", default_value = "0.0.0.0:9090")]
    pub http_addr: SocketAddr,

    /// PEM certificate (chain) of the webhook server; re-read when it changes.
    #[arg(long, env = "COPYRATOR_TLS_CERT", default_value = "certs/tls.crt")]
    pub tls_cert: PathBuf,

    /// PEM private key of the webhook server; re-read when it changes.
    #[arg(long, env = "COPYRATOR_TLS_KEY", default_value = "certs/tls.key")]
    pub tls_key: PathBuf,

    /// Serve the certificate copyrator issues itself into this Secret (in copyrator's own
    /// namespace, `--tls-secret-namespace`), instead of --tls-cert and --tls-key: a CA and a
    /// serving certificate, the CA published into the caBundle of the
    /// `--webhook-configuration`s, both rotated before they expire (SPEC §6.4). The Secret must
    /// be absent, or carry the annotation `copyrator.io/certificates: managed`.
    #[arg(long, env = "COPYRATOR_TLS_SECRET")]
    pub tls_secret: Option<String>,

    /// Namespace of --tls-secret. Default: copyrator's own namespace (as for the Lease).
    #[arg(long, env = "COPYRATOR_TLS_SECRET_NAMESPACE")]
    pub tls_secret_namespace: Option<String>,

    /// With --tls-secret: DNS names the serving certificate is for (comma-separated or
    /// repeated), e.g. the Service's `NAME.NAMESPACE.svc`.
    #[arg(long, env = "COPYRATOR_TLS_DNS_NAMES", value_delimiter = ',')]
    pub tls_dns_names: Vec<String>,

    /// With --tls-secret: IP addresses the serving certificate is for (webhooks called by URL).
    #[arg(long, env = "COPYRATOR_TLS_IPS", value_delimiter = ',')]
    pub tls_ips: Vec<IpAddr>,

    /// With --tls-secret: Validating- and MutatingWebhookConfigurations (by name, either kind)
    /// whose webhooks get the CA bundle. Repeatable.
    #[arg(long, env = "COPYRATOR_WEBHOOK_CONFIGURATION", value_delimiter = ',')]
    pub webhook_configuration: Vec<String>,

    /// With --tls-secret: lifetime of a CA; a new one is made with a third of it left.
    #[arg(long, env = "COPYRATOR_CA_VALIDITY", default_value = "365d", value_parser = parse_duration)]
    pub ca_validity: Duration,

    /// With --tls-secret: lifetime of a serving certificate; a new one is signed with a third
    /// of it left. At most half of --ca-validity.
    #[arg(long, env = "COPYRATOR_CERT_VALIDITY", default_value = "90d", value_parser = parse_duration)]
    pub cert_validity: Duration,

    /// With --tls-secret: how long a new CA bundle or serving certificate is given to reach the
    /// API server and every replica before the next rotation step relies on it.
    #[arg(long, env = "COPYRATOR_CERT_PROPAGATION", default_value = "1m", value_parser = parse_duration)]
    pub cert_propagation: Duration,

    /// With --tls-secret: how often the Secret and the webhook configurations are looked at
    /// when nothing is due (a change by someone else is noticed within this).
    #[arg(long, env = "COPYRATOR_CERT_CHECK_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,

    /// PEM CA bundle: only clients presenting a certificate signed by it may connect to the
    /// webhook server (the API server's webhook client certificate, configured with its
    /// --admission-control-config-file). Re-read when it changes. Default: any client.
    #[arg(long, env = "COPYRATOR_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,

    /// The addresses the API server calls webhooks from (CIDRs, comma-separated, e.g.
    /// 10.0.0.0/28): a connection from them counts as the API server's, as one --client-ca
    /// verified does (pull-secret injection, answers that depend on trust). Only where no one
    /// else can have such an address (the control plane's own range). Default: none.
    #[arg(long, env = "COPYRATOR_API_SERVER_CIDRS", value_delimiter = ',')]
    pub api_server_cidrs: Vec<crate::listener::cidr::Cidr>,

    /// How often the certificate files are checked for changes.
    #[arg(long, env = "COPYRATOR_TLS_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub tls_reload_interval: Duration,

    /// Largest AdmissionReview accepted, in bytes (a 1 MiB Secret UPDATE is ~2.7 MB).
    #[arg(long, env = "COPYRATOR_MAX_BODY_BYTES", default_value = "6Mi",
        value_parser = sizes::parse_size_usize)]
    pub max_body_bytes: usize,

    /// Admission reviews answered at once (counted once a review's body is in); beyond, the
    /// webhook answers 503 at once (the API server then ignores the call: failurePolicy
    /// Ignore), except to an address holding less than an equal share.
    #[arg(long, env = "COPYRATOR_WEBHOOK_MAX_IN_FLIGHT", default_value_t = crate::listener::budget::DEFAULT_IN_FLIGHT)]
    pub webhook_max_in_flight: usize,

    /// Admission reviews answered at once for one client address; beyond, 503 at once.
    #[arg(long, env = "COPYRATOR_WEBHOOK_MAX_IN_FLIGHT_PER_PEER", default_value_t = crate::listener::budget::DEFAULT_IN_FLIGHT_PER_PEER)]
    pub webhook_max_in_flight_per_peer: usize,

    /// The container's memory limit: the webhook port keeps within half of it (bodies in
    /// flight a quarter, connections a quarter), setting the defaults of the four flags below
    /// it; flags given win. The chart passes its memory limit. Default: none (the defaults).
    #[arg(long, env = "COPYRATOR_MEMORY_LIMIT", value_parser = sizes::parse_size_usize)]
    pub memory_limit: Option<usize>,

    /// Bytes of review bodies received and not yet answered, counted as they arrive; beyond,
    /// 503 at once, except to an address holding less than an equal share. Default: 32Mi, or
    /// a quarter of --memory-limit.
    #[arg(long, env = "COPYRATOR_WEBHOOK_BODY_BYTES_IN_FLIGHT",
        value_parser = sizes::parse_size_usize)]
    pub webhook_body_bytes_in_flight: Option<usize>,

    /// Bytes of review bodies one client address may have received and not yet answered;
    /// beyond, 503 at once. Default: half of --webhook-body-bytes-in-flight's default.
    #[arg(long, env = "COPYRATOR_WEBHOOK_BODY_BYTES_PER_PEER",
        value_parser = sizes::parse_size_usize)]
    pub webhook_body_bytes_per_peer: Option<usize>,

    /// Time from a request's headers to its body's last byte; beyond, 408. The API server
    /// sends a review's body with its headers.
    #[arg(long, env = "COPYRATOR_WEBHOOK_REQUEST_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub webhook_request_timeout: Duration,

    /// Time a new connection has to finish its TLS handshake and send its first request's
    /// headers; a connection with no request in flight is closed after --webhook-idle-timeout.
    #[arg(long, env = "COPYRATOR_WEBHOOK_FIRST_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub webhook_first_request_timeout: Duration,

    /// How long a connection may stay open with no request in flight.
    #[arg(long, env = "COPYRATOR_WEBHOOK_IDLE_TIMEOUT", default_value = "90s", value_parser = parse_duration)]
    pub webhook_idle_timeout: Duration,

    /// Connections open at once; beyond, a connection that has answered nothing (or has been
    /// idle longest) of the address holding the most gives way, else the new one is closed.
    /// Default: 1024, or a quarter of --memory-limit at 96Ki each.
    #[arg(long, env = "COPYRATOR_WEBHOOK_MAX_CONNECTIONS")]
    pub webhook_max_connections: Option<usize>,

    /// Connections one client address may hold; beyond, one of its own gives way or the new
    /// one is closed. Default: a quarter of --webhook-max-connections's default.
    #[arg(long, env = "COPYRATOR_WEBHOOK_MAX_CONNECTIONS_PER_PEER")]
    pub webhook_max_connections_per_peer: Option<usize>,

    /// HTTP/2 streams (requests) one connection may have open at once; the API server opens
    /// another connection beyond.
    #[arg(long, env = "COPYRATOR_WEBHOOK_MAX_STREAMS", default_value_t = 64)]
    pub webhook_max_streams: u32,

    /// Worker tasks running jobs.
    #[arg(long, env = "COPYRATOR_WORKERS", default_value_t = 4)]
    pub workers: usize,

    /// OS threads running copyrator's tasks (webhooks, workers, watches) [default: one per
    /// CPU it may use, its CPU limit included]. More threads than the CPU copyrator actually
    /// gets lengthen its admission tail (SPEC §7).
    #[arg(long, env = "COPYRATOR_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// Most jobs waiting at once; beyond, jobs are dropped and a full resync is scheduled.
    #[arg(long, env = "COPYRATOR_QUEUE_CAPACITY", default_value_t = 10_000)]
    pub queue_capacity: usize,

    /// Writes in flight at once within one job (fan-out of a source to many namespaces).
    #[arg(long, env = "COPYRATOR_FANOUT_CONCURRENCY", default_value_t = 32)]
    pub fanout_concurrency: usize,

    /// Bytes of copy writes in flight at once, across all jobs (request bodies, and the objects
    /// the API server sends back): with large sources, memory is the payload plus this, however
    /// many namespaces receive a copy.
    #[arg(long, env = "COPYRATOR_FANOUT_BYTES", default_value = "16Mi",
        value_parser = sizes::parse_size_usize)]
    pub fanout_bytes: usize,

    /// Bytes of source payloads kept between jobs, each at the resourceVersion it was read
    /// at: a new namespace's copies are written without reading their sources again. A
    /// payload over an eighth of it is read when needed and dropped after; 0 keeps none.
    #[arg(long, env = "COPYRATOR_SOURCE_CACHE_BYTES", default_value = "64Mi",
        value_parser = sizes::parse_size)]
    pub source_cache_bytes: u64,

    /// How long after a new namespace's watch event copyrator waits before its first write
    /// into it (SPEC §4 item 6): the API server admits a create into a namespace its own
    /// informer has not seen yet only after a fixed 50 ms wait (its NamespaceLifecycle
    /// admission), and copyrator's watch is often faster than that informer. 0 turns it off;
    /// at most 50ms (waiting longer than the API server would is never faster).
    #[arg(long, env = "COPYRATOR_NEW_NAMESPACE_DELAY", default_value = "500us", value_parser = parse_new_namespace_delay)]
    pub new_namespace_delay: Duration,

    /// Sustained Kubernetes API writes per second (client-side limit on create, update, patch
    /// and delete; 0 = unlimited).
    #[arg(long, env = "COPYRATOR_API_QPS", default_value_t = 500.0)]
    pub api_qps: f64,

    /// Writes allowed in a burst above --api-qps.
    #[arg(long, env = "COPYRATOR_API_BURST", default_value_t = 1000)]
    pub api_burst: u32,

    /// Sustained Kubernetes API reads per second (get and list; 0 = unlimited).
    #[arg(long, env = "COPYRATOR_API_READ_QPS", default_value_t = 1000.0)]
    pub api_read_qps: f64,

    /// Reads allowed in a burst above --api-read-qps.
    #[arg(long, env = "COPYRATOR_API_READ_BURST", default_value_t = 2000)]
    pub api_read_burst: u32,

    /// Reads in flight at once.
    #[arg(long, env = "COPYRATOR_API_READ_CONCURRENCY", default_value_t = 32)]
    pub api_read_concurrency: usize,

    /// Page size of LIST calls.
    #[arg(long, env = "COPYRATOR_LIST_PAGE_SIZE", default_value_t = 500)]
    pub list_page_size: u32,

    /// Longest a connection to the API server may stay silent while copyrator waits on it (an
    /// answer's first byte, the next bytes of a body, a watch's next event); past it the
    /// connection is closed and the call fails as transient: its job is retried on a new
    /// connection, its watch resumed on one. Watches ask the API server to end them well
    /// before it, and `/livez` fails when a watch made no progress for three times it
    /// (SPEC §5, connections that go silent).
    #[arg(long, env = "COPYRATOR_API_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub api_timeout: Duration,

    /// copyrator's own username in the API server (`system:serviceaccount:NS:NAME`): the one
    /// identity that may edit or delete read-only copies (SPEC §4 item 11). Default: in-cluster,
    /// the subject of the service account token; out of cluster, unknown (read-only copies are
    /// then not enforced).
    #[arg(long, env = "COPYRATOR_OWN_USERNAME")]
    pub own_username: Option<String>,

    /// Longest a Pod CREATE waits for the copies of its namespace to be written (SPEC §10);
    /// past it the Pod is admitted anyway. Keep it below the webhook's timeoutSeconds.
    #[arg(long, env = "COPYRATOR_POD_GATE_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub pod_gate_timeout: Duration,

    /// Interval of the full resync that catches anything the webhooks missed.
    #[arg(long, env = "COPYRATOR_RESYNC_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub resync_interval: Duration,

    /// How often a resync also looks for sources with copyrator annotations but without the
    /// opt-in label (a LIST of every Secret and ConfigMap, page by page) and warns on each,
    /// once per version. 0 turns it off.
    #[arg(long, env = "COPYRATOR_UNLABELLED_SCAN_INTERVAL", default_value = "1h", value_parser = parse_duration)]
    pub unlabelled_scan_interval: Duration,

    /// How often a member cluster reads the hubs its HubLinks reach in full and converges their
    /// copies (SPEC §14); between full reads it follows each hub by watches. 0 (the default)
    /// turns copies across clusters off: no HubLink is read.
    /// Not with --namespaces: HubLinks are cluster-scoped.
    #[arg(long, env = "COPYRATOR_HUB_SYNC_INTERVAL", default_value = "0s", value_parser = parse_duration,
          conflicts_with = "namespaces")]
    pub hub_sync_interval: Duration,

    /// On a hub (SPEC §14.1): the namespace of the member clusters' ServiceAccounts
    /// (`copyrator-member-<cluster>`). Set, the leader keeps each member's Roles equal to what
    /// the CopyRules place on it, every --hub-sync-interval (10 s when that is 0). Not with
    /// --namespaces: it reads the cluster-scoped CopyRules.
    #[arg(
        long,
        env = "COPYRATOR_HUB_MEMBERS_NAMESPACE",
        conflicts_with = "namespaces"
    )]
    pub hub_members_namespace: Option<String>,

    #[command(flatten)]
    pub policy: PolicyArgs,

    /// The default CAs of bundles (`spec.sources: [{defaultCAs: true}]`, SPEC §3.2): a PEM
    /// file holding certificates and nothing else, read once at start, instead of Mozilla's
    /// roots from the webpki-root-certs package copyrator is built with (e.g. Debian's
    /// /etc/ssl/certs/ca-certificates.crt, mounted from a ConfigMap).
    #[arg(long, env = "COPYRATOR_DEFAULT_CAS_FILE")]
    pub default_cas_file: Option<PathBuf>,

    /// Elect one replica (Lease) to run the reconciler. Off: this process always runs it.
    #[arg(long, env = "COPYRATOR_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// How long a leader's Lease is valid without renewal; a dead leader is replaced after it.
    #[arg(long, env = "COPYRATOR_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Identity in the Lease and in Events (default: $POD_NAME or the host name, plus a suffix).
    #[arg(long, env = "COPYRATOR_IDENTITY")]
    pub identity: Option<String>,

    /// Log format.
    #[arg(long, env = "COPYRATOR_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Log level (error, warn, info, debug, trace) or a full filter; RUST_LOG overrides it.
    #[arg(long, env = "COPYRATOR_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Output directory (ca.crt, tls.crt, tls.key).
    #[arg(long, env = "COPYRATOR_OUT", default_value = "certs")]
    pub out: PathBuf,

    /// DNS name in the serving certificate (repeatable).
    #[arg(long = "dns")]
    pub dns: Vec<String>,

    /// IP address in the serving certificate (repeatable).
    #[arg(long = "ip")]
    pub ip: Vec<IpAddr>,

    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

#[derive(Debug, Subcommand)]
pub enum ManifestsCommand {
    /// The CopyRule CustomResourceDefinition.
    Crd,
    /// The NamespacedCopyRule CustomResourceDefinition: a team's rule in its own namespace
    /// (SPEC §2.2).
    NamespacedCrd,
    /// The HubLink CustomResourceDefinition, for a member cluster of copies across clusters
    /// (SPEC §14).
    HubLinkCrd,
    /// The ValidatingWebhookConfiguration for the admission endpoints.
    Webhooks(WebhooksArgs),
    /// Joining a member cluster to a hub (SPEC §14): `--side hub` (the member's identity on
    /// the hub) and `--side member` (its HubLink and token), one `kubectl apply` each.
    HubJoin(HubJoinArgs),
}

#[derive(Debug, Args)]
pub struct HubJoinArgs {
    /// Which side's manifests to print.
    #[arg(long, value_enum)]
    pub side: HubJoinSide,

    /// The member's name on the hub, as hub CopyRules name it in `spec.clusters.names`.
    #[arg(long)]
    pub cluster: String,

    /// The hub's namespace of members' identities (its `serve --hub-members-namespace`).
    #[arg(long, default_value = "copyrator-members")]
    pub members_namespace: String,

    /// The HubLink's name on the member.
    #[arg(long, default_value = "hub")]
    pub link: String,

    /// copyrator's own namespace on the member, where the token's Secret goes (the chart's
    /// release namespace; the docs install into copyrator-system).
    #[arg(long, default_value = "copyrator-system")]
    pub member_namespace: String,

    /// Member side: the hub API server's URL (https://HOST:PORT).
    #[arg(long)]
    pub server: Option<String>,

    /// Member side: PEM file of the CA that signed the hub API server's certificate.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,

    /// Member side: a file holding the member's token on the hub (the hub side's Secret's
    /// `data.token`, decoded).
    #[arg(long)]
    pub token_file: Option<PathBuf>,

    /// Member side, the ceiling: hub namespaces whose sources the member accepts
    /// (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub source_namespaces: Vec<String>,

    /// Member side, the ceiling: those of them whose sources need no namespace's consent
    /// (comma-separated; default none).
    #[arg(long, value_delimiter = ',')]
    pub trusted_source_namespaces: Vec<String>,

    /// Member side, the ceiling: the labels (KEY=VALUE, comma-separated, all required) of the
    /// member namespaces that may receive.
    #[arg(long, value_delimiter = ',', value_parser = parse_label)]
    pub namespace_selector: Vec<(String, String)>,

    /// Member side: the hub namespace of this cluster's ClusterProfile (the hub's
    /// --hub-members-namespace, where its copyrator reads them). Set, hub CopyRules'
    /// `spec.clusters.selector` can place on this cluster by the profile's labels.
    #[arg(long)]
    pub cluster_profile_namespace: Option<String>,
}

/// Which side of a hub join `manifests hub-join` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HubJoinSide {
    Hub,
    Member,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["url", "service"])))]
pub struct WebhooksArgs {
    /// Base URL of the webhook server (out-of-cluster runs), e.g. https://127.0.0.1:8443. The
    /// API server calls webhooks over HTTPS only.
    #[arg(long, value_parser = parse_webhook_url)]
    pub url: Option<String>,

    /// In-cluster Service as NAMESPACE/NAME (port 443).
    #[arg(long)]
    pub service: Option<String>,

    /// PEM file of the CA that signed the webhook server's certificate. Leave it out when
    /// copyrator issues its own (`serve --tls-secret`): it then sets the caBundle itself.
    #[arg(long)]
    pub ca_bundle: Option<PathBuf>,

    /// Name of the ValidatingWebhookConfiguration.
    #[arg(long, default_value = "copyrator")]
    pub name: String,

    /// Namespaces whose objects are never sent to the webhooks (comma-separated); the
    /// service's own namespace is always added.
    #[arg(long, value_delimiter = ',', default_value = "kube-system")]
    pub exclude_namespaces: Vec<String>,

    /// Webhook timeout in seconds (1-5).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=5))]
    pub timeout_seconds: i32,

    /// Kinds copied besides Secret and ConfigMap, as `serve --copy-kinds` names them
    /// (`Kind` or `Kind.group`): the sources and read-only webhooks cover them too. No
    /// cluster is asked: the resource (plural) is derived from the kind as Kubernetes does
    /// for regular names; give it after `=` when it is not (`Octopus.example.com=octopi`).
    #[arg(long, value_delimiter = ',')]
    pub copy_kinds: Vec<String>,
}

/// `--url` of `manifests webhooks`: the API server calls webhooks over HTTPS only, so an
/// `http://` URL would register webhooks that every call fails (and fail open).
fn parse_webhook_url(s: &str) -> Result<String, String> {
    let url = s.trim();
    match url.split_once("://") {
        Some(("https", rest)) if !rest.is_empty() => Ok(url.to_string()),
        Some((scheme, _)) => Err(format!(
            "{url:?} is not an https:// URL: the API server calls webhooks over HTTPS only \
             ({scheme}:// would make every call fail); serve TLS (copyrator certs) and give https://"
        )),
        None => Err(format!("{url:?} is not a URL: give https://HOST:PORT")),
    }
}

/// One entry of `--copy-kinds`, checked before anything starts (a kind without its group
/// would match nothing; see `cluster::kinds::parse`).
fn parse_copy_kind(s: &str) -> Result<String, String> {
    crate::cluster::kinds::parse(&[s.to_string()])
        .map(|_| s.trim().to_string())
        .map_err(|e| e.trim_start_matches("--copy-kinds: ").to_string())
}

/// One namespace of `-n`, as kubectl takes it: a name, never a list.
fn parse_one_namespace(s: &str) -> Result<String, String> {
    let name = s.trim();
    if name.contains(',') {
        return Err(format!(
            "{name:?}: -n takes one namespace, as kubectl's does; repeat it (-n a -n b)"
        ));
    }
    if crate::selector::is_dns_label(name) {
        Ok(name.to_string())
    } else {
        Err(format!("{name:?} is not a namespace name"))
    }
}

fn parse_namespace_patterns(s: &str) -> Result<NamespacePatterns, String> {
    NamespacePatterns::parse(s)
}

/// `--new-namespace-delay`: a duration of at most the API server's own 50 ms wait.
fn parse_new_namespace_delay(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > Duration::from_millis(50) {
        return Err(format!(
            "{s:?} is longer than the API server's own 50 ms wait for a new namespace: at most 50ms"
        ));
    }
    Ok(d)
}

/// Parses a duration as Kubernetes flags spell them (`500ms`, `2s`, `1m30s`, `1h`, also
/// `1m 30s`), or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}; e.g. 500ms, 2s, 1m30s, 1h)"))
}

/// One name of `--namespaces`: a namespace's name (a DNS label); patterns would need a list of
/// every namespace, which a namespace-scoped install may not make.
fn parse_listed_namespace(name: &str) -> Result<String, String> {
    let name = name.trim();
    if crate::selector::is_dns_label(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{name:?} is not a namespace name (--namespaces takes names, not patterns)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h2m3s").unwrap(), Duration::from_secs(3723));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    /// `copyrator serve` with `flags`, parsed.
    fn serve(flags: &[&str]) -> Result<ServeArgs, clap::Error> {
        let argv = ["copyrator", "serve"].iter().chain(flags);
        Cli::try_parse_from(argv).map(|c| match c.command {
            Command::Serve(args) => *args,
            _ => unreachable!("parsed as serve"),
        })
    }

    #[test]
    fn namespaces_are_names_never_patterns() {
        let parse = |v: &str| serve(&["--namespaces", v]).map(|a| a.namespaces);
        assert_eq!(parse("team-a,team-b").unwrap(), ["team-a", "team-b"]);
        assert!(serve(&[]).unwrap().namespaces.is_empty(), "cluster-wide");
        // A pattern would need a list of every namespace, which this mode may not make.
        for bad in ["team-*", "*", "Team-A", "a/b"] {
            let err = parse(bad).expect_err(bad).to_string();
            assert!(err.contains("not a namespace name"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_namespace_scoped_install_takes_no_hub_flag() {
        // HubLinks and CopyRules are cluster-scoped: §13 makes no cluster-scoped call.
        for hub in [
            ["--hub-sync-interval", "10s"],
            ["--hub-members-namespace", "members"],
        ] {
            let err = serve(&["--namespaces", "team-a", hub[0], hub[1]])
                .expect_err(hub[0])
                .to_string();
            assert!(err.contains("cannot be used with"), "{err}");
            assert!(serve(&hub).is_ok(), "{}: cluster-wide it is fine", hub[0]);
        }
    }

    #[test]
    fn threads_are_tokios_default_or_1_to_1024() {
        let parse = |v: &[&str]| serve(v).map(|a| a.threads);
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(parse(&["--threads", "1"]).unwrap(), Some(1));
        assert_eq!(parse(&["--threads", "1024"]).unwrap(), Some(1024));
        for bad in ["0", "1025", "-1", "many"] {
            assert!(parse(&["--threads", bad]).is_err(), "{bad} refused");
        }
    }

    #[test]
    fn the_new_namespace_delay_is_at_most_the_api_servers_own_wait() {
        let parse = |v: &str| serve(&["--new-namespace-delay", v]).map(|a| a.new_namespace_delay);
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("2ms").unwrap(), Duration::from_millis(2));
        assert_eq!(parse("50ms").unwrap(), Duration::from_millis(50));
        assert!(parse("51ms").is_err());
        assert!(
            parse("584542046090y").is_err(),
            "never overflows an Instant"
        );
    }

    #[test]
    fn serve_defaults() {
        let args = serve(&[]).unwrap();
        assert_eq!(args.webhook_addr.port(), 8443);
        assert_eq!(args.http_addr.port(), 9090);
        assert_eq!(
            args.policy.exclude_namespaces,
            ["kube-system", "kube-node-lease"]
        );
        assert_eq!(args.max_body_bytes, 6 * 1024 * 1024);
        assert_eq!(args.new_namespace_delay, Duration::from_micros(500));
        assert!(args.leader_election);
        assert!(
            args.policy.trusted_namespaces.is_empty(),
            "no namespace is trusted unless told"
        );
        assert_eq!(args.policy.policy().caps, SourceCaps::default());
    }

    /// `serve` and `explain` take the same policy flags and build the same policy from them.
    #[test]
    fn serve_and_explain_build_one_policy_from_one_set_of_flags() {
        let flags = [
            "--trusted-namespaces=platform",
            "--exclude-namespaces=a,b",
            "--max-sources-per-namespace=7",
            "--max-source-metadata-bytes=99",
        ];
        let serve = serve(&flags).unwrap().policy.policy();
        let explain = Cli::try_parse_from(
            ["copyrator", "explain", "namespace", "x"]
                .into_iter()
                .chain(flags),
        )
        .unwrap();
        let Command::Explain(ExplainCommand::Namespace { options, .. }) = explain.command else {
            panic!("explain namespace");
        };
        assert_eq!(options.policy.policy(), serve);
        assert_eq!(
            serve.caps,
            SourceCaps {
                per_namespace: 7,
                metadata_bytes: 99
            }
        );
        assert!(serve.is_excluded("b") && serve.trust.is_trusted("platform"));
    }

    /// `explain` tells the policy flags given (even empty) from those left to defaults.
    #[test]
    fn explain_knows_which_policy_flags_were_given() {
        let explicit = |flags: &[&str]| {
            let argv = ["copyrator", "explain", "namespace", "x"]
                .iter()
                .chain(flags);
            ExplicitPolicy::from_matches(&Cli::command().try_get_matches_from(argv).unwrap())
        };
        assert_eq!(explicit(&[]), ExplicitPolicy::default());
        assert_eq!(
            explicit(&["--trusted-namespaces", ""]),
            ExplicitPolicy {
                trusted_namespaces: true,
                ..Default::default()
            }
        );
        assert_eq!(
            explicit(&["--exclude-namespaces=a", "--max-source-metadata-bytes=9"]),
            ExplicitPolicy {
                exclude_namespaces: true,
                max_source_metadata_bytes: true,
                ..Default::default()
            }
        );
        assert_eq!(
            ExplicitPolicy::from_matches(
                &Cli::command()
                    .try_get_matches_from(["copyrator", "manifests", "crd"])
                    .unwrap()
            ),
            ExplicitPolicy::default(),
            "a command without policy flags"
        );
    }

    #[test]
    fn plan_takes_files_and_explains_policy_flags() {
        assert!(
            Cli::try_parse_from(["copyrator", "plan"]).is_err(),
            "-f is required"
        );
        let argv = [
            "copyrator",
            "plan",
            "-f",
            "rule.yaml",
            "-f",
            "-",
            "-n",
            "team-a",
            "-o",
            "json",
            "--trusted-namespaces=platform",
        ];
        let Command::Plan(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("plan");
        };
        assert_eq!(args.files, [PathBuf::from("rule.yaml"), PathBuf::from("-")]);
        assert_eq!(args.namespace.as_deref(), Some("team-a"));
        assert_eq!(args.options.output, ExplainOutput::Json);
        let explicit =
            ExplicitPolicy::from_matches(&Cli::command().try_get_matches_from(argv).unwrap());
        assert!(explicit.trusted_namespaces && !explicit.exclude_namespaces);
    }

    #[test]
    fn trusted_namespaces_are_validated() {
        let parse =
            |v: &str| serve(&["--trusted-namespaces", v]).map(|a| a.policy.trusted_namespaces);
        let p = parse("platform,infra-*").unwrap();
        assert!(p.matches("platform") && p.matches("infra-x") && !p.matches("tenant"));
        assert!(parse("*").unwrap().matches("anything"));
        assert!(parse("Not Valid").is_err());
    }

    #[test]
    fn webhooks_needs_url_or_service() {
        assert!(
            Cli::try_parse_from([
                "copyrator",
                "manifests",
                "webhooks",
                "--ca-bundle",
                "ca.crt"
            ])
            .is_err()
        );
        assert!(
            Cli::try_parse_from([
                "copyrator",
                "manifests",
                "webhooks",
                "--ca-bundle",
                "ca.crt",
                "--url",
                "https://x",
                "--service",
                "a/b"
            ])
            .is_err()
        );
        assert!(
            Cli::try_parse_from([
                "copyrator",
                "manifests",
                "webhooks",
                "--ca-bundle",
                "ca.crt",
                "--service",
                "a/b"
            ])
            .is_ok()
        );
    }
}
