//! copyrator's plain HTTP port as tests read it: a minimal GET, Prometheus samples, and free
//! ports to put servers on.

/// Minimal HTTP/1.1 GET against the plain port; returns (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = match text.split_once("\r\n\r\n") {
        Some((head, body))
            if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked") =>
        {
            dechunk(body)
        }
        Some((_, body)) => body.to_string(),
        None => String::new(),
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Parses one sample value out of Prometheus text.
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
