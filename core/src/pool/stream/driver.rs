//! The driver: the task that owns one stream incarnation. It connects through the user's
//! [`Connector`], forwards queued requests, routes each response to its caller by request id,
//! releases each request's unit of depth when its response arrives or the stream ends, and
//! fails whatever is left when the stream ends.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot, watch};

use futures_core::Stream;

use super::{
    Connector, Incarnation, Outbound, Pending, RequestError, Shared, StreamRequest, StreamResponse,
};
use crate::error::Reach;
use crate::slots::{Generation, Reservation};
use crate::sync::Arc;

/// Owns one stream incarnation: connects, forwards, routes, and fails what is left at the end.
pub(super) struct Driver<C: Connector> {
    shared: Arc<Shared<C>>,
    index: usize,
    generation: Generation,
    incarnation: Arc<Incarnation<C>>,
    requests: mpsc::UnboundedReceiver<Pending<C>>,
    /// Requests sent and awaiting a response, by id; each holds its unit of load. At most
    /// `max_queue_depth` entries (each holds a unit of the slot's load).
    in_flight: HashMap<u64, InFlight<C>, IdHash>,
    /// Next pool-assigned id.
    next_id: u64,
    /// This connect is the circuit breaker's half-open probe.
    probe: bool,
}

/// Most responses and requests one driver poll handles before it yields to the other tasks on
/// its worker (a burst is at most a few streams' depth, so this rarely binds).
const DRIVER_BATCH: usize = 256;

/// The hasher of a driver's in-flight map: request ids are plain `u64`s (pool-assigned ones
/// sequential), so one folded multiply spreads them over the table; SipHash's DoS resistance
/// buys nothing here, since the map holds at most `max_queue_depth` entries, whatever the
/// ids, and a lookup cannot cost more than a scan of them.
#[derive(Clone, Copy, Default)]
struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`IdHash`].
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write_u64(&mut self, id: u64) {
        // Fold the 128-bit product (as foldhash and ahash do): both halves feed the low bits
        // (bucket index) and the high bits (control tag).
        let product = u128::from(self.0 ^ id) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed; this keeps any other key correct, if slow.
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }
}

/// A request on the wire: where its response goes, and the load it holds until then.
struct InFlight<C: Connector> {
    reply: oneshot::Sender<Result<C::Response, RequestError<C::Error>>>,
    reservation: Reservation,
}

/// How a stream's life ended.
enum End<E> {
    /// The peer ended or broke the stream.
    Failed(Option<Arc<E>>),
    /// The reaper retired the slot, or the pool was dropped.
    Stopped,
}

impl<C: Connector> Driver<C> {
    /// Spawns the driver of a freshly claimed incarnation on the pool's runtime.
    pub(super) fn spawn(
        shared: &Arc<Shared<C>>,
        reservation: Reservation,
        incarnation: Arc<Incarnation<C>>,
        requests: mpsc::UnboundedReceiver<Pending<C>>,
        probe: bool,
    ) {
        let shutdown = shared.shutdown.subscribe();
        let driver = Driver {
            shared: Arc::clone(shared),
            index: reservation.index(),
            generation: reservation.generation(),
            incarnation,
            requests,
            in_flight: HashMap::with_capacity_and_hasher(shared.table.max_load() as usize, IdHash),
            next_id: 0,
            probe,
        };
        shared.runtime.spawn(driver.run(shutdown));
    }

    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let connected = tokio::select! {
            result = self.shared.connector.connect(Outbound { rx: out_rx }) => result,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let mut inbound = match connected {
            Ok(inbound) => {
                self.shared.breaker.on_success();
                inbound
            }
            Err(error) => {
                self.shared.counters.connect_failures.incr();
                let now = self.shared.now_nanos(self.shared.clock.now());
                self.shared.breaker.on_failure(now, self.probe);
                tracing::warn!(slot = self.index, %error, "stream connect failed");
                let error = Arc::new(error);
                *self.incarnation.connect_error.lock() = Some(Arc::clone(&error));
                self.shared.table.begin_drain(self.index, self.generation);
                self.fail_queued(|| RequestError::Connect {
                    source: Arc::clone(&error),
                });
                return;
            }
        };
        self.shared.table.mark_ready(self.index, self.generation);
        // Built once and kept across wake-ups. Polling a pending `Notified` (or the watch's)
        // takes its Notify's lock, so they are polled only to register this task's waker (the
        // first time, and if the waker ever changes); on every other wake-up two atomic loads
        // say whether either has fired (`stop_requested`, and the watch's version via
        // `shutdown_probe`). No stop is missed: one that lands before the registering poll is
        // seen by it (`notify_one` leaves a permit; `wait_for` checks the value first), and one
        // that lands after it wakes this task, whose next poll sees the flag or the version.
        let incarnation = Arc::clone(&self.incarnation);
        let stopped = incarnation.stop.notified();
        let shutdown_probe = shutdown.clone();
        let shutting_down = shutdown.wait_for(|stop| *stop);
        tokio::pin!(stopped, shutting_down);
        let mut registered: Option<std::task::Waker> = None;
        let end = poll_fn(|cx| {
            if incarnation.stop_requested() || shutdown_probe.has_changed().unwrap_or(true) {
                return Poll::Ready(End::Stopped);
            }
            if !registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                if stopped.as_mut().poll(cx).is_ready()
                    || shutting_down.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(End::Stopped);
                }
                registered = Some(cx.waker().clone());
            }
            self.poll_serve(cx, &mut inbound, &out_tx)
        })
        .await;
        drop(out_tx);
        if let End::Failed(source) = end {
            self.shared.counters.stream_failures.incr();
            tracing::warn!(slot = self.index, error = ?source.as_ref().map(|e| e.to_string()), "stream ended");
            self.shared.table.begin_drain(self.index, self.generation);
            for (_, pending) in self.in_flight.drain() {
                self.shared.table.release(pending.reservation);
                let _ = pending.reply.send(Err(RequestError::StreamEnded {
                    reach: Reach::MaybeApplied,
                    source: source.clone(),
                }));
            }
            self.fail_queued(|| RequestError::StreamEnded {
                reach: Reach::NotSent,
                source: source.clone(),
            });
        } else {
            // Stopped: reaped (nothing in flight) or the pool is gone. Fail whatever is left,
            // draining first (as above) so that no caller woken here can join this stream.
            self.shared.table.begin_drain(self.index, self.generation);
            for (_, pending) in self.in_flight.drain() {
                self.shared.table.release(pending.reservation);
                let _ = pending.reply.send(Err(RequestError::StreamEnded {
                    reach: Reach::MaybeApplied,
                    source: None,
                }));
            }
            self.fail_queued(|| RequestError::Closed);
        }
    }

    /// One wake-up's work: routes every response that is ready, then forwards every request
    /// that is queued (a burst costs one poll, and the requests reach the outbound half
    /// together, so the transport can put them in one write). At most [`DRIVER_BATCH`] items
    /// per poll, then it yields so that other tasks on the worker run.
    ///
    /// It does not poll the inbound half again after forwarding: a response to what it just
    /// sent cannot be there yet over a network, and an in-process peer that answers at once
    /// wakes this task when it reads the request. Returning `Pending` is safe because both
    /// halves were last polled to `Pending` in this poll, which registered this task's waker.
    fn poll_serve(
        &mut self,
        cx: &mut Context<'_>,
        inbound: &mut C::Inbound,
        out: &mpsc::UnboundedSender<C::Request>,
    ) -> Poll<End<C::Error>> {
        let mut budget = DRIVER_BATCH;
        while budget > 0 {
            match Pin::new(&mut *inbound).poll_next(cx) {
                Poll::Ready(Some(Ok(response))) => {
                    budget -= 1;
                    self.route(response);
                }
                Poll::Ready(Some(Err(error))) => {
                    return Poll::Ready(End::Failed(Some(Arc::new(error))))
                }
                Poll::Ready(None) => return Poll::Ready(End::Failed(None)),
                Poll::Pending => break,
            }
        }
        while budget > 0 {
            match self.requests.poll_recv(cx) {
                Poll::Ready(Some(pending)) => {
                    budget -= 1;
                    self.forward(pending, out);
                }
                // Every sender is gone: the cell moved on to a new incarnation.
                Poll::Ready(None) => return Poll::Ready(End::Stopped),
                Poll::Pending => return Poll::Pending,
            }
        }
        // Out of budget with more, perhaps, on either half: come back after the other tasks
        // on this worker.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Stops accepting requests and fails every queued one as not sent.
    fn fail_queued(&mut self, error: impl Fn() -> RequestError<C::Error>) {
        self.requests.close();
        while let Ok(pending) = self.requests.try_recv() {
            self.shared.table.release(pending.reservation);
            let _ = pending.reply.send(Err(error()));
        }
    }

    /// Sends one request on the stream and records where its response goes; one hash lookup
    /// for a caller-supplied id, one per candidate for a pool-assigned one (the first, unless
    /// a caller-supplied id sits on it).
    fn forward(&mut self, mut pending: Pending<C>, out: &mpsc::UnboundedSender<C::Request>) {
        if pending.reply.is_closed() {
            // The caller is gone before we sent anything: do not send.
            self.shared.table.release(pending.reservation);
            return;
        }
        let slot = match pending.request.request_id() {
            Some(id) => match self.in_flight.entry(id) {
                Entry::Vacant(slot) => slot,
                Entry::Occupied(_) => {
                    self.shared.table.release(pending.reservation);
                    let _ = pending.reply.send(Err(RequestError::DuplicateId { id }));
                    return;
                }
            },
            None => loop {
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                if let Entry::Vacant(slot) = self.in_flight.entry(id) {
                    pending.request.set_request_id(id);
                    break slot;
                }
            },
        };
        let Pending {
            request,
            reply,
            reservation,
        } = pending;
        match out.send(request) {
            Ok(()) => {
                slot.insert(InFlight { reply, reservation });
            }
            Err(_) => {
                self.shared.table.release(reservation);
                let _ = reply.send(Err(RequestError::StreamEnded {
                    reach: Reach::NotSent,
                    source: None,
                }));
            }
        }
    }

    /// Hands a response to its caller. The unit of load goes back **before** the caller is
    /// woken (here and wherever the driver ends a request): a caller that asks for room again
    /// as soon as it has its answer must find its old room free, or, with every stream full of
    /// other callers' requests, it would open a stream that is not needed (a ninth stream for
    /// 64 callers at depth 8, as `e2e/concurrency-64` showed).
    fn route(&mut self, response: C::Response) {
        match self.in_flight.remove(&response.request_id()) {
            Some(pending) => {
                self.shared.table.release(pending.reservation);
                if pending.reply.send(Ok(response)).is_err() {
                    self.shared.counters.late_responses.incr();
                }
            }
            None => {
                self.shared.counters.unknown_responses.incr();
                tracing::debug!(
                    slot = self.index,
                    "response with unknown request id dropped"
                );
            }
        }
    }
}
