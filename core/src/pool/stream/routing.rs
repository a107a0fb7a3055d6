//! Routing: where each response of a stream goes. The driver hands every request it sends and
//! every response it receives to its [`Routing`], and asks it for what is outstanding when the
//! stream ends; the connector's [`Correlation`] says how a response finds its request.
//!
//! * [`Correlation::ById`]: a map from request id to the request in flight. The connector's id
//!   accessors (user code) run inside a guard: one that panics fails its request alone, not
//!   sent, or (on a response) ends the stream with the map left consistent.
//! * [`Correlation::InOrder`]: a queue of the requests in flight, oldest first; each response
//!   goes to the front. Nothing is read from the messages.
//!
//! Either way each entry holds its request's unit of depth until its response arrives or the
//! stream ends, whether or not its caller is still waiting: a cancelled request keeps its
//! place (in order: its response is consumed and discarded in turn), so depth is exact. The
//! driver owns its routing alone: no atomics, no locks.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use tokio::sync::{mpsc, oneshot};

use super::{Correlation, Pending, RequestError, Shared, StreamConnector};
use crate::error::Reach;
use crate::panic::{self, Panic};
use crate::protocol::slots::Reservation;

/// The requests in flight on one stream, and how its responses find them. The mode is
/// [`StreamConnector::CORRELATION`], a constant: each method's branch on it is resolved when
/// the driver is compiled for a connector, and the structure of the other mode stays empty
/// (neither allocates until it is used).
pub(super) struct Routing<C: StreamConnector> {
    /// By id: requests sent and awaiting a response, by id. At most `max_queue_depth`
    /// entries (each holds a unit of the slot's load); it grows as they arrive, nothing is
    /// reserved for the depth up front.
    by_id: HashMap<u64, InFlight<C>, IdHash>,
    /// By id: the next pool-assigned id.
    next_id: u64,
    /// In order: requests sent and awaiting a response, oldest first. At most
    /// `max_queue_depth` entries, as above.
    in_order: VecDeque<InFlight<C>>,
}

/// Where a request's outcome goes.
type Reply<C> = oneshot::Sender<
    Result<<C as StreamConnector>::Response, RequestError<<C as StreamConnector>::Error>>,
>;

/// A request on the wire: where its response goes, and the load it holds until then.
struct InFlight<C: StreamConnector> {
    reply: Reply<C>,
    reservation: Reservation,
}

/// A response arrived with no request outstanding on an in-order stream: the peer and the
/// pool are out of step, and the stream must end (see [`Correlation::InOrder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OutOfStep;

impl<C: StreamConnector> Routing<C> {
    pub(super) fn new() -> Self {
        Self {
            by_id: HashMap::with_hasher(IdHash),
            next_id: 0,
            in_order: VecDeque::new(),
        }
    }

    const IN_ORDER: bool = matches!(C::CORRELATION, Correlation::InOrder);

    /// Requests on the wire awaiting their responses.
    pub(super) fn len(&self) -> usize {
        if Self::IN_ORDER {
            self.in_order.len()
        } else {
            self.by_id.len()
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends one request on the stream and records where its response goes; by id, one hash
    /// lookup for a caller-supplied id, one per candidate for a pool-assigned one (the first,
    /// unless a caller-supplied id sits on it). A request whose caller is gone is not sent.
    /// Whatever does not go on the wire is failed (or dropped) here with its unit released.
    pub(super) fn forward(
        &mut self,
        shared: &Shared<C>,
        mut pending: Pending<C>,
        out: &mpsc::UnboundedSender<C::Request>,
    ) {
        if pending.reply.is_closed() {
            // The caller is gone before we sent anything: do not send.
            shared.table.release(pending.reservation);
            return;
        }
        if Self::IN_ORDER {
            // Queued only once it is on the wire, so the queue is exactly what the peer owes.
            if let Some(sent) = Self::put_on_wire(shared, pending, out) {
                self.in_order.push_back(sent);
            }
            return;
        }
        // The connector's id accessors are user code.
        let supplied = match panic::catch(|| shared.connector.request_id(&pending.request)) {
            Ok(id) => id,
            Err(panic) => return Self::refuse_panicked(shared, pending, panic),
        };
        let slot = match supplied {
            Some(id) => match self.by_id.entry(id) {
                Entry::Vacant(slot) => slot,
                Entry::Occupied(_) => {
                    shared.table.release(pending.reservation);
                    let _ = pending.reply.send(Err(RequestError::DuplicateId { id }));
                    return;
                }
            },
            None => loop {
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                if let Entry::Vacant(slot) = self.by_id.entry(id) {
                    let stamped =
                        panic::catch(|| shared.connector.set_request_id(&mut pending.request, id));
                    if let Err(panic) = stamped {
                        return Self::refuse_panicked(shared, pending, panic);
                    }
                    break slot;
                }
            },
        };
        if let Some(sent) = Self::put_on_wire(shared, pending, out) {
            slot.insert(sent);
        }
    }

    /// Hands `pending`'s request to the outbound half. Returns what must be recorded until its
    /// response arrives; if the outbound half is gone, fails the request (not sent) instead.
    fn put_on_wire(
        shared: &Shared<C>,
        pending: Pending<C>,
        out: &mpsc::UnboundedSender<C::Request>,
    ) -> Option<InFlight<C>> {
        let Pending {
            request,
            reply,
            reservation,
        } = pending;
        match out.send(request) {
            Ok(()) => Some(InFlight { reply, reservation }),
            Err(_) => {
                shared.table.release(reservation);
                let _ = reply.send(Err(RequestError::StreamEnded {
                    reach: Reach::NotSent,
                    source: None,
                }));
                None
            }
        }
    }

    /// Hands a response to its caller. The unit of load goes back **before** the caller is
    /// woken (here and wherever the driver ends a request): a caller that asks for room again
    /// as soon as it has its answer must find its old room free, or, with every stream full of
    /// other callers' requests, it would open a stream that is not needed (a ninth stream for
    /// 64 callers at depth 8, as `e2e/concurrency-64` showed).
    ///
    /// By id, the response's id accessor is user code: the driver calls this inside a guard,
    /// and the map is consistent wherever it panics (nothing is removed before it returns).
    ///
    /// # Errors
    /// [`OutOfStep`] for a response with nothing outstanding on an in-order stream (discarded
    /// and counted): the stream must end.
    pub(super) fn route(
        &mut self,
        shared: &Shared<C>,
        index: usize,
        response: C::Response,
    ) -> Result<(), OutOfStep> {
        let entry = if Self::IN_ORDER {
            self.in_order.pop_front()
        } else {
            shared
                .connector
                .response_id(&response)
                .and_then(|id| self.by_id.remove(&id))
        };
        match entry {
            Some(pending) => {
                shared.table.release(pending.reservation);
                if pending.reply.send(Ok(response)).is_err() {
                    shared.counters.late_responses.incr();
                }
                Ok(())
            }
            None => {
                shared.counters.unknown_responses.incr();
                if Self::IN_ORDER {
                    tracing::warn!(
                        slot = index,
                        "response with no request outstanding on an in-order stream: the \
                         peer is out of step, closing the stream"
                    );
                    Err(OutOfStep)
                } else {
                    tracing::debug!(slot = index, "response with unknown request id dropped");
                    Ok(())
                }
            }
        }
    }

    /// Takes every request still on the wire, to be failed (as maybe applied) with its unit
    /// released by the caller; the routing is empty afterwards.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = (Reply<C>, Reservation)> + '_ {
        let by_id = self.by_id.drain().map(|(_, entry)| entry);
        self.in_order
            .drain(..)
            .chain(by_id)
            .map(|entry| (entry.reply, entry.reservation))
    }

    /// Fails one request whose id accessor panicked: nothing was sent.
    fn refuse_panicked(shared: &Shared<C>, pending: Pending<C>, panic: Panic) {
        shared.counters.panics.incr();
        panic::report("stream request id", &panic);
        shared.table.release(pending.reservation);
        let _ = pending.reply.send(Err(RequestError::Panicked {
            reach: Reach::NotSent,
            panic,
        }));
    }
}

/// The hasher of a by-id routing map: request ids are plain `u64`s (pool-assigned ones
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
