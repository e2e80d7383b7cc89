//! A TCP proxy in front of the API server that can make connections go silent the way a
//! dropped conntrack entry or a load balancer's idle timeout does: no byte forwarded either
//! way, no FIN, no RST, the sockets left open.

use std::{
    net::SocketAddr,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::watch,
    task::JoinSet,
};

/// See the module documentation. Its tasks end when it is dropped.
pub struct Blackhole {
    pub addr: SocketAddr,
    /// Bumped to silence every connection open at that moment.
    epoch: watch::Sender<u64>,
    /// New connections are accepted and then never forwarded.
    block_new: Arc<AtomicBool>,
    _tasks: JoinSet<()>,
}

impl Blackhole {
    /// A proxy on a free loopback port forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (epoch, _) = watch::channel(0u64);
        let block_new = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        let (epochs, blocked) = (epoch.clone(), Arc::clone(&block_new));
        tasks.spawn(async move {
            // Connections live in this set: dropping the proxy aborts the accept loop and,
            // with it, every connection it holds.
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                if blocked.load(Ordering::Relaxed) {
                    connections.spawn(async move {
                        let _held = client;
                        std::future::pending::<()>().await
                    });
                    continue;
                }
                let silenced = epochs.subscribe();
                connections.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, silenced.clone()),
                        pump(server_read, client_write, silenced),
                    );
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Self {
            addr,
            epoch,
            block_new,
            _tasks: tasks,
        }
    }

    /// Every connection open now stops forwarding, both ways, and stays open; new ones are
    /// forwarded as before.
    pub fn silence_open_connections(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// New connections are accepted but never forwarded (until [`Blackhole::forward_new`]).
    pub fn block_new_connections(&self) {
        self.block_new.store(true, Ordering::Relaxed);
    }

    /// New connections are forwarded again.
    pub fn forward_new(&self) {
        self.block_new.store(false, Ordering::Relaxed);
    }

    /// A copy of the kubeconfig at `kubeconfig` whose cluster is reached through this proxy
    /// (the API server's certificate is for 127.0.0.1, whatever the port), written to `out`.
    pub fn kubeconfig(&self, kubeconfig: &Path, out: &Path) {
        let mut config = kube::config::Kubeconfig::read_from(kubeconfig).expect("a kubeconfig");
        for cluster in config
            .clusters
            .iter_mut()
            .filter_map(|c| c.cluster.as_mut())
        {
            cluster.server = Some(format!("https://{}", self.addr));
        }
        // JSON is YAML.
        std::fs::write(out, serde_json::to_string(&config).expect("JSON")).expect("writing");
    }
}

/// The API server's address in `kubeconfig` (its current cluster's, or the only one).
pub fn api_server_addr(kubeconfig: &Path) -> SocketAddr {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("a kubeconfig");
    let server = config
        .clusters
        .iter()
        .find_map(|c| c.cluster.as_ref()?.server.clone())
        .expect("a cluster with a server");
    let authority = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    authority.parse().expect("the server is IP:PORT")
}

/// Copies `from` to `to` until either ends, or until the proxy silences the connection: then
/// it holds both sockets open, forwarding nothing, until the proxy is dropped.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut silenced: watch::Receiver<u64>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = silenced.changed() => break,
        };
        match read {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
    let _held = (from, to);
    std::future::pending::<()>().await
}
