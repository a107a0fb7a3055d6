//! The blackhole: a TCP proxy between the pools and the server that can stop forwarding, in
//! both directions, without closing anything.
//!
//! Each accepted connection gets a connection of its own to the upstream and two pipes, one
//! per direction. A pipe reads what arrives, then waits while the proxy is paused, then
//! writes it on: a pause holds every byte read after it began (and every byte the kernel
//! buffers behind them) until [`Proxy::resume`], and neither socket sees a FIN or an RST. To
//! the client this is a network path that went silent: its queries get no answer, its
//! connection attempts no handshake, and nothing tells it the connection is dead. After the
//! resume everything held is delivered in order, so a connection whose caller gave up on a
//! query is still a good connection (its late answers are the driver's to discard).
//!
//! It counts what it carries in a [`Counts`]: each accepted connection is an attempt (also one
//! whose upstream refuses it: the server is down), each one forwarded is live until either
//! side ends it.
//!
//! This file owns the sockets and the switch; it knows nothing of PostgreSQL, gRPC or pools.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::counted::Counts;

/// Bytes a pipe reads at a time.
const CHUNK: usize = 16 * 1024;

/// A forwarding proxy on `127.0.0.1` with a pause switch. Dropping it closes every connection
/// it carries (their tasks are aborted with the accept loop's).
#[derive(Debug)]
pub struct Proxy {
    /// Where clients connect.
    addr: SocketAddr,
    /// `true` while forwarding is stopped.
    paused: watch::Sender<bool>,
    /// Connections accepted (attempts that reached the proxy) and those carried now.
    counts: Arc<Counts>,
    /// The accept loop; it owns the pipes' tasks.
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of `127.0.0.1` and forwards every connection to `upstream`.
    /// Call within a tokio runtime: the proxy's tasks run there.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (paused, watching) = watch::channel(false);
        let counts = Arc::new(Counts::default());
        let task = tokio::spawn(accept(listener, upstream, watching, Arc::clone(&counts)));
        Ok(Self {
            addr,
            paused,
            counts,
            task,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding in both directions; nothing is closed.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Forwards again, what was held first.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.counts.attempts()
    }

    /// What it carried: an attempt per accepted connection ([`Counts::attempts_between`]
    /// says when), and the connections it forwards now ([`Counts::live`]).
    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The accept loop: a pair of pipes per connection, all owned here so that aborting this task
/// closes them.
async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    paused: watch::Receiver<bool>,
    counts: Arc<Counts>,
) {
    let mut pipes = JoinSet::new();
    loop {
        tokio::select! {
            incoming = listener.accept() => {
                let Ok((client, _)) = incoming else { continue };
                counts.attempt();
                pipes.spawn(carry(client, upstream, paused.clone(), Arc::clone(&counts)));
            }
            // Reap finished connections so the set does not grow over a long run.
            Some(_) = pipes.join_next(), if !pipes.is_empty() => {}
        }
    }
}

/// One connection: connects to the upstream (a refused connect closes the client's, as the
/// server itself would have) and runs both pipes to their end, counted live meanwhile.
async fn carry(
    client: TcpStream,
    upstream: SocketAddr,
    paused: watch::Receiver<bool>,
    counts: Arc<Counts>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _live = counts.track(());
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pipe(client_read, server_write, paused.clone()),
        pipe(server_read, client_write, paused),
    );
}

/// Copies `from` to `to` until either ends, holding each chunk while paused; passes the end
/// on as a half-close.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut paused: watch::Receiver<bool>) {
    let mut buf = vec![0; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // The sender lives as long as the proxy; its end means the proxy is going away.
        if paused.wait_for(|paused| !*paused).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
