//! copyrator's plain HTTP port as tests read it: a GET with hyper's HTTP/1.1 client, Prometheus
//! samples, and free ports to put servers on.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

/// HTTP/1.1 GET of `path` on `addr` (the plain port: `/metrics`, `/healthz`, `/readyz`) over a
/// connection of its own; returns (status, body), or status 0 if no response came.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("HTTP handshake");
    let conn = tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    // As a server that closes the connection without an answer: status 0, no body.
    let Ok(response) = sender.send_request(request).await else {
        return (0, String::new());
    };
    let status = response.status().as_u16();
    let body = match response.into_body().collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    drop(sender);
    let _ = conn.await;
    (status, body)
}

/// Parses one sample value out of Prometheus text (0 if absent).
pub fn metric_value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(sample)
                .and_then(|rest| rest.trim().split(' ').next()?.parse().ok())
        })
        .unwrap_or(0.0)
}

/// A free port below the ephemeral range (32768+): a port from the ephemeral range can be
/// taken by an outgoing connection between this check and the server binding it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Each test process walks its own stretch of ports, so that parallel processes rarely meet.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 120) as u16 * 100;
    for _ in 0..12_000 {
        let port = 20_000 + (base - 20_000 + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000")
}
