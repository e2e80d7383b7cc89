//! `copyrator serve`: wires the pieces together (SPEC §5) and runs them until told to stop.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

use crate::{
    admission::{self, AdmissionState, Limits, advice::Advisor},
    certs::{
        issue::SubjectNames,
        manager::{Manager, ManagerConfig},
        rotation::Settings,
        serving::{CertFiles, ClientCa, ReloadingCert},
    },
    cli::ServeArgs,
    cluster::{ApiLimits, Cluster, progress::WatchProgress, ratelimit::RateLimiter},
    freshness::dispatch::{Dispatcher, Work},
    gate::PodGate,
    listener::{self, ConnectionLimits, Peers, Readiness},
    metrics::Metrics,
    pipeline::{
        leader::{self, ElectionConfig},
        reconcile, worker,
    },
    queue::WorkQueue,
    report::events::Events,
    sync::context::{Context, Periodic, RESYNC_CHUNK, SyncSettings},
};

/// A running copyrator.
pub struct Running {
    pub webhook_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    pub context: Arc<Context>,
    shutdown: watch::Sender<bool>,
    /// Tasks that watch the shutdown signal and finish by themselves.
    tasks: Vec<JoinHandle<()>>,
    /// Tasks that run for the life of the process; aborted at shutdown.
    background: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting work, lets the workers finish what is queued (bounded), releases the
    /// Lease if held.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.context.queue.close();
        let drain = async {
            for w in self.workers {
                let _ = w.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), drain)
            .await
            .is_err()
        {
            tracing::warn!("workers did not finish in time; stopping anyway");
        }
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        for t in self.background {
            t.abort();
        }
    }
}

/// What the features started spawn: tasks that watch `shutdown` and finish by themselves,
/// and tasks that run for the life of the process.
struct Spawned {
    shutdown: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
}

impl Spawned {
    fn task(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    fn background(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.background.push(tokio::spawn(task));
    }
}

/// Starts everything; returns once the listeners are bound. One line per feature: each
/// starts in its own function.
pub async fn start(args: &ServeArgs) -> anyhow::Result<Running> {
    let metrics = Arc::new(Metrics::new());
    let threads = tokio::runtime::Handle::current().metrics().num_workers();
    metrics.worker_threads.set(threads as i64);
    let (client, unresolved) = connect(args, &metrics).await?;
    let cert_manager = cert_manager_config(args)?;
    let cert = serving_cert(args, cert_manager.is_some())?;
    let queue = WorkQueue::new(args.queue_capacity);
    let cluster = cluster(args, &client, &metrics, unresolved.len()).await?;
    let install = Install::of(args, &metrics);
    let (ctx, leading_tx) = context(args, cluster, &client, &install, &metrics, &queue)?;
    let webhook_listener = bind(args.webhook_addr, "webhook").await?;
    let http_listener = bind(args.http_addr, "HTTP").await?;
    let (webhook_addr, http_addr) = (webhook_listener.local_addr()?, http_listener.local_addr()?);

    let (shutdown_tx, shutdown) = watch::channel(false);
    let mut spawned = Spawned {
        shutdown,
        tasks: Vec::new(),
        background: Vec::new(),
    };
    let client_ca = start_certificates(args, &client, cert_manager, &cert, &metrics, &mut spawned)?;
    start_webhooks(
        args,
        &ctx,
        cert.server_config(client_ca),
        webhook_listener,
        &mut spawned,
    );
    let watch_progress = Arc::new(WatchProgress::new(args.api_timeout, Arc::clone(&metrics)));
    let readiness = start_http(
        &cert,
        &watch_progress,
        &metrics,
        http_listener,
        &mut spawned,
    );
    let workers = worker::spawn(Arc::clone(&ctx), args.workers);
    // Early reads for admitted namespace changes (src/freshness/prefetch.rs).
    spawned.background(crate::sync::prefetch_namespaces(Arc::clone(&ctx)));
    let (dispatcher, rules_changed) = start_watches(
        args,
        &ctx,
        unresolved,
        &install,
        &watch_progress,
        &mut spawned,
    )
    .await;
    let (observed, resync_requests) =
        start_leadership(args, &client, &ctx, &install, leading_tx, &mut spawned);
    start_hub(args, &ctx, &watch_progress, &mut spawned);
    start_resyncs(
        args,
        &ctx,
        dispatcher,
        rules_changed,
        resync_requests,
        watch_progress,
        &mut spawned,
    );
    let leading = ctx.leading.clone();
    spawned.background(track_readiness(
        Arc::clone(&ctx),
        readiness,
        leading,
        observed,
    ));

    let identity = &install.identity;
    tracing::info!(%webhook_addr, %http_addr, identity, threads, "copyrator serving");
    Ok(Running {
        webhook_addr,
        http_addr,
        metrics,
        context: ctx,
        shutdown: shutdown_tx,
        tasks: spawned.tasks,
        background: spawned.background,
        workers,
    })
}

/// The API client, and the kinds `--copy-kinds` names that are not served yet, the others
/// registered before anything reads the registry (those are looked for again, `watch_kinds`).
async fn connect(
    args: &ServeArgs,
    metrics: &Metrics,
) -> anyhow::Result<(kube::Client, Vec<crate::cluster::kinds::KindName>)> {
    // Watches ask the API server to end them after two thirds of it (whole seconds).
    if args.api_timeout < Duration::from_secs(2) {
        anyhow::bail!("--api-timeout must be at least 2s");
    }
    let client = crate::cluster::client::counting_client(
        args.kubeconfig.as_deref(),
        args.api_timeout,
        metrics,
    )
    .await?;
    let kind_names =
        crate::cluster::kinds::parse(&args.policy.copy_kinds).map_err(anyhow::Error::msg)?;
    let unresolved = register_kinds(&client, kind_names).await?;
    Ok((client, unresolved))
}

/// The webhook's serving certificate: from its files, or pending until copyrator's own
/// certificate manager (`managed`) issues it.
fn serving_cert(args: &ServeArgs, managed: bool) -> anyhow::Result<Arc<ReloadingCert>> {
    if managed {
        return Ok(ReloadingCert::pending());
    }
    ReloadingCert::load(CertFiles {
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
    })
    .context("loading the webhook serving certificate (see `copyrator certs`)")
}

/// The cluster copyrator reads and writes, scoped to `--namespaces` when listed.
async fn cluster(
    args: &ServeArgs,
    client: &kube::Client,
    metrics: &Arc<Metrics>,
    unresolved_kinds: usize,
) -> anyhow::Result<Cluster> {
    let cluster = Cluster::new(
        client.clone(),
        Arc::clone(metrics),
        ApiLimits {
            writes: RateLimiter::new(args.api_qps, args.api_burst),
            reads: RateLimiter::new(args.api_read_qps, args.api_read_burst),
            read_concurrency: args.api_read_concurrency,
        },
        args.list_page_size,
    )
    .with_api_timeout(args.api_timeout);
    if args.namespaces.is_empty() {
        return Ok(cluster);
    }
    // A watch per feed and namespace: on HTTP/2 lanes, not a connection each (SPEC §13).
    let watches =
        args.namespaces.len() * (crate::freshness::feed::Feed::all().len() + 2 * unresolved_kinds);
    let lanes = crate::cluster::client::watch_lanes(
        args.kubeconfig.as_deref(),
        args.api_timeout,
        metrics,
        watches.div_ceil(crate::cluster::client::WATCHES_PER_LANE),
    )
    .await?;
    Ok(cluster
        .scoped_to(args.namespaces.iter().cloned())
        .with_watch_lanes(lanes))
}

/// This process, and the install it belongs to, named by its Lease: Events and metrics say
/// it, so that several installs side by side are told apart (SPEC §13).
struct Install {
    identity: String,
    lease_namespace: String,
    /// `<lease namespace>/<lease name>`.
    name: String,
}

impl Install {
    fn of(args: &ServeArgs, metrics: &Metrics) -> Self {
        let identity = args
            .identity
            .clone()
            .unwrap_or_else(leader::default_identity);
        let lease_namespace = args
            .lease
            .lease_namespace
            .clone()
            .unwrap_or_else(leader::default_lease_namespace);
        let name = format!("{lease_namespace}/{}", args.lease.lease_name);
        metrics
            .install
            .get_or_create(&crate::metrics::InstallLabels {
                install: name.clone(),
                scope: if args.namespaces.is_empty() {
                    "cluster"
                } else {
                    "namespaces"
                },
            })
            .set(1);
        Self {
            identity,
            lease_namespace,
            name,
        }
    }
}

/// What the workers, webhooks and watches share, and the sender saying whether this replica
/// leads.
fn context(
    args: &ServeArgs,
    cluster: Cluster,
    client: &kube::Client,
    install: &Install,
    metrics: &Arc<Metrics>,
    queue: &Arc<WorkQueue>,
) -> anyhow::Result<(Arc<Context>, watch::Sender<bool>)> {
    let events = Events::new(
        client.clone(),
        format!("{}/{}", install.name, install.identity),
        Arc::clone(metrics),
    );
    let mut policy = args.policy.policy();
    policy.own_namespace = leader::own_namespace(args.lease.lease_namespace.as_deref());
    if let Some(file) = &args.default_cas_file {
        policy.default_cas = Some(crate::default_cas::load(Some(file))?);
    }
    let settings = SyncSettings {
        policy,
        fanout_concurrency: args.fanout_concurrency,
        fanout_bytes: args.fanout_bytes,
        new_namespace_delay: args.new_namespace_delay,
        resync_chunk: RESYNC_CHUNK,
        source_cache_bytes: args.source_cache_bytes,
    };
    let mut ctx = Context::new(
        cluster,
        events,
        Arc::clone(metrics),
        Arc::clone(queue),
        settings,
    );
    ctx.unlabelled_scan = Periodic::new(args.unlabelled_scan_interval);
    let (leading_tx, leading_rx) = watch::channel(false);
    ctx.leading = leading_rx;
    Ok((Arc::new(ctx), leading_tx))
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} address {addr}"))
}

/// The serving certificate reloaded from its files, or issued and rotated by copyrator
/// itself; returns the client CA that verifies the API server (`--client-ca`).
fn start_certificates(
    args: &ServeArgs,
    client: &kube::Client,
    cert_manager: Option<ManagerConfig>,
    cert: &Arc<ReloadingCert>,
    metrics: &Arc<Metrics>,
    spawned: &mut Spawned,
) -> anyhow::Result<Option<Arc<ClientCa>>> {
    let client_ca = args
        .client_ca
        .clone()
        .map(ClientCa::load)
        .transpose()
        .context("loading the client CA (--client-ca)")?;
    spawned.background(Arc::clone(cert).watch(
        client_ca.clone(),
        args.tls_reload_interval,
        Arc::clone(metrics),
    ));
    if let Some(config) = cert_manager {
        let manager = Manager::new(
            client.clone(),
            config,
            Arc::clone(cert),
            Arc::clone(metrics),
        );
        spawned.task(manager.run(spawned.shutdown.clone()));
    }
    Ok(client_ca)
}

/// The admission webhooks (SPEC §6.1), served over TLS with `tls`.
fn start_webhooks(
    args: &ServeArgs,
    ctx: &Arc<Context>,
    tls: Arc<rustls::ServerConfig>,
    listener: TcpListener,
    spawned: &mut Spawned,
) {
    let own_username = args
        .own_username
        .clone()
        .or_else(admission::read_only::default_own_username);
    match &own_username {
        Some(user) => tracing::info!(%user, "only this user may change read-only copies"),
        None => tracing::warn!(
            "copyrator's own username is unknown (--own-username): read-only copies are not enforced"
        ),
    }
    let metrics = &ctx.metrics;
    let peers = Peers::new(args.peer_limits(), Arc::clone(metrics));
    let policy = ctx.settings.policy.clone();
    let admission = admission::router(AdmissionState {
        queue: Arc::clone(&ctx.queue),
        metrics: Arc::clone(metrics),
        policy: Arc::new(policy.clone()),
        advisor: Some(Advisor::new(ctx.cluster.clone(), policy)),
        waiters: Arc::clone(&ctx.waiters),
        gate: Some(PodGate::new(Arc::clone(ctx), args.pod_gate_timeout)),
        own_username: own_username.map(Arc::from),
        namespaces: Some(ctx.cluster.clone()),
        api_server_known: args.client_ca.is_some() || !args.api_server_cidrs.is_empty(),
        limits: Limits::new(
            args.max_body_bytes,
            args.webhook_request_timeout,
            Arc::clone(&peers),
        ),
    });
    spawned.task(listener::serve_tls(
        listener,
        tls,
        admission,
        ConnectionLimits {
            first_request_timeout: args.webhook_first_request_timeout,
            idle_timeout: args.webhook_idle_timeout,
            max_streams: args.webhook_max_streams,
            api_server: listener::ApiServerAddresses(args.api_server_cidrs.clone().into()),
        },
        peers,
        Arc::clone(metrics),
        spawned.shutdown.clone(),
    ));
}

/// Metrics and health over plain HTTP; returns what readiness is made of.
fn start_http(
    cert: &Arc<ReloadingCert>,
    watch_progress: &Arc<WatchProgress>,
    metrics: &Arc<Metrics>,
    listener: TcpListener,
    spawned: &mut Spawned,
) -> Arc<Readiness> {
    let readiness = Arc::new(Readiness {
        cert: Arc::clone(cert),
        synced: Default::default(),
    });
    let http = listener::http_router(
        Arc::clone(metrics),
        Arc::clone(&readiness),
        Arc::clone(watch_progress),
    );
    let mut shutdown = spawned.shutdown.clone();
    spawned.task(async move {
        let serve = axum::serve(listener, http).with_graceful_shutdown(async move {
            let _ = shutdown.changed().await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    readiness
}

/// Watches (I/O only) hand every event to the dispatcher (src/freshness/dispatch.rs): it
/// keeps the indexes, ends waits for admitted changes without polling, and queues copies
/// deleted or edited by someone else (on the leader). Returns the dispatcher, and what it
/// notifies when CopyRules change.
async fn start_watches(
    args: &ServeArgs,
    ctx: &Arc<Context>,
    unresolved: Vec<crate::cluster::kinds::KindName>,
    install: &Install,
    watch_progress: &Arc<WatchProgress>,
    spawned: &mut Spawned,
) -> (Arc<Dispatcher>, Arc<tokio::sync::Notify>) {
    let metrics = &ctx.metrics;
    let rules_changed = Arc::new(tokio::sync::Notify::new());
    let dispatcher = Arc::new(Dispatcher::new(
        Arc::clone(ctx.cluster.indexes()),
        Arc::new(ctx.settings.policy.clone()),
        Arc::clone(&ctx.waiters),
        Arc::clone(&ctx.ready),
        Work {
            queue: Arc::clone(&ctx.queue),
            leading: ctx.leading.clone(),
        },
        Arc::clone(&rules_changed),
        Arc::clone(metrics),
    ));
    // NamespacedCopyRules are an administrator's optional extra: found once, here.
    let namespaced_rules = ctx.cluster.find_namespaced_rules().await;
    spawned.tasks.extend(crate::cluster::watch::spawn(
        &ctx.cluster,
        &dispatcher,
        metrics,
        watch_progress,
        &spawned.shutdown,
        namespaced_rules,
    ));
    if ctx.cluster.scope().listed().is_some() {
        spawned.background(show_not_bound(
            ctx.cluster.scope().not_bound(),
            Arc::clone(metrics),
            ctx.events.clone(),
            crate::report::events::Regarding::Install {
                namespace: install.lease_namespace.clone(),
                lease: args.lease.lease_name.clone(),
            },
            ctx.leading.clone(),
        ));
    }
    spawned.background(watch_kinds(
        Arc::clone(ctx),
        unresolved,
        args.policy.kind_retry_interval,
        Arc::clone(&dispatcher),
        Arc::clone(watch_progress),
        spawned.shutdown.clone(),
    ));
    (dispatcher, rules_changed)
}

/// The Lease (with `--leader-election`), or this replica leading alone. Returns whether this
/// replica has seen a leader's Lease, and the `copyrator.io/resync` requests the leader takes
/// from it, for the reconciler.
fn start_leadership(
    args: &ServeArgs,
    client: &kube::Client,
    ctx: &Arc<Context>,
    install: &Install,
    leading: watch::Sender<bool>,
    spawned: &mut Spawned,
) -> (watch::Receiver<bool>, watch::Receiver<String>) {
    let (observed_tx, observed_rx) = watch::channel(false);
    let (resync_requests_tx, resync_requests_rx) = watch::channel(String::new());
    let resync_requests_tx = Arc::new(resync_requests_tx);
    if !args.leader_election {
        leading.send_replace(true);
        ctx.metrics.leader.set(1);
        // Keep the senders alive for the life of the process.
        spawned.background(async move {
            let _keep = (leading, observed_tx, resync_requests_tx);
            std::future::pending::<()>().await
        });
        return (observed_rx, resync_requests_rx);
    }
    let scope = ctx.cluster.scope();
    let config = ElectionConfig {
        namespace: install.lease_namespace.clone(),
        name: args.lease.lease_name.clone(),
        identity: install.identity.clone(),
        lease_duration: args.lease_duration,
        published: {
            use crate::pipeline::published;
            let mut p = published::policy_annotations(&ctx.settings.policy);
            if let Some(listed) = scope.listed() {
                p.insert(
                    published::LISTED_NAMESPACES.into(),
                    published::joined(listed),
                );
            }
            p
        },
        not_bound: scope.listed().map(|_| scope.not_bound()),
        resync_requests: Some(resync_requests_tx),
    };
    spawned.task(leader::run(
        client.clone(),
        config,
        leading,
        observed_tx,
        ctx.resyncs.subscribe(),
        Arc::clone(&ctx.metrics),
        spawned.shutdown.clone(),
    ));
    (observed_rx, resync_requests_rx)
}

/// Copies across clusters: the member's side with `--hub-sync-interval`
/// (src/sync/hub/mod.rs), the hub's side with `--hub-members-namespace`
/// (src/sync/hub/members.rs).
fn start_hub(
    args: &ServeArgs,
    ctx: &Arc<Context>,
    watch_progress: &Arc<WatchProgress>,
    spawned: &mut Spawned,
) {
    if !args.hub_sync_interval.is_zero() {
        spawned.background(crate::sync::hub::run(
            Arc::clone(ctx),
            args.hub_sync_interval,
            Arc::clone(watch_progress),
            spawned.shutdown.clone(),
        ));
    }
    if let Some(members) = &args.hub_members_namespace {
        let every = match args.hub_sync_interval.is_zero() {
            true => Duration::from_secs(10),
            false => args.hub_sync_interval,
        };
        spawned.background(crate::sync::hub::run_hub(
            Arc::clone(ctx),
            every,
            members.clone(),
            spawned.shutdown.clone(),
        ));
    }
}

/// What queues work besides the watches: the reconciler's resyncs, CopyRule source
/// selectors' watches (on the leader), and the scan for sources not opted in.
fn start_resyncs(
    args: &ServeArgs,
    ctx: &Arc<Context>,
    dispatcher: Arc<Dispatcher>,
    rules_changed: Arc<tokio::sync::Notify>,
    resync_requests: watch::Receiver<String>,
    watch_progress: Arc<WatchProgress>,
    spawned: &mut Spawned,
) {
    let shutdown = spawned.shutdown.clone();
    spawned.task(reconcile::run(
        Arc::clone(ctx),
        args.resync_interval,
        ctx.leading.clone(),
        resync_requests,
        shutdown.clone(),
    ));
    // CopyRule source selectors, watched by the leader (src/cluster/selectors.rs); their
    // events go to the dispatcher like every other watch's.
    spawned.task(crate::cluster::selectors::run(
        ctx.cluster.clone(),
        dispatcher,
        Arc::clone(&ctx.metrics),
        watch_progress,
        ctx.settings.policy.clone(),
        ctx.leading.clone(),
        rules_changed,
        shutdown.clone(),
    ));
    // Sources not opted in, looked for after resyncs (src/sync/unlabelled.rs).
    spawned.background(crate::sync::unlabelled::run(Arc::clone(ctx), shutdown));
}

/// Resolves and registers the kinds `--copy-kinds` names; returns those not served yet. A
/// kind that can never be copied (cluster-scoped, or without the verbs a copy needs) stops
/// the start: the operator asked for something copyrator cannot do.
async fn register_kinds(
    client: &kube::Client,
    names: Vec<crate::cluster::kinds::KindName>,
) -> anyhow::Result<Vec<crate::cluster::kinds::KindName>> {
    use crate::cluster::kinds::{KindError, resolve};
    let mut unresolved = Vec::new();
    for name in names {
        match resolve(client, &name).await {
            Ok(kind) => {
                tracing::info!(kind = %kind.name(), version = kind.version(), "copying kind")
            }
            Err(KindError::NotCopyable(why)) => anyhow::bail!("--copy-kinds: {why}"),
            Err(e) => {
                tracing::warn!(error = %e, "kind not served yet; looked for again (--kind-retry-interval)");
                unresolved.push(name);
            }
        }
    }
    Ok(unresolved)
}

/// Looks for the kinds not served yet, and for whether registered kinds are still served,
/// `retry`. A kind found starts its watches and a resync (its CopyRules were
/// invalid until now); one gone makes its CopyRules report it.
async fn watch_kinds(
    ctx: Arc<Context>,
    mut unresolved: Vec<crate::cluster::kinds::KindName>,
    retry: Duration,
    dispatcher: Arc<Dispatcher>,
    progress: Arc<WatchProgress>,
    mut shutdown: watch::Receiver<bool>,
) {
    use crate::{
        cluster::kinds::{KindError, resolve, served},
        freshness::feed::Feed,
        model::Kind,
        queue::{
            enqueue,
            job::{Job, JobKey, Trigger},
        },
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = shutdown.changed() => return,
        }
        let client = ctx.cluster.client();
        let mut changed = false;
        let mut still = Vec::new();
        for name in unresolved.drain(..) {
            match resolve(client, &name).await {
                Ok(kind) => {
                    tracing::info!(kind = %kind.name(), "kind now served: copying it");
                    for feed in [Feed::Sources(kind), Feed::Copies(kind)] {
                        crate::cluster::watch::spawn_feed(
                            &ctx.cluster,
                            &dispatcher,
                            &ctx.metrics,
                            &progress,
                            &shutdown,
                            feed,
                        );
                    }
                    changed = true;
                }
                Err(KindError::NotCopyable(why)) => {
                    tracing::error!(%why, "--copy-kinds names a kind copyrator cannot copy")
                }
                Err(_) => still.push(name),
            }
        }
        unresolved = still;
        for kind in Kind::registered()
            .into_iter()
            .filter(|k| !k.is_consentable())
        {
            if let Ok(now) = served(client, kind).await
                && now != kind.is_served()
            {
                tracing::warn!(kind = %kind.name(), served = now, "kind served or gone");
                kind.set_served(now);
                changed = true;
            }
        }
        if changed {
            enqueue(
                &ctx.queue,
                &ctx.metrics,
                Job::new(JobKey::Resync, Trigger::Reconciler),
            );
        }
    }
}

/// Keeps `copyrator_namespaces_not_bound` equal to the listed namespaces copyrator is not
/// bound in (SPEC §13).
async fn show_not_bound(
    mut not_bound: watch::Receiver<std::collections::BTreeSet<String>>,
    metrics: Arc<Metrics>,
    events: Events,
    install: crate::report::events::Regarding,
    mut leading: watch::Receiver<bool>,
) {
    use crate::report::events::reason;
    let mut told = std::collections::BTreeSet::new();
    loop {
        let now = not_bound.borrow_and_update().clone();
        metrics.namespaces_not_bound.set(now.len() as i64);
        // The leader tells, once per change; a replica taking over tells what it finds.
        if *leading.borrow_and_update() {
            for ns in now.difference(&told) {
                let note = format!(
                    "copyrator is not bound in listed namespace {ns}: nothing is copied there \
                     until its owner applies the Role and RoleBinding `helm get notes` prints"
                );
                events.warning(&install, reason::NOT_BOUND, note).await;
            }
            for ns in told.difference(&now) {
                let note = format!("copyrator is bound in {ns} now: its copies follow");
                events.normal(&install, reason::BOUND, note).await;
            }
            told = now;
        }
        tokio::select! {
            changed = not_bound.changed() => if changed.is_err() { return },
            changed = leading.changed() => if changed.is_err() { return },
        }
    }
}

/// The certificate manager's settings with `--tls-secret`, checked; `None` without.
fn cert_manager_config(args: &ServeArgs) -> anyhow::Result<Option<ManagerConfig>> {
    let Some(secret) = args.tls_secret.clone() else {
        return Ok(None);
    };
    if args.tls_dns_names.is_empty() && args.tls_ips.is_empty() {
        anyhow::bail!(
            "--tls-secret needs the names to issue the certificate for: --tls-dns-names or --tls-ips"
        );
    }
    if args.cert_validity * 2 > args.ca_validity {
        anyhow::bail!(
            "--cert-validity ({}) must be at most half of --ca-validity ({})",
            humantime::format_duration(args.cert_validity),
            humantime::format_duration(args.ca_validity)
        );
    }
    // A step relies on the one before having reached every replica, which looks this often.
    let propagation = args.cert_propagation.max(args.cert_check_interval * 2);
    // A serving certificate is renewed with a third of its life left, possibly only after a
    // new CA has been trusted for `propagation`, and then loaded within a check interval.
    if args.cert_validity < (propagation + args.cert_check_interval) * 3 {
        anyhow::bail!(
            "--cert-validity ({}) must be at least 3 × (--cert-propagation + --cert-check-interval) ({})",
            humantime::format_duration(args.cert_validity),
            humantime::format_duration((propagation + args.cert_check_interval) * 3)
        );
    }
    let duration = |d: Duration| time::Duration::try_from(d).context("duration out of range");
    Ok(Some(ManagerConfig {
        namespace: args
            .tls_secret_namespace
            .clone()
            .unwrap_or_else(leader::default_lease_namespace),
        secret,
        webhook_configurations: args.webhook_configuration.clone(),
        settings: Settings {
            names: SubjectNames {
                dns_names: args.tls_dns_names.clone(),
                ips: args.tls_ips.clone(),
            },
            ca_validity: duration(args.ca_validity)?,
            cert_validity: duration(args.cert_validity)?,
            propagation: duration(propagation)?,
        },
        check_interval: args.cert_check_interval,
    }))
}

/// Ready once this replica finished a resync, or it follows a leader that runs them.
async fn track_readiness(
    ctx: Arc<Context>,
    readiness: Arc<Readiness>,
    mut leading: watch::Receiver<bool>,
    mut observed: watch::Receiver<bool>,
) {
    let mut resyncs = ctx.resyncs.subscribe();
    loop {
        let synced = resyncs.borrow_and_update().completed > 0
            || (*observed.borrow_and_update() && !*leading.borrow_and_update());
        if synced {
            readiness.synced.store(true, Ordering::Relaxed);
            tracing::info!("ready");
            return;
        }
        tokio::select! {
            r = resyncs.changed() => if r.is_err() { return },
            r = leading.changed() => if r.is_err() { return },
            r = observed.changed() => if r.is_err() { return },
        }
    }
}

/// Runs until SIGTERM or SIGINT, then shuts down cleanly.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let running = start(&args).await?;
    wait_for_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
