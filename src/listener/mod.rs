//! The two listeners: HTTPS for the admission webhooks (rustls, certificate hot reload) and
//! plain HTTP for `/metrics`, `/healthz`, `/readyz` and `/livez`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use rustls::ServerConfig;
use tokio::{
    net::TcpListener,
    sync::{Semaphore, watch},
};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::certs::serving::ReloadingCert;
use crate::cluster::progress::WatchProgress;
use crate::metrics::Metrics;

/// What one connection may take of the webhook server (SPEC §6.1).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Connections open at once; beyond, new ones are closed at once.
    pub max_connections: usize,
    /// A new connection must finish its TLS handshake and send its first request's headers
    /// within this time.
    pub first_request_timeout: Duration,
    /// A connection with no request in flight is closed after this time.
    pub idle_timeout: Duration,
}

/// Requests in flight on one connection, and when it was last busy.
struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `opened` when a request last finished; `u64::MAX`: none yet.
    last_done_ms: AtomicU64,
}

/// Counts a request as in flight until dropped (also when the connection goes mid-way).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_done_ms
            .store(a.opened.elapsed().as_millis() as u64, Ordering::Relaxed);
        a.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    /// Resolves once the connection has been idle too long: no request in flight since the
    /// first-request timeout (nothing served yet) or the idle timeout (afterwards).
    async fn idle_too_long(&self, limits: ConnectionLimits) {
        let tick = (limits.first_request_timeout.min(limits.idle_timeout) / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if self.in_flight.load(Ordering::Relaxed) > 0 {
                continue;
            }
            let (idle_since, limit) = match self.last_done_ms.load(Ordering::Relaxed) {
                u64::MAX => (Duration::ZERO, limits.first_request_timeout),
                ms => (Duration::from_millis(ms), limits.idle_timeout),
            };
            if self.opened.elapsed().saturating_sub(idle_since) >= limit {
                return;
            }
        }
    }
}

/// Marks a request that arrived over a connection whose client presented a certificate the
/// `--client-ca` bundle verified: the API server, not anyone who can reach the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedClient;

/// Serves `app` over TLS on `listener` until `shutdown` fires, within `limits`.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
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
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            metrics.webhook_connections_refused.inc();
            tracing::debug!(%peer, "connection limit reached; closing a new connection");
            drop(stream);
            continue;
        };
        metrics.webhook_connections.inc();
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let metrics = Arc::clone(&metrics);
        let mut conn_shutdown = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            let _open = OpenConnection(Arc::clone(&metrics));
            let activity = Arc::new(Activity {
                opened: Instant::now(),
                in_flight: AtomicUsize::new(0),
                last_done_ms: AtomicU64::new(u64::MAX),
            });
            let tls =
                match tokio::time::timeout(limits.first_request_timeout, acceptor.accept(stream))
                    .await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let counted = Arc::clone(&activity);
            // With `--client-ca` the handshake has verified the client's certificate: say so on
            // each request, for the answers that only such a client may have (SPEC §9.8).
            let verified = tls.get_ref().1.peer_certificates().is_some();
            let service = tower::service_fn(move |mut req: axum::http::Request<Incoming>| {
                let guard = counted.start();
                let app = app.clone();
                if verified {
                    req.extensions_mut().insert(VerifiedClient);
                }
                async move {
                    let response = app.oneshot(req).await;
                    drop(guard);
                    response
                }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn =
                builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(service));
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = activity.idle_too_long(limits) => {
                    tracing::debug!(%peer, "closing an idle connection");
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
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
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

/// Keeps the open-connections gauge right however a connection ends.
struct OpenConnection(Arc<Metrics>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.webhook_connections.dec();
    }
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
