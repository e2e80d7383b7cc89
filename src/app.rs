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
    listener::{self, ConnectionLimits, PeerLimits, Peers, Readiness},
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

/// Starts everything; returns once the listeners are bound.
pub async fn start(args: &ServeArgs) -> anyhow::Result<Running> {
    let metrics = Arc::new(Metrics::new());
    let threads = tokio::runtime::Handle::current().metrics().num_workers();
    metrics.worker_threads.set(threads as i64);
    // Watches ask the API server to end them after two thirds of it (whole seconds).
    if args.api_timeout < Duration::from_secs(2) {
        anyhow::bail!("--api-timeout must be at least 2s");
    }
    let client = crate::cluster::client::counting_client(
        args.kubeconfig.as_deref(),
        args.api_timeout,
        &metrics,
    )
    .await?;
    // The kinds copied besides Secret and ConfigMap, registered before anything reads the
    // registry: those not served yet are looked for again (`watch_kinds`).
    let kind_names =
        crate::cluster::kinds::parse(&args.policy.copy_kinds).map_err(anyhow::Error::msg)?;
    let unresolved = register_kinds(&client, kind_names).await?;
    let cert_manager = cert_manager_config(args)?;
    let cert = match &cert_manager {
        Some(_) => ReloadingCert::pending(),
        None => ReloadingCert::load(CertFiles {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
        })
        .context("loading the webhook serving certificate (see `copyrator certs`)")?,
    };

    let queue = WorkQueue::new(args.queue_capacity);
    let cluster = Cluster::new(
        client.clone(),
        Arc::clone(&metrics),
        ApiLimits {
            writes: RateLimiter::new(args.api_qps, args.api_burst),
            reads: RateLimiter::new(args.api_read_qps, args.api_read_burst),
            read_concurrency: args.api_read_concurrency,
        },
        args.list_page_size,
    )
    .with_api_timeout(args.api_timeout);
    let cluster = if args.namespaces.is_empty() {
        cluster
    } else {
        // A watch per feed and namespace: on HTTP/2 lanes, not a connection each (SPEC §13).
        let watches = args.namespaces.len()
            * (crate::freshness::feed::Feed::all().len() + 2 * unresolved.len());
        let lanes = crate::cluster::client::watch_lanes(
            args.kubeconfig.as_deref(),
            args.api_timeout,
            &metrics,
            watches.div_ceil(crate::cluster::client::WATCHES_PER_LANE),
        )
        .await?;
        cluster
            .scoped_to(args.namespaces.iter().cloned())
            .with_watch_lanes(lanes)
    };
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(leader::default_identity);
    // The install this process belongs to, named by its Lease: Events and metrics say it, so
    // that several installs side by side are told apart (SPEC §13).
    let lease_namespace = args
        .lease
        .lease_namespace
        .clone()
        .unwrap_or_else(leader::default_lease_namespace);
    let install = format!("{lease_namespace}/{}", args.lease.lease_name);
    metrics
        .install
        .get_or_create(&crate::metrics::InstallLabels {
            install: install.clone(),
            scope: if args.namespaces.is_empty() {
                "cluster"
            } else {
                "namespaces"
            },
        })
        .set(1);
    let events = Events::new(
        client.clone(),
        format!("{install}/{identity}"),
        Arc::clone(&metrics),
    );
    let mut policy = args.policy.policy();
    policy.own_namespace = leader::own_namespace(args.lease.lease_namespace.as_deref());
    if let Some(file) = &args.default_cas_file {
        policy.default_cas = Some(crate::default_cas::load(Some(file))?);
    }
    let settings = SyncSettings {
        policy: policy.clone(),
        fanout_concurrency: args.fanout_concurrency,
        fanout_bytes: args.fanout_bytes,
        new_namespace_delay: args.new_namespace_delay,
        resync_chunk: RESYNC_CHUNK,
        source_cache_bytes: args.source_cache_bytes,
    };
    let mut ctx = Context::new(
        cluster,
        events,
        Arc::clone(&metrics),
        Arc::clone(&queue),
        settings,
    );
    ctx.unlabelled_scan = Periodic::new(args.unlabelled_scan_interval);
    let (leading_tx, leading_rx) = watch::channel(false);
    ctx.leading = leading_rx.clone();
    let ctx = Arc::new(ctx);

    let webhook_listener = TcpListener::bind(args.webhook_addr)
        .await
        .with_context(|| format!("binding the webhook address {}", args.webhook_addr))?;
    let http_listener = TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("binding the HTTP address {}", args.http_addr))?;
    let webhook_addr = webhook_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut background = Vec::new();

    let client_ca = args
        .client_ca
        .clone()
        .map(ClientCa::load)
        .transpose()
        .context("loading the client CA (--client-ca)")?;
    background.push(tokio::spawn(Arc::clone(&cert).watch(
        client_ca.clone(),
        args.tls_reload_interval,
        Arc::clone(&metrics),
    )));
    if let Some(config) = cert_manager {
        let manager = Manager::new(
            client.clone(),
            config,
            Arc::clone(&cert),
            Arc::clone(&metrics),
        );
        tasks.push(tokio::spawn(manager.run(shutdown_rx.clone())));
    }
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
    let peers = Peers::new(
        PeerLimits {
            connections: args.webhook_max_connections,
            connections_per_peer: args.webhook_max_connections_per_peer,
            in_flight: args.webhook_max_in_flight,
            in_flight_per_peer: args.webhook_max_in_flight_per_peer,
            body_bytes: args.webhook_body_bytes_in_flight,
            body_bytes_per_peer: args.webhook_body_bytes_per_peer,
        }
        .sane(args.max_body_bytes),
        Arc::clone(&metrics),
    );
    let admission = admission::router(AdmissionState {
        queue: Arc::clone(&queue),
        metrics: Arc::clone(&metrics),
        policy: Arc::new(policy.clone()),
        advisor: Some(Advisor::new(ctx.cluster.clone(), policy)),
        waiters: Arc::clone(&ctx.waiters),
        gate: Some(PodGate::new(Arc::clone(&ctx), args.pod_gate_timeout)),
        own_username: own_username.map(Arc::from),
        namespaces: Some(ctx.cluster.clone()),
        limits: Limits::new(
            args.max_body_bytes,
            args.webhook_request_timeout,
            Arc::clone(&peers),
        ),
    });
    tasks.push(tokio::spawn(listener::serve_tls(
        webhook_listener,
        cert.server_config(client_ca),
        admission,
        ConnectionLimits {
            first_request_timeout: args.webhook_first_request_timeout,
            idle_timeout: args.webhook_idle_timeout,
            max_streams: args.webhook_max_streams,
            api_server: listener::ApiServerAddresses(args.api_server_cidrs.clone().into()),
        },
        peers,
        Arc::clone(&metrics),
        shutdown_rx.clone(),
    )));

    let readiness = Arc::new(Readiness {
        cert: Arc::clone(&cert),
        synced: Default::default(),
    });
    let watch_progress = Arc::new(WatchProgress::new(args.api_timeout, Arc::clone(&metrics)));
    let http = listener::http_router(
        Arc::clone(&metrics),
        Arc::clone(&readiness),
        Arc::clone(&watch_progress),
    );
    let mut http_shutdown = shutdown_rx.clone();
    tasks.push(tokio::spawn(async move {
        let serve = axum::serve(http_listener, http).with_graceful_shutdown(async move {
            let _ = http_shutdown.changed().await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    }));

    let workers = worker::spawn(Arc::clone(&ctx), args.workers);
    // Early reads for admitted namespace changes (src/freshness/prefetch.rs).
    background.push(tokio::spawn(crate::sync::prefetch_namespaces(Arc::clone(
        &ctx,
    ))));
    // Watches (I/O only) hand every event to the dispatcher (src/freshness/dispatch.rs): it
    // keeps the indexes, ends waits for admitted changes without polling, and queues copies
    // deleted or edited by someone else (on the leader).
    let rules_changed = Arc::new(tokio::sync::Notify::new());
    let dispatcher = Arc::new(Dispatcher::new(
        Arc::clone(ctx.cluster.indexes()),
        Arc::new(ctx.settings.policy.clone()),
        Arc::clone(&ctx.waiters),
        Arc::clone(&ctx.ready),
        Work {
            queue: Arc::clone(&queue),
            leading: leading_rx.clone(),
        },
        Arc::clone(&rules_changed),
        Arc::clone(&metrics),
    ));
    // NamespacedCopyRules are an administrator's optional extra: found once, here.
    let namespaced_rules = ctx.cluster.find_namespaced_rules().await;
    tasks.extend(crate::cluster::watch::spawn(
        &ctx.cluster,
        &dispatcher,
        &metrics,
        &watch_progress,
        &shutdown_rx,
        namespaced_rules,
    ));
    if ctx.cluster.scope().listed().is_some() {
        background.push(tokio::spawn(show_not_bound(
            ctx.cluster.scope().not_bound(),
            Arc::clone(&metrics),
            ctx.events.clone(),
            crate::report::events::Regarding::Install {
                namespace: lease_namespace.clone(),
                lease: args.lease.lease_name.clone(),
            },
            leading_rx.clone(),
        )));
    }
    background.push(tokio::spawn(watch_kinds(
        Arc::clone(&ctx),
        unresolved,
        args.policy.kind_retry_interval,
        Arc::clone(&dispatcher),
        Arc::clone(&watch_progress),
        shutdown_rx.clone(),
    )));

    let (observed_tx, observed_rx) = watch::channel(false);
    // `copyrator.io/resync` requests the leader takes from its Lease, for the reconciler.
    let (resync_requests_tx, resync_requests_rx) = watch::channel(String::new());
    let resync_requests_tx = Arc::new(resync_requests_tx);
    if args.leader_election {
        let config = ElectionConfig {
            namespace: args
                .lease
                .lease_namespace
                .clone()
                .unwrap_or_else(leader::default_lease_namespace),
            name: args.lease.lease_name.clone(),
            identity: identity.clone(),
            lease_duration: args.lease_duration,
            published: {
                use crate::pipeline::published;
                let mut p = published::policy_annotations(&ctx.settings.policy);
                if let Some(listed) = ctx.cluster.scope().listed() {
                    p.insert(
                        published::LISTED_NAMESPACES.into(),
                        published::joined(listed),
                    );
                }
                p
            },
            not_bound: ctx
                .cluster
                .scope()
                .listed()
                .map(|_| ctx.cluster.scope().not_bound()),
            resync_requests: Some(Arc::clone(&resync_requests_tx)),
        };
        tasks.push(tokio::spawn(leader::run(
            client.clone(),
            config,
            leading_tx,
            observed_tx,
            ctx.resyncs.subscribe(),
            Arc::clone(&metrics),
            shutdown_rx.clone(),
        )));
    } else {
        leading_tx.send_replace(true);
        metrics.leader.set(1);
        // Keep the senders alive for the life of the process.
        background.push(tokio::spawn(async move {
            let _keep = (leading_tx, observed_tx, resync_requests_tx);
            std::future::pending::<()>().await
        }));
    }
    if !args.hub_sync_interval.is_zero() {
        // Copies across clusters, member side (src/sync/hub/mod.rs).
        background.push(tokio::spawn(crate::sync::hub::run(
            Arc::clone(&ctx),
            args.hub_sync_interval,
            Arc::clone(&watch_progress),
            shutdown_rx.clone(),
        )));
    }
    if let Some(members) = &args.hub_members_namespace {
        // Copies across clusters, hub side (src/sync/hub/members.rs).
        let every = match args.hub_sync_interval.is_zero() {
            true => std::time::Duration::from_secs(10),
            false => args.hub_sync_interval,
        };
        background.push(tokio::spawn(crate::sync::hub::run_hub(
            Arc::clone(&ctx),
            every,
            members.clone(),
            shutdown_rx.clone(),
        )));
    }
    tasks.push(tokio::spawn(reconcile::run(
        Arc::clone(&ctx),
        args.resync_interval,
        leading_rx.clone(),
        resync_requests_rx,
        shutdown_rx.clone(),
    )));
    // CopyRule source selectors, watched by the leader (src/cluster/selectors.rs); their
    // events go to the dispatcher like every other watch's.
    tasks.push(tokio::spawn(crate::cluster::selectors::run(
        ctx.cluster.clone(),
        Arc::clone(&dispatcher),
        Arc::clone(&metrics),
        Arc::clone(&watch_progress),
        ctx.settings.policy.clone(),
        leading_rx.clone(),
        rules_changed,
        shutdown_rx.clone(),
    )));
    // Sources not opted in, looked for after resyncs (src/sync/unlabelled.rs).
    background.push(tokio::spawn(crate::sync::unlabelled::run(
        Arc::clone(&ctx),
        shutdown_rx.clone(),
    )));
    background.push(tokio::spawn(track_readiness(
        Arc::clone(&ctx),
        readiness,
        leading_rx,
        observed_rx,
    )));

    tracing::info!(%webhook_addr, %http_addr, identity, threads, "copyrator serving");
    Ok(Running {
        webhook_addr,
        http_addr,
        metrics,
        context: ctx,
        shutdown: shutdown_tx,
        tasks,
        background,
        workers,
    })
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
