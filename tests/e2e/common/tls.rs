//! copyrator's webhook port as a client sees it: test certificates for 127.0.0.1, a TLS
//! connection trusting their CA, and hyper's HTTP/1.1 client over it.

use copyrator::certs::{self, CertRequest};

/// Writes a CA and a serving certificate for 127.0.0.1 into a new temporary directory.
pub fn test_certs() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let generated = certs::write(
        dir.path(),
        &CertRequest {
            dns_names: vec!["localhost".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
            valid_days: 2,
        },
    )
    .unwrap();
    (dir, generated.ca_cert_pem.into_bytes())
}

/// A TLS connection to copyrator's webhook port, trusting `ca`.
pub async fn webhook_tls(
    port: u16,
    ca: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    try_webhook_tls(port, ca).await.expect("TLS handshake")
}

/// A TLS connection to copyrator's webhook port, trusting `ca`; the handshake's error if it
/// fails (a replica that has no certificate yet refuses it).
pub async fn try_webhook_tls(
    port: u16,
    ca: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting to the webhook port");
    tls_over(tcp, ca).await
}

/// A TLS connection to copyrator's webhook port (on 127.0.0.1) from local address `from`
/// (another loopback address than the API server's 127.0.0.1), trusting `ca`; the error of
/// the connection or the handshake if either fails.
pub async fn webhook_tls_from(
    from: std::net::IpAddr,
    port: u16,
    ca: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((from, 0).into())?;
    let tcp = socket
        .connect((std::net::Ipv4Addr::LOCALHOST, port).into())
        .await?;
    tls_over(tcp, ca).await
}

async fn tls_over(
    tcp: tokio::net::TcpStream,
    ca: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(
            ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
            tcp,
        )
        .await
}

/// An HTTP/1.1 client on one TLS connection to the webhook port (hyper's).
pub struct WebhookClient {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl WebhookClient {
    pub async fn connect(port: u16, ca: &[u8]) -> Self {
        Self::over(webhook_tls(port, ca).await).await
    }

    /// As [`WebhookClient::connect`], from local address `from` ([`webhook_tls_from`]).
    pub async fn connect_from(from: std::net::IpAddr, port: u16, ca: &[u8]) -> Self {
        let tls = webhook_tls_from(from, port, ca)
            .await
            .expect("TLS to the webhook port");
        Self::over(tls).await
    }

    async fn over(tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Self {
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .expect("HTTP handshake");
        tokio::spawn(conn);
        Self { sender }
    }

    /// POSTs `body` to `path`; returns (status, body).
    pub async fn post(&mut self, path: &str, body: impl Into<bytes::Bytes>) -> (u16, String) {
        use http_body_util::BodyExt;
        let body: bytes::Bytes = body.into();
        let request = hyper::Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("content-length", body.len())
            .body(http_body_util::Full::new(body))
            .unwrap();
        self.sender.ready().await.expect("connection ready");
        let response = self.sender.send_request(request).await.expect("response");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}
