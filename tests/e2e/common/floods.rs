//! Clients that flood the webhook port from addresses other than the API server's (127.0.0.2
//! and up on loopback): forged reviews answered one per connection, and connections sending
//! headers that never end. Shared by the end-to-end tests and the benchmark.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use copyrator::marks;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::webhook_tls_from;

/// Tasks that keep posting, each from `from`, until dropped.
pub struct Flood {
    sent: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    /// Reviews answered 200 ([`forge`]) or header bytes sent ([`endless_headers`]).
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A review of the creation of Secret `name` in `ns`, opted in as a source for `selector`:
/// a change that never happens.
fn forged_source(ns: &str, name: &str, selector: &str) -> Vec<u8> {
    let mut review = super::source_create_review(
        ns,
        name,
        json!({ marks::NAMESPACE_SELECTOR_ANNOTATION: selector }),
    );
    review["request"]["uid"] = json!(format!("forged-{name}"));
    let body = serde_json::to_vec(&review).unwrap();
    let mut request = format!(
        "POST /admission/sources HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    request
}

/// `tasks` clients at `from`, each posting reviews of new sources in `ns` (a new name each
/// time), one connection per review, as fast as they are answered.
pub fn forge(from: IpAddr, port: u16, ca: &[u8], ns: &str, selector: &str, tasks: usize) -> Flood {
    let sent = Arc::new(AtomicUsize::new(0));
    let tasks = (0..tasks)
        .map(|t| {
            let (sent, ca, ns, selector) = (
                Arc::clone(&sent),
                ca.to_vec(),
                ns.to_string(),
                selector.to_string(),
            );
            tokio::spawn(async move {
                for i in 0.. {
                    let request = forged_source(&ns, &format!("forged-{t}-{i}"), &selector);
                    if let Ok(mut tls) = webhook_tls_from(from, port, &ca).await
                        && tls.write_all(&request).await.is_ok()
                    {
                        let mut answer = Vec::new();
                        let _ = tls.read_to_end(&mut answer).await;
                        if answer.starts_with(b"HTTP/1.1 200") {
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            })
        })
        .collect();
    Flood { sent, tasks }
}

/// Header bytes each stalled connection sends at most, in pieces, without ever ending them.
pub const HEADER_BYTES: usize = 360 << 10;
/// Addresses the connections come from, and connections from each.
pub const ADDRESSES: [&str; 4] = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
pub const PER_ADDRESS: usize = 150;

/// [`PER_ADDRESS`] connections from each of [`ADDRESSES`], each sending a request line and
/// header lines up to [`HEADER_BYTES`] and never the empty line that ends them; a connection
/// the server closes is opened again.
pub fn endless_headers(port: u16, ca: &[u8]) -> Flood {
    let sent = Arc::new(AtomicUsize::new(0));
    let line = format!("X-Padding: {}\r\n", "a".repeat(4000));
    let tasks = ADDRESSES
        .iter()
        .flat_map(|from| (0..PER_ADDRESS).map(move |_| from.parse::<IpAddr>().unwrap()))
        .map(|from| {
            let (sent, ca, line) = (Arc::clone(&sent), ca.to_vec(), line.clone());
            tokio::spawn(async move {
                loop {
                    if let Ok(mut tls) = webhook_tls_from(from, port, &ca).await
                        && tls
                            .write_all(b"POST /admission/sources HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                            .await
                            .is_ok()
                    {
                        let mut written = 0;
                        while written < HEADER_BYTES {
                            if tls.write_all(line.as_bytes()).await.is_err()
                                || tls.flush().await.is_err()
                            {
                                break;
                            }
                            written += line.len();
                            sent.fetch_add(line.len(), Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        // Hold what was sent until the server closes.
                        let mut buf = [0u8; 512];
                        while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        })
        .collect();
    Flood { sent, tasks }
}
