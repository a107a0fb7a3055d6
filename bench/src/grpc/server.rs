//! An in-process GetPage server on `127.0.0.1:0` for tests and benchmarks, with fault knobs.
//!
//! [`TestServer::start`] binds an ephemeral loopback port and serves [`PageService`] with
//! tonic on the given runtime. Every stream gets its own task that reads requests and answers
//! each with a [`GetPageResponse`] carrying the request's id, a status and (when OK) an 8 KiB
//! page stamped with the block and LSN (see [`super::page_stamp`]).
//!
//! # Knobs ([`Knobs`], shared and changeable while the server runs)
//!
//! | knob | effect |
//! |---|---|
//! | latency | each response is sent this long after its request arrives (requests on one stream are answered concurrently, as a pipelining server would) |
//! | slow every | every n-th request the server sees is answered that much later again (the fault bench's slow peer) |
//! | missing from block | requests for blocks at or above it get `NOT_FOUND` (in the response) |
//! | internal every | every n-th request the server sees gets `INTERNAL` (in the response) |
//! | end after | a stream ends (cleanly, or with an error if `end with error`) after sending n responses; requests it had not answered are lost |
//! | stall | requests are held unanswered until [`TestServer::release`] |
//! | hold opens | new streams are not answered (the call does not return) until [`TestServer::release_opens`] |
//!
//! A request whose `lsn` is [`END_STREAM_LSN`] ends the stream carrying it without an answer,
//! and [`TestServer::end_stream_holding`] ends the stream that holds a given stalled request:
//! together with stall they let a test end one chosen stream with known requests in flight.
//!
//! [`TestServer::stop`] refuses new connections (the listener closes) and breaks every open
//! one (reads see end-of-file and writes fail, so clients see the connection drop at once, as
//! if the process died); [`TestServer::restart`] listens again on the same port.
//!
//! The server only ever answers; it never sleeps except for the latency knob, and no test
//! asserts on time.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use prost::bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status, Streaming};

use super::{GetPageRequest, GetPageResponse, PageService, PageServiceServer, StatusCode};
use super::{END_STREAM_LSN, PAGE_SIZE};

/// The server's behaviour, changeable at any time; see the [module documentation](self).
#[derive(Debug)]
pub struct Knobs {
    /// Delay before each response, in nanoseconds (0: answer at once).
    latency_nanos: AtomicU64,
    /// Requests for blocks `>=` this get `NOT_FOUND`.
    missing_from_block: AtomicU32,
    /// Every n-th request gets `INTERNAL` (0: never).
    internal_every: AtomicU64,
    /// A stream ends after sending this many responses (0: never).
    end_after: AtomicU64,
    /// Whether an ended stream ends with an error status (`UNAVAILABLE`) rather than cleanly.
    end_with_error: AtomicBool,
    /// Whether requests are held unanswered.
    stalled: AtomicBool,
    /// Every n-th request is answered `slow_nanos` later than the others (0: none).
    slow_every: AtomicU64,
    /// The extra delay of a slow request, in nanoseconds.
    slow_nanos: AtomicU64,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            latency_nanos: AtomicU64::new(0),
            missing_from_block: AtomicU32::new(u32::MAX),
            internal_every: AtomicU64::new(0),
            end_after: AtomicU64::new(0),
            end_with_error: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            slow_every: AtomicU64::new(0),
            slow_nanos: AtomicU64::new(0),
        }
    }
}

impl Knobs {
    /// Sets the per-response latency.
    pub fn set_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_nanos.store(nanos, Ordering::Relaxed);
    }

    /// Requests for blocks `>= block` get `NOT_FOUND` (`u32::MAX`: none, the default).
    pub fn set_missing_from_block(&self, block: u32) {
        self.missing_from_block.store(block, Ordering::Relaxed);
    }

    /// Every `n`-th request the server sees gets `INTERNAL` (0: none, the default).
    pub fn set_internal_every(&self, n: u64) {
        self.internal_every.store(n, Ordering::Relaxed);
    }

    /// Each stream ends after sending `n` responses (0: never, the default); with `error`, it
    /// ends with an `UNAVAILABLE` status instead of cleanly.
    pub fn set_end_after(&self, n: u64, error: bool) {
        self.end_with_error.store(error, Ordering::Relaxed);
        self.end_after.store(n, Ordering::Relaxed);
    }

    /// Every `n`-th request the server sees is answered `extra` later than the latency says
    /// (0: none, the default).
    pub fn set_slow_every(&self, n: u64, extra: Duration) {
        let nanos = u64::try_from(extra.as_nanos()).unwrap_or(u64::MAX);
        self.slow_nanos.store(nanos, Ordering::Relaxed);
        self.slow_every.store(n, Ordering::Relaxed);
    }

    fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_nanos.load(Ordering::Relaxed))
    }

    /// The delay of the `seen`-th request: the latency, plus the slow delay for every n-th.
    fn delay(&self, seen: u64) -> Duration {
        let every = self.slow_every.load(Ordering::Relaxed);
        if every > 0 && seen.is_multiple_of(every) {
            self.latency() + Duration::from_nanos(self.slow_nanos.load(Ordering::Relaxed))
        } else {
            self.latency()
        }
    }
}

/// Counters the server keeps; read with [`TestServer::counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerCounts {
    /// TCP connections accepted.
    pub connections: u64,
    /// Streams (`GetPages` calls) opened.
    pub streams: u64,
    /// Streams open now.
    pub open_streams: u64,
    /// Requests received.
    pub requests: u64,
    /// Responses sent (any status).
    pub responses: u64,
    /// Streams the server ended on purpose (end after, end request, end holding).
    pub ended: u64,
}

/// A command to one stream's task.
#[derive(Debug)]
enum Command {
    /// Answer every held request (the server was released).
    Release,
    /// End the stream now, with an error status or cleanly.
    End { error: bool },
}

/// What the server knows about one open stream.
#[derive(Debug)]
struct StreamHandle {
    commands: mpsc::UnboundedSender<Command>,
    /// Blocks of the requests this stream holds while stalled.
    held: Arc<Mutex<Vec<u32>>>,
}

struct State {
    knobs: Knobs,
    /// The page image template (block and LSN are stamped over its start).
    template: Bytes,
    streams: Mutex<HashMap<u64, StreamHandle>>,
    next_stream: AtomicU64,
    /// Requests held (stalled) across all streams.
    held: watch::Sender<usize>,
    /// Whether new streams are held before they are answered.
    hold_opens: watch::Sender<bool>,
    /// Stream opens held now.
    held_opens: watch::Sender<usize>,
    connections: AtomicU64,
    stream_count: AtomicU64,
    requests: AtomicU64,
    responses: AtomicU64,
    ended: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One serving period: the kill switch and the serve task.
struct Running {
    kill: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// The in-process GetPage server; see the [module documentation](self).
pub struct TestServer {
    state: Arc<State>,
    addr: SocketAddr,
    runtime: Handle,
    running: Mutex<Option<Running>>,
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl TestServer {
    /// Binds `127.0.0.1:0` and starts serving on `runtime`.
    ///
    /// # Errors
    /// If the port cannot be bound.
    pub async fn start(runtime: Handle) -> io::Result<Arc<Self>> {
        let listener = bind("127.0.0.1:0".parse().map_err(io::Error::other)?)?;
        let addr = listener.local_addr()?;
        let mut template = vec![0u8; PAGE_SIZE];
        for (i, byte) in template.iter_mut().enumerate() {
            *byte = (i % 251) as u8;
        }
        let server = Arc::new(Self {
            state: Arc::new(State {
                knobs: Knobs::default(),
                template: Bytes::from(template),
                streams: Mutex::new(HashMap::new()),
                next_stream: AtomicU64::new(0),
                held: watch::Sender::new(0),
                hold_opens: watch::Sender::new(false),
                held_opens: watch::Sender::new(0),
                connections: AtomicU64::new(0),
                stream_count: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                responses: AtomicU64::new(0),
                ended: AtomicU64::new(0),
            }),
            addr,
            runtime,
            running: Mutex::new(None),
        });
        server.serve(listener);
        Ok(server)
    }

    /// The address the server listens on (the same across [`TestServer::restart`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for a tonic `Endpoint`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The knobs; changes apply to requests that arrive afterwards.
    pub fn knobs(&self) -> &Knobs {
        &self.state.knobs
    }

    /// A snapshot of the server's counters.
    pub fn counts(&self) -> ServerCounts {
        let s = &self.state;
        ServerCounts {
            connections: s.connections.load(Ordering::Relaxed),
            streams: s.stream_count.load(Ordering::Relaxed),
            open_streams: lock(&s.streams).len() as u64,
            requests: s.requests.load(Ordering::Relaxed),
            responses: s.responses.load(Ordering::Relaxed),
            ended: s.ended.load(Ordering::Relaxed),
        }
    }

    /// Holds every request from now on unanswered, until [`TestServer::release`].
    pub fn stall(&self) {
        self.state.knobs.stalled.store(true, Ordering::SeqCst);
    }

    /// Stops stalling and answers every held request.
    pub fn release(&self) {
        self.state.knobs.stalled.store(false, Ordering::SeqCst);
        for handle in lock(&self.state.streams).values() {
            let _ = handle.commands.send(Command::Release);
        }
    }

    /// Waits until at least `n` requests are held (stalled). No timing: it wakes on the change.
    pub async fn wait_held(&self, n: usize) {
        let mut held = self.state.held.subscribe();
        let _ = held.wait_for(|held| *held >= n).await;
    }

    /// Requests held (stalled) now.
    pub fn held(&self) -> usize {
        *self.state.held.borrow()
    }

    /// Holds every new stream unanswered (its call does not return) until
    /// [`TestServer::release_opens`].
    pub fn hold_opens(&self) {
        self.state.hold_opens.send_replace(true);
    }

    /// Answers the held stream opens and stops holding new ones.
    pub fn release_opens(&self) {
        self.state.hold_opens.send_replace(false);
    }

    /// Waits until at least `n` stream opens are held. No timing: it wakes on the change.
    pub async fn wait_held_opens(&self, n: usize) {
        let mut held = self.state.held_opens.subscribe();
        let _ = held.wait_for(|held| *held >= n).await;
    }

    /// Ends the stream holding a stalled request for `block` (with an `UNAVAILABLE` status if
    /// `error`, else cleanly) and returns the blocks of every request it held (all of them are
    /// lost). `None` if no stream holds such a request.
    pub fn end_stream_holding(&self, block: u32, error: bool) -> Option<Vec<u32>> {
        let streams = lock(&self.state.streams);
        let handle = streams.values().find(|h| lock(&h.held).contains(&block))?;
        let blocks = lock(&handle.held).clone();
        let _ = handle.commands.send(Command::End { error });
        Some(blocks)
    }

    /// Ends every open stream.
    pub fn end_all_streams(&self, error: bool) {
        for handle in lock(&self.state.streams).values() {
            let _ = handle.commands.send(Command::End { error });
        }
    }

    /// Refuses connections from now on and breaks every open one (see the module docs).
    /// Returns once the serving task has finished.
    pub async fn stop(&self) {
        let running = lock(&self.running).take();
        if let Some(running) = running {
            running.kill.send_replace(true);
            let _ = running.task.await;
        }
    }

    /// Listens again on the same port after [`TestServer::stop`] (a no-op while serving).
    ///
    /// # Errors
    /// If the port cannot be bound again.
    pub fn restart(&self) -> io::Result<()> {
        if lock(&self.running).is_some() {
            return Ok(());
        }
        let listener = bind(self.addr)?;
        self.serve(listener);
        Ok(())
    }

    fn serve(&self, listener: TcpListener) {
        let (kill, killed) = watch::channel(false);
        let incoming = Incoming {
            listener,
            killed: killed.clone(),
            state: Arc::clone(&self.state),
        };
        let service = PageServiceServer::new(Service {
            state: Arc::clone(&self.state),
            killed: killed.clone(),
        })
        .max_decoding_message_size(1 << 20)
        .max_encoding_message_size(1 << 20);
        let mut shutdown = killed;
        let task = self.runtime.spawn(async move {
            let router = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(service);
            let _ = router
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = shutdown.wait_for(|killed| *killed).await;
                })
                .await;
        });
        *lock(&self.running) = Some(Running { kill, task });
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(running) = lock(&self.running).take() {
            running.kill.send_replace(true);
        }
    }
}

/// A loopback listener with `SO_REUSEADDR`, so that a restart can bind the same port.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Accepted connections, each wrapped so that the kill switch breaks it.
struct Incoming {
    listener: TcpListener,
    killed: watch::Receiver<bool>,
    state: Arc<State>,
}

impl Stream for Incoming {
    type Item = io::Result<KillableIo>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match this.listener.poll_accept(cx) {
            Poll::Ready(Ok((io, _peer))) => {
                let _ = io.set_nodelay(true);
                this.state.connections.fetch_add(1, Ordering::Relaxed);
                let mut killed = this.killed.clone();
                Poll::Ready(Some(Ok(KillableIo {
                    io,
                    killed: Box::pin(async move {
                        let _ = killed.wait_for(|killed| *killed).await;
                    }),
                    dead: false,
                })))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Some(Err(error))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A server-side connection that reads end-of-file and fails writes once the server is
/// stopped, so the connection drops as if the process had died.
struct KillableIo {
    io: TcpStream,
    /// Resolves when the server is stopped. Polled by every read and write, so a stop wakes
    /// the connection's pending read.
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    dead: bool,
}

impl KillableIo {
    fn is_dead(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.dead && self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
        }
        self.dead
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "test server stopped")
}

impl AsyncRead for KillableIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_dead(cx) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.is_dead(cx) {
            return Poll::Ready(Err(broken()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_dead(cx) {
            return Poll::Ready(Err(broken()));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl Connected for KillableIo {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

/// The `PageService` implementation: one task per stream.
struct Service {
    state: Arc<State>,
    killed: watch::Receiver<bool>,
}

/// What a stream task sends to its response stream.
enum Out {
    Response(GetPageResponse),
    /// End the response stream, with this status or cleanly.
    End(Option<Status>),
}

/// The response half of a stream: yields responses until an `Out::End`.
pub struct ResponseStream {
    rx: mpsc::UnboundedReceiver<Out>,
    done: bool,
}

impl fmt::Debug for ResponseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseStream")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Stream for ResponseStream {
    type Item = Result<GetPageResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(Out::Response(response))) => Poll::Ready(Some(Ok(response))),
            Poll::Ready(Some(Out::End(status))) => {
                this.done = true;
                Poll::Ready(status.map(Err))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[tonic::async_trait]
impl PageService for Service {
    type GetPagesStream = ResponseStream;

    async fn get_pages(
        &self,
        request: Request<Streaming<GetPageRequest>>,
    ) -> Result<Response<Self::GetPagesStream>, Status> {
        if *self.killed.borrow() {
            return Err(Status::unavailable("test server stopped"));
        }
        if *self.state.hold_opens.borrow() {
            let mut hold = self.state.hold_opens.subscribe();
            let mut killed = self.killed.clone();
            // Counted while held, also if the client gives up (this future is then dropped).
            let _held = HeldOpen::new(&self.state);
            tokio::select! {
                _ = hold.wait_for(|hold| !*hold) => {}
                _ = killed.wait_for(|killed| *killed) => {}
            }
            if *self.killed.borrow() {
                return Err(Status::unavailable("test server stopped"));
            }
        }
        let requests = request.into_inner();
        let (out, rx) = mpsc::unbounded_channel();
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let held = Arc::new(Mutex::new(Vec::new()));
        let id = self.state.next_stream.fetch_add(1, Ordering::Relaxed);
        self.state.stream_count.fetch_add(1, Ordering::Relaxed);
        lock(&self.state.streams).insert(
            id,
            StreamHandle {
                commands,
                held: Arc::clone(&held),
            },
        );
        let task = StreamTask {
            state: Arc::clone(&self.state),
            id,
            out,
            held,
            held_responses: Vec::new(),
            sent: 0,
        };
        tokio::spawn(task.run(requests, commands_rx, self.killed.clone()));
        Ok(Response::new(ResponseStream { rx, done: false }))
    }
}

/// One held stream open, counted in `State::held_opens` while it lives.
struct HeldOpen<'a> {
    state: &'a State,
}

impl<'a> HeldOpen<'a> {
    fn new(state: &'a State) -> Self {
        state.held_opens.send_modify(|n| *n += 1);
        Self { state }
    }
}

impl Drop for HeldOpen<'_> {
    fn drop(&mut self) {
        self.state.held_opens.send_modify(|n| *n -= 1);
    }
}

/// One stream's server side.
struct StreamTask {
    state: Arc<State>,
    id: u64,
    out: mpsc::UnboundedSender<Out>,
    /// Blocks of held requests (shared with [`TestServer::end_stream_holding`]).
    held: Arc<Mutex<Vec<u32>>>,
    /// The responses to the held requests, in arrival order.
    held_responses: Vec<GetPageResponse>,
    /// Responses sent or scheduled on this stream.
    sent: u64,
}

impl StreamTask {
    async fn run(
        mut self,
        mut requests: Streaming<GetPageRequest>,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut killed: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                biased;
                _ = killed.wait_for(|killed| *killed) => break,
                command = commands.recv() => match command {
                    Some(Command::Release) => self.release(),
                    Some(Command::End { error }) => {
                        self.end(error);
                        break;
                    }
                    None => break,
                },
                request = requests.message() => match request {
                    Ok(Some(request)) => {
                        if !self.handle(request) {
                            break;
                        }
                    }
                    // The client closed its half or the connection broke.
                    Ok(None) | Err(_) => break,
                },
            }
        }
        self.forget_held();
        lock(&self.state.streams).remove(&self.id);
    }

    /// Handles one request; `false` when the stream has ended.
    fn handle(&mut self, request: GetPageRequest) -> bool {
        let seen = self.state.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let knobs = &self.state.knobs;
        if request.lsn == END_STREAM_LSN {
            self.end(knobs.end_with_error.load(Ordering::Relaxed));
            return false;
        }
        let response = self.respond(&request, seen);
        if knobs.stalled.load(Ordering::SeqCst) {
            lock(&self.held).push(request.block);
            self.held_responses.push(response);
            self.state.held.send_modify(|held| *held += 1);
            return true;
        }
        let delay = knobs.delay(seen);
        self.send(response, delay)
    }

    /// Sends (or schedules, after `latency`) one response; `false` when that ended the stream.
    fn send(&mut self, response: GetPageResponse, latency: Duration) -> bool {
        let knobs = &self.state.knobs;
        self.sent += 1;
        let end_after = knobs.end_after.load(Ordering::Relaxed);
        let last = end_after > 0 && self.sent >= end_after;
        let end = last.then(|| end_status(knobs.end_with_error.load(Ordering::Relaxed)));
        if latency.is_zero() {
            self.state.responses.fetch_add(1, Ordering::Relaxed);
            let _ = self.out.send(Out::Response(response));
            if let Some(end) = end {
                self.state.ended.fetch_add(1, Ordering::Relaxed);
                let _ = self.out.send(Out::End(end));
            }
        } else {
            let out = self.out.clone();
            let state = Arc::clone(&self.state);
            tokio::spawn(async move {
                tokio::time::sleep(latency).await;
                if out.send(Out::Response(response)).is_ok() {
                    state.responses.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(end) = end {
                    state.ended.fetch_add(1, Ordering::Relaxed);
                    let _ = out.send(Out::End(end));
                }
            });
        }
        !last
    }

    fn respond(&self, request: &GetPageRequest, seen: u64) -> GetPageResponse {
        let knobs = &self.state.knobs;
        let request_id = request.request_id.unwrap_or(0);
        let internal_every = knobs.internal_every.load(Ordering::Relaxed);
        let failure = if request.block >= knobs.missing_from_block.load(Ordering::Relaxed) {
            Some((StatusCode::NotFound, "no such block"))
        } else if internal_every > 0 && seen.is_multiple_of(internal_every) {
            Some((StatusCode::Internal, "injected internal error"))
        } else {
            None
        };
        match failure {
            Some((status, reason)) => GetPageResponse {
                request_id,
                status: status.into(),
                reason: reason.to_string(),
                page: Bytes::new(),
            },
            None => {
                let mut page = BytesMut::with_capacity(PAGE_SIZE);
                page.put_u32_le(request.block);
                page.put_u64_le(request.lsn);
                page.put_slice(&self.state.template[12..]);
                GetPageResponse {
                    request_id,
                    status: StatusCode::Ok.into(),
                    reason: String::new(),
                    page: page.freeze(),
                }
            }
        }
    }

    fn release(&mut self) {
        let responses = std::mem::take(&mut self.held_responses);
        self.forget_held();
        for response in responses {
            let latency = self.state.knobs.latency();
            if !self.send(response, latency) {
                break;
            }
        }
    }

    /// Drops the held list and its share of the server-wide held count.
    fn forget_held(&mut self) {
        let n = {
            let mut held = lock(&self.held);
            let n = held.len();
            held.clear();
            n
        };
        self.held_responses.clear();
        if n > 0 {
            self.state.held.send_modify(|held| *held -= n);
        }
    }

    fn end(&mut self, error: bool) {
        self.state.ended.fetch_add(1, Ordering::Relaxed);
        let _ = self.out.send(Out::End(end_status(error)));
    }
}

fn end_status(error: bool) -> Option<Status> {
    error.then(|| Status::unavailable("test server ended the stream"))
}
