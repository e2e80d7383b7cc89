//! The two listeners: HTTPS for the admission webhooks (rustls, certificate hot reload, what
//! each client address may hold: [`budget`], [`peers`], [`eviction`]) and plain HTTP for
//! `/metrics`, `/healthz`, `/readyz` and `/livez`.

pub mod budget;
pub mod cidr;
mod connection;
pub mod eviction;
pub mod peers;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use rustls::ServerConfig;
use tokio::{net::TcpListener, sync::watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::certs::serving::ReloadingCert;
use crate::cluster::progress::WatchProgress;
use crate::metrics::Metrics;

pub use budget::{Peer, PeerLimits};
use connection::ConnectionState;
use peers::Admission;
pub use peers::Peers;

/// How long a connection may go without a request, and how many requests it may multiplex
/// (SPEC §6.1). What an address may hold is [`PeerLimits`].
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// A new connection must finish its TLS handshake and send its first request's headers
    /// within this time.
    pub first_request_timeout: Duration,
    /// A connection with no request in flight is closed after this time.
    pub idle_timeout: Duration,
    /// HTTP/2 streams one connection may have open at once (the API server opens another
    /// connection beyond).
    pub max_streams: u32,
    /// Connections from these addresses are the API server's (`--api-server-cidrs`).
    pub api_server: ApiServerAddresses,
}

/// Who counts as the API server (SPEC §9.8): a client whose certificate `--client-ca`
/// verified, or one whose address is in `--api-server-cidrs`.
#[derive(Clone, Debug, Default)]
pub struct ApiServerAddresses(pub Arc<[cidr::Cidr]>);

impl ApiServerAddresses {
    fn holds(&self, ip: std::net::IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }
}

/// Resolves once the connection has gone too long without a request open: the first-request
/// timeout while it has answered none, the idle timeout afterwards.
async fn idle_too_long(state: &ConnectionState, limits: &ConnectionLimits) {
    let tick = (limits.first_request_timeout.min(limits.idle_timeout) / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        tokio::time::sleep(tick).await;
        let Some((quiet, answered)) = state.quiet_for() else {
            continue;
        };
        let limit = if answered {
            limits.idle_timeout
        } else {
            limits.first_request_timeout
        };
        if quiet >= limit {
            return;
        }
    }
}

/// Marks a request that arrived over a connection whose client presented a certificate the
/// `--client-ca` bundle verified, or from an address of `--api-server-cidrs`: the API server,
/// not anyone who can reach the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedClient;

/// Serves `app` over TLS on `listener` until `shutdown` fires: each connection within
/// `limits`, and within what its address may hold of `peers`.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    limits: ConnectionLimits,
    peers: Arc<Peers>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        // An IPv4 client of a dual-stack socket is one address, however it is written.
        let ip = addr.ip().to_canonical();
        let slot = match peers.admit(ip) {
            Admission::Admitted(slot) => slot,
            Admission::Refused(refusal) => {
                tracing::debug!(peer = %addr, reason = refusal.metric_label(), "no room for a new connection; closing it");
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let from_api_server = limits.api_server.holds(ip);
        let limits = limits.clone();
        let acceptor = acceptor.clone();
        let app = app.clone();
        let metrics = Arc::clone(&metrics);
        let mut conn_shutdown = shutdown.clone();
        connections.spawn(async move {
            let state = Arc::clone(&slot.state);
            let handshake =
                tokio::time::timeout(limits.first_request_timeout, acceptor.accept(stream));
            let tls = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %addr, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(peer = %addr, "TLS handshake timed out");
                        return;
                    }
                },
                _ = state.evicted() => return,
            };
            // With `--client-ca` the handshake has verified the client's certificate, or its
            // address is one only the API server has (`--api-server-cidrs`): say so on each
            // request, for the answers that only the API server may have (SPEC §9.8), and keep
            // the connection whatever others open.
            let verified = tls.get_ref().1.peer_certificates().is_some() || from_api_server;
            if verified {
                state.set_verified();
            }
            let (counted, peer) = (Arc::clone(&state), slot.peer.clone());
            let service = tower::service_fn(move |mut req: axum::http::Request<Incoming>| {
                let guard = counted.request();
                let app = app.clone();
                req.extensions_mut().insert(peer.clone());
                if verified {
                    req.extensions_mut().insert(VerifiedClient);
                }
                async move {
                    let response = app.oneshot(req).await;
                    drop(guard);
                    response
                }
            });
            // A request head is bounded by MAX_HEADER_BYTES, whichever protocol carries it:
            // what one connection holds is part of the port's memory budget.
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().max_buf_size(budget::MAX_HEADER_BYTES);
            builder
                .http2()
                .max_concurrent_streams(limits.max_streams.max(1))
                .max_header_list_size(budget::MAX_HEADER_BYTES as u32);
            let conn =
                builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(service));
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = state.evicted() => {
                    // Its place is taken already: close at once, mid-request or not.
                    return;
                }
                _ = idle_too_long(&state, &limits) => {
                    tracing::debug!(peer = %addr, "closing an idle connection");
                    metrics.webhook_connections_idle_closed.inc();
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(Duration::from_secs(5), conn).await.unwrap_or(Ok(()))
                }
                _ = conn_shutdown.changed() => {
                    // Finish in-flight requests, then close (keep-alive connections would
                    // otherwise stay open forever).
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(Duration::from_secs(5), conn).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = result {
                tracing::debug!(peer = %addr, error = %e, "connection ended with an error");
            }
            drop(slot);
        });
        // Reap finished connections without waiting.
        while connections.try_join_next().is_some() {}
    }
    // Give in-flight reviews a moment to be answered.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// What `/readyz` checks.
pub struct Readiness {
    pub cert: Arc<ReloadingCert>,
    /// Set once this replica finished its first resync, or saw another replica leading.
    pub synced: AtomicBool,
}

#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    watches: Arc<WatchProgress>,
}

/// The plain HTTP router.
pub fn http_router(
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    watches: Arc<WatchProgress>,
) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/livez", get(livez))
        .with_state(HttpState {
            metrics,
            readiness,
            watches,
        })
}

/// Fails while a watch is wedged: no progress for several API timeouts in a row, so that the
/// liveness probe restarts the process rather than leave it answering from stale memory.
async fn livez(State(s): State<HttpState>) -> impl IntoResponse {
    match s.watches.wedged() {
        None => (StatusCode::OK, "ok".to_string()),
        Some((feed, quiet)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the {feed} watch made no progress for {}s", quiet.as_secs()),
        ),
    }
}

async fn metrics_handler(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    if !s.readiness.cert.is_usable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "serving certificate not usable",
        );
    }
    if !s.readiness.synced.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "first resync not finished");
    }
    (StatusCode::OK, "ok")
}
