//! The Kubernetes clients every command builds (`kube_client`, the service's
//! `counting_client`), and their HTTP stack: kube's own (`ClientBuilder::try_from`), except that its
//! TCP connections set TCP_NODELAY, as Go's (client-go's) do, and that idle connections are
//! reused only for a short while (see `builder`). kube's connector leaves Nagle's
//! algorithm on (kube-rs issue #2056): a request written in two segments then waits for the
//! API server's delayed ACK, up to 40 ms, before its second half leaves (BENCHMARKS.md).

use std::time::Duration;

use anyhow::Context as _;
use axum::http::{HeaderMap, Request, Response};
use hyper_util::{
    client::legacy::connect::HttpConnector,
    rt::{TokioExecutor, TokioTimer},
};
use kube::{
    Client, Config,
    client::{Body, ClientBuilder, ConfigExt, DynBody, retry::RetryPolicy},
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::metrics::Metrics;
use tower::{BoxError, ServiceBuilder, ServiceExt as _, retry::RetryLayer, util::BoxService};
use tower_http::{ServiceExt as _, classify::ServerErrorsFailureClass, trace::TraceLayer};
use tracing::Span;

/// Builds a Kubernetes client from `--kubeconfig`, else the usual inference.
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    kube_client_with_timeout(kubeconfig, super::DEFAULT_API_TIMEOUT).await
}

/// The client of a one-off command (`explain`, `plan`, `migrate`, `resync`), checked to reach
/// its API server first: when it cannot, the error names the server and what to check, in
/// one line, before any command-specific message could hide it.
pub async fn command_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    let config = kube_config(kubeconfig, super::DEFAULT_API_TIMEOUT).await?;
    let server = config.cluster_url.to_string();
    let client = builder(config)
        .context("building the Kubernetes client")?
        .build();
    let from = match kubeconfig {
        Some(path) => format!("--kubeconfig {}", path.display()),
        None => "the kubeconfig ($KUBECONFIG, ~/.kube/config) or the in-cluster service account"
            .to_string(),
    };
    match client.apiserver_version().await {
        Ok(_) => Ok(client),
        // Any answer (401, 403) means the server is there; the command's own calls say more.
        Err(kube::Error::Api(_)) => Ok(client),
        Err(e) => anyhow::bail!(
            "cannot reach the Kubernetes API server at {server} ({}): check the server in {from} \
             and that the cluster is up",
            one_line(&e.to_string())
        ),
    }
}

/// `text` on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// As [`kube_client`], a connection allowed to stay silent for `api_timeout` (a request that
/// answers only after a while, such as a CPU profile).
pub async fn kube_client_with_timeout(
    kubeconfig: Option<&std::path::Path>,
    api_timeout: Duration,
) -> anyhow::Result<Client> {
    Ok(builder(kube_config(kubeconfig, api_timeout).await?)
        .context("building the Kubernetes client")?
        .build())
}

/// The client configuration: `api_timeout` is how long a connection may stay silent while
/// copyrator waits on it (`--api-timeout`, SPEC §5).
async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    api_timeout: Duration,
) -> anyhow::Result<Config> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("finding a Kubernetes configuration")?,
    };
    config.connect_timeout = Some(api_timeout.min(Duration::from_secs(5)));
    // The read timeout bounds silence, not duration: each read of the connection (an answer's
    // first byte, the next chunk of a body, a watch's next event) must come within it, so a
    // black-holed connection (no FIN, no RST) fails the call within `api_timeout` whatever
    // it was doing, while a large LIST that keeps sending is never cut. What it bounds for a
    // LIST is the API server's time to its first byte: copyrator LISTs from the watch cache
    // or in pages of `--list-page-size` from etcd, well under a second even for tens of
    // thousands of objects. A failed connection is closed, never handed back to the pool,
    // and so is an idle pooled one silent that long (hyper keeps a read pending on it):
    // retries get new connections. Restarted by each write, so a pooled connection's idle
    // time does not count against the request sent on it.
    config.read_timeout = Some(api_timeout);
    config.reset_reader_on_write = true;
    Ok(config)
}

/// The service's client: counts the bytes of every API response it reads.
pub async fn counting_client(
    kubeconfig: Option<&std::path::Path>,
    api_timeout: Duration,
    metrics: &Metrics,
) -> anyhow::Result<Client> {
    let builder = builder(kube_config(kubeconfig, api_timeout).await?)
        .context("building the Kubernetes client")?;
    Ok(builder.with_layer(&counting(metrics)).build())
}

/// A layer counting the bytes of every API response into `metrics`.
fn counting(
    metrics: &Metrics,
) -> tower::util::MapResponseLayer<
    impl Fn(Response<Box<DynBody>>) -> Response<Box<DynBody>> + Clone + use<>,
> {
    use http_body_util::BodyExt;

    let counter = metrics.api_response_bytes.clone();
    tower::util::MapResponseLayer::new(move |response: Response<Box<DynBody>>| {
        let counter = counter.clone();
        response.map(move |body| {
            Box::new(body.map_frame(move |frame| {
                if let Some(data) = frame.data_ref() {
                    counter.inc_by(data.len() as u64);
                }
                frame
            })) as Box<DynBody>
        })
    })
}

/// The clients a namespace-scoped install's watches share (SPEC §13), `lanes` of them, each
/// counting response bytes like the service's client. Each multiplexes its watches over one
/// HTTP/2 connection and sends a PING every third of `api_timeout`: a connection that goes
/// silent fails all its watches within `api_timeout`, so a quiet watch need not be renewed
/// that often (`Cluster::watch_seconds`). One lane carries [`WATCHES_PER_LANE`] watches at
/// most, well under the API server's streams per connection.
pub async fn watch_lanes(
    kubeconfig: Option<&std::path::Path>,
    api_timeout: Duration,
    metrics: &Metrics,
    lanes: usize,
) -> anyhow::Result<Vec<Client>> {
    let config = kube_config(kubeconfig, api_timeout).await?;
    (0..lanes.max(1))
        .map(|_| {
            let builder = builder_with(config.clone(), Transport::Multiplexed)
                .context("building a watch client")?;
            Ok(builder.with_layer(&counting(metrics)).build())
        })
        .collect()
}

/// How many watches one of [`watch_lanes`] carries at most (the API server allows 1,000
/// streams per HTTP/2 connection by default; Go's server 250).
pub const WATCHES_PER_LANE: usize = 100;

/// The service stack `ClientBuilder::try_from(config)` builds.
pub type Stack = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// How a client's requests reach the API server.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Transport {
    /// HTTP/1.1, a connection per request in flight (a watch holds one).
    PerRequest,
    /// HTTP/2 where the API server offers it: every request over one connection, kept honest
    /// by PINGs.
    Multiplexed,
}

/// kube's default client stack for `config` with TCP_NODELAY on its connections. A proxy in
/// the configuration gets kube's own stack (its proxy support), Nagle's algorithm included.
pub fn builder(config: Config) -> Result<ClientBuilder<Stack>, kube::Error> {
    builder_with(config, Transport::PerRequest)
}

/// As [`builder`], reaching the API server by `transport` (a hub's watches: multiplexed, so
/// that its PINGs find a silent or frozen hub).
pub(crate) fn builder_with(
    config: Config,
    transport: Transport,
) -> Result<ClientBuilder<Stack>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = match transport {
        Transport::PerRequest => config.rustls_https_connector_with_connector(http)?,
        Transport::Multiplexed => {
            let tls = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(config.rustls_client_config()?)
                .https_or_http();
            let tls = match &config.tls_server_name {
                Some(name) => {
                    let name = name.clone().try_into().map_err(|e| {
                        kube::Error::Service(format!("invalid TLS server name: {e}").into())
                    })?;
                    tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
                }
                None => tls,
            };
            tls.enable_all_versions().wrap_connector(http)
        }
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    // A black-holed connection looks idle, like a live one: only its next request finds out,
    // after the read timeout. A connection idle for a third of it is not reused (a new one
    // costs a TLS handshake), so after every connection goes silent at once, a request sent
    // later fails by then at the latest and its retry gets a new connection: everything
    // converges within about 4/3 of the read timeout (SPEC §5).
    let mut pool = hyper_util::client::legacy::Builder::new(TokioExecutor::new());
    if let Some(read_timeout) = config.read_timeout {
        pool.pool_timer(TokioTimer::new())
            .pool_idle_timeout(read_timeout / 3);
        if transport == Transport::Multiplexed {
            // A PING answered keeps the connection's reads within the read timeout however
            // quiet its watches; one unanswered closes it, failing every stream on it.
            pool.timer(TokioTimer::new())
                .http2_keep_alive_interval(read_timeout / 3)
                .http2_keep_alive_timeout(read_timeout / 3)
                .http2_keep_alive_while_idle(true);
        }
    }
    let client: hyper_util::client::legacy::Client<_, Body> = pool.build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(
            tower_http::decompression::DecompressionLayer::new()
                .no_br()
                .no_deflate()
                .no_zstd()
                .gzip(!config.disable_compression),
        )
        .option_layer(
            config
                .default_retry
                .then_some(RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(
            // As kube's: the same span names and fields, so its logs read the same.
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<Body>| {
                    tracing::debug_span!(
                        "HTTP",
                        http.method = %req.method(),
                        http.url = %req.uri(),
                        http.status_code = tracing::field::Empty,
                        otel.name = req.extensions().get::<&'static str>().unwrap_or(&"HTTP"),
                        otel.kind = "client",
                        otel.status_code = tracing::field::Empty,
                    )
                })
                .on_request(|_req: &Request<Body>, _span: &Span| {
                    tracing::debug!("requesting");
                })
                .on_response(
                    |res: &Response<hyper::body::Incoming>, _latency: Duration, span: &Span| {
                        let status = res.status();
                        span.record("http.status_code", status.as_u16());
                        if status.is_client_error() || status.is_server_error() {
                            span.record("otel.status_code", "ERROR");
                        }
                    },
                )
                .on_body_chunk(())
                .on_eos(|_: Option<&HeaderMap>, _duration: Duration, _span: &Span| {
                    tracing::debug!("stream closed");
                })
                .on_failure(
                    |ec: ServerErrorsFailureClass, _latency: Duration, span: &Span| {
                        span.record("otel.status_code", "ERROR");
                        match ec {
                            ServerErrorsFailureClass::StatusCode(status) => {
                                span.record("http.status_code", status.as_u16());
                                tracing::error!("failed with status {}", status)
                            }
                            ServerErrorsFailureClass::Error(err) => {
                                tracing::error!("failed with error {}", err)
                            }
                        }
                    },
                ),
        )
        .map_err(BoxError::from)
        .service(client);
    Ok(ClientBuilder::new(
        service
            .map_response_body(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
            .boxed(),
        config.default_namespace.clone(),
    ))
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// The peer port of socket `fd`, if it is a connected IPv4 TCP socket.
    fn peer_port(fd: i32) -> Option<u16> {
        let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: addr is a sockaddr_in of the length given.
        let rc = unsafe { libc::getpeername(fd, (&raw mut addr).cast(), &mut len) };
        (rc == 0 && i32::from(addr.sin_family) == libc::AF_INET)
            .then(|| u16::from_be(addr.sin_port))
    }

    fn nodelay(fd: i32) -> bool {
        let mut on: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: on is a c_int of the length given.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&raw mut on).cast(),
                &mut len,
            )
        };
        rc == 0 && on != 0
    }

    #[tokio::test]
    async fn connections_to_the_api_server_set_tcp_nodelay() {
        // A one-request HTTP server that keeps the connection open afterwards.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).unwrap();
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                .unwrap();
            stream
        });
        let config = Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let client = builder(config).unwrap().build();
        let answer: serde_json::Value = client
            .request(Request::get("/version").body(Vec::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(answer, serde_json::json!({}));
        // The server's end stays open until the test ends: the client's connection stays pooled.
        let _server_end = server.join().unwrap();

        // The client's end of that connection, among this process's sockets (the server's end
        // has the client's port as its peer, not `port`).
        let ours: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&fd| peer_port(fd) == Some(port))
            .collect();
        assert!(!ours.is_empty(), "the client's connection is open");
        for fd in ours {
            assert!(nodelay(fd), "TCP_NODELAY on fd {fd}");
        }
    }
}
