//! Linearizability of `StreamPool`: histories recorded from real multi-threaded runs (tasks on
//! a multi-threaded runtime acquiring, trying, sending, dropping unsent guards, killing
//! streams, while a reaper task moves a mock clock and reaps) are checked against the slot
//! table's sequential model, the one the `slots_ops` fuzz target compares the table with
//! (`fuzz/src/slots_model.rs`): streams fill lowest index first to their queue depth, then the
//! lowest Empty slot is claimed, never more than `max_streams`; a failed stream drains and
//! empties when its last request ends; a reaper pass retires a stream idle since the pass
//! before. The checker is `lin/mod.rs` (Wing and Gong's search).
//!
//! What each recorded operation means to the model:
//!
//! * `acquire().await` and `try_acquire()`: one unit where the model says (its stream index),
//!   or, for a try, no capacity;
//! * a send, answered or failed: its unit goes back (the driver releases it before it replies);
//!   dropping a guard unsent: the same;
//! * a kill (a request the in-process peer answers by failing the stream): the stream drains,
//!   and the killer's unit goes back;
//! * a reap at the mock clock's time: the number of streams retired. A pass is not atomic:
//!   it visits the slots one at a time, in index order, each with a load and a CAS, while the
//!   others run. So it is recorded as its steps (a start, one step per slot, an end that
//!   returns the count), all with the pass's own call and return stamps; the model applies
//!   them in order, each where the search puts it, and a step may leave its slot as it was if
//!   another operation changed that slot during the pass (the pass's CAS lost to it).
//!
//! A reservation is checked as steps (see `steps`): its scan, the scan's choice and the CAS
//! that takes the slot (the slot must still have room, or still be Empty, when it is made).
//! A scan reads the hints at one moment and takes the slot at a later one, perhaps after a
//! preemption during which other callers filled and emptied the slots below; as one atomic
//! step such a reservation fits no point of its interval, as two it fits exactly where it
//! happened. Nor is the scan itself one moment: it looks at the slots lowest first, each at its
//! own moment, and joins the first with room. So a join of slot `k` is checked as a scan that
//! passed each slot below `k` at a moment it had no room (in order, the model's states
//! between operations) and found room in `k`; this was refused once the model took the scan
//! as one moment, in a run where a scan found slot 0 full, then slot 0 and slot 1 were
//! released in that order, and the scan joined slot 1. A scan may also pass a slot whose room
//! bit another scan under way is clearing (see `Pool::advance_scans`). A claim happens at a
//! moment with no room anywhere (a claimer looks for room once more after reading the
//! vacancies), in the lowest Empty slot, or, after a scan that passed every slot, in a slot it
//! met Empty through a stale room bit; a try that gets nothing passed every slot and found no
//! Empty one.
//!
//! A caller that waited may resolve with the unit a release handed it (the FIFO hand-off: its
//! choice is the slot of the release just before it). A hand-off can also reach a waiter while
//! its own last scan is under way; if that scan then finds room, the waiter returns that slot
//! and gives the handed unit back as it leaves the queue, so for that moment it holds two
//! units, one of which no operation shows (see `Waiting`). While the model took every
//! hand-off as the waiter's result, it refused a run where tries answered no capacity for
//! 250 stamps beside what it had as an Empty slot, a killed stream's, while a caller waited:
//! a unit of that slot handed to the waiter during its stalled last scan kept it Draining.
//!
//! A stream's driver marks it ready after it connects, an internal step no operation returns;
//! the model lets a starting stream have become ready before a reaper step on its slot (the
//! only operation whose result depends on it). A reaped stream's slot stays Draining with one
//! unit, the reaper's, until the stream's driver has let go of the stream and releases it (the
//! slot then empties): another internal step, which the model lets happen before any
//! operation after the reaper's step (`Pool::letting_go`). Waits cancelled midway are not part of these histories (a
//! waiter handed a unit and then dropped holds it for a moment no operation shows); the stress
//! tests and the shuttle tests cover them.

#[allow(dead_code)]
#[path = "../../fuzz/src/bytes.rs"]
mod bytes;
mod lin;
#[allow(dead_code)]
#[path = "../../fuzz/src/slots_model.rs"]
mod slots_model;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::__internal::slots::Phase;
use slotpool::stream::{
    Connector, Outbound, RequestError, StreamGuard, StreamPool, StreamRequest, StreamResponse,
};
use slotpool::{Reach, TryAcquireError};
use tokio::sync::mpsc;

use lin::{check, concurrent, Event, Recorder, Spec};
use slots_model::Model;

// ---------------------------------------------------------------------------------------------
// The sequential specification
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// `acquire().await`, and whether its first poll was pending (it waited).
    Acquire {
        waited: bool,
    },
    TryAcquire,
    /// The steps a reservation is checked as (see [`steps`]): its scan starts, the scan
    /// chooses a slot, and the CAS takes it; or, for a try that got nothing, the scan ends
    /// empty-handed (`Exhausted`).
    Scan {
        id: usize,
    },
    Exhausted {
        id: usize,
    },
    Choose {
        id: usize,
        waited: bool,
    },
    Take {
        id: usize,
    },
    /// The hand-off a waiter may receive while its own last scan is under way (see
    /// [`Waiting`]): a release just before it hands its unit over (the unit stays on its
    /// slot), or nothing reached it.
    Handed {
        id: usize,
    },
    /// After its take, a waiter gives back the unit handed to it, if one was.
    GiveBack {
        id: usize,
    },
    /// A send (answered or failed) or an unsent guard dropped, on this stream.
    Release(usize),
    /// The stream was failed by a request its peer answered with an error.
    Kill(usize),
    /// A reaper pass, recorded as its steps, all with the pass's call and return stamps: the
    /// start, one step per slot in index order, and the end (which returns the count).
    ReapStart,
    ReapSlot {
        index: usize,
        now: u64,
    },
    ReapEnd,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ret {
    Stream(usize),
    NoCapacity,
    Done,
    Reaped(usize),
}

/// The stream pool as the slot-table model sees it, with its idle timeout and the reaper
/// pass in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pool {
    model: Model,
    timeout: u64,
    pass: Option<Pass>,
    /// The slot of the operation just applied, if it was a release: a release hands its unit
    /// to the oldest waiter, whatever slot a reservation would pick.
    released: Option<usize>,
    /// Reservations between their choice and their take: (id, slot, whether a claim), sorted.
    chosen: Vec<(usize, usize, bool)>,
    /// Scans under way, sorted by id. See [`Pool::advance_scans`].
    scans: Vec<ScanState>,
    /// Acquires that waited, between their choice (or their hand-off) and their give-back,
    /// sorted by id. See [`Waiting`].
    waits: Vec<Waiting>,
    /// Reaped slots (index, generation) whose driver has not yet let go of its stream: each
    /// Draining with the reaper's unit, which the driver releases once the stream's halves
    /// are gone (`SlotTable::reap_idle_holding`), at a moment no operation shows.
    letting_go: Vec<(usize, u32)>,
}

/// A waiting acquire's hidden hand-off and give-back.
///
/// A waiter queues and then scans once more (`WaitState::poll_inner` in
/// `core/src/protocol/gate.rs`: register, then attempt), and a release may hand it a unit
/// (`SlotTable::release_in`, `Gate::handoff`) while that scan is under way: the unit stays on
/// its slot, held in the waiter's queue node. If the scan then finds room itself, the waiter
/// returns the slot it found and gives the handed unit back as it leaves the queue (the
/// `finish` of `poll_inner`, `leave(Resolved)`, whose `give_back` is `SlotTable::release` in
/// `SlotTable::poll_reserve_slow`, `core/src/protocol/slots/mod.rs`). For that moment it holds
/// two units, and the handed one is seen by no operation: a try can find its slot full, or a
/// killed stream Draining instead of Empty. (A recorded run was refused for it: a waiter
/// called at stamp 829 returned stream 0 at 1141; slot 2's stream was killed at 884, and until
/// 1141 seven tries answered no capacity and nobody got slot 2, which the model had Empty. A
/// unit of slot 2 handed to the waiter while its thread stalled in its last scan explains
/// that: it kept the killed stream Draining until the waiter gave it back.)
///
/// So a waited acquire is checked with two more steps: `Handed`, right after a release of a
/// slot that still takes reservations, once its scan has started and unless it resolved with
/// that hand-off itself (the choice the release hands over), or as nothing; and `GiveBack`
/// after its take, which releases the handed unit (and may hand it on to the next waiter).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Waiting {
    id: usize,
    /// Its `Handed` step is done.
    handed: bool,
    /// The slot of the unit handed to it and not yet given back.
    unit: Option<usize>,
    /// It resolved with a unit handed to it (its choice was the release just before).
    direct: bool,
    /// Its take is done.
    taken: bool,
}

/// A reservation's scan under way.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ScanState {
    id: usize,
    /// The slots its cursor can be at, a bit each; bit `slots.len()`: it passed them all.
    cursors: u8,
    /// The slots it can have looked at while they had no room (whose room bits it may be
    /// clearing: see [`Pool::advance_scans`]).
    met_full: u8,
}

/// A reaper pass between its start and its end.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pass {
    /// The slot whose step comes next.
    next: usize,
    retired: usize,
    /// Slots another operation changed since the pass started (a bit each): the pass's CAS on
    /// such a slot may have failed, and a failed CAS leaves the slot as it is.
    touched: u64,
}

impl Pool {
    /// A scan looks at the slots one at a time, lowest first, each look at its own moment,
    /// and passes a slot that has no room when it looks; a pass that crossed a change starts
    /// over from the lowest slot. So a scan can be at slot `c` now if it can have been at
    /// `c - 1` and that slot had no room at some moment since: each scan's set of possible
    /// cursors grows, with the model's state after every operation (the states between two
    /// operations), to its closure.
    ///
    /// A scan looks at a slot through its room bit, and the bit can be clear while the slot
    /// has room: a scan that met the slot full clears the bit and then rechecks the slot and
    /// sets the bit again (rule 2 of the slot table), and a release in between (which sets
    /// the bit before that clear) leaves the room hidden until the recheck. The clearer is a
    /// scan still under way. So a scan may also pass a slot that another scan under way can
    /// have met full. (Seen in a recorded run: a try joined slot 2 beside room in slot 0,
    /// while a slower try that had met slot 0 full was still scanning.)
    fn advance_scans(&mut self) {
        let slots = self.model.slots.len();
        let no_room: Vec<bool> = (0..slots).map(|i| !self.model.has_room(i)).collect();
        loop {
            let before = self.scans.clone();
            for scan in &mut self.scans {
                for (c, &full) in no_room.iter().enumerate() {
                    if full && scan.cursors & (1 << c) != 0 {
                        scan.met_full |= 1 << c;
                    }
                }
            }
            for i in 0..self.scans.len() {
                let hidden = self
                    .scans
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .fold(0, |bits, (_, other)| bits | other.met_full);
                let scan = &mut self.scans[i];
                for (c, &full) in no_room.iter().enumerate() {
                    if (full || hidden & (1 << c) != 0) && scan.cursors & (1 << c) != 0 {
                        scan.cursors |= 1 << (c + 1);
                    }
                }
            }
            if self.scans == before {
                return;
            }
        }
    }

    /// Ends the scan of reservation `id`: its possible cursors.
    fn end_scan(&mut self, id: usize) -> Option<u8> {
        let at = self.scans.iter().position(|s| s.id == id)?;
        Some(self.scans.remove(at).cursors)
    }

    /// The hidden steps of waiting acquire `id` so far (made on its first one).
    fn waiting(&mut self, id: usize) -> &mut Waiting {
        let at = match self.waits.binary_search_by_key(&id, |w| w.id) {
            Ok(at) => at,
            Err(at) => {
                self.waits.insert(
                    at,
                    Waiting {
                        id,
                        handed: false,
                        unit: None,
                        direct: false,
                        taken: false,
                    },
                );
                at
            }
        };
        &mut self.waits[at]
    }

    /// Notes that an operation changed slot `index` while a pass runs.
    fn touch(&mut self, index: usize) {
        if let Some(pass) = &mut self.pass {
            pass.touched |= 1 << index;
        }
    }
}

impl Spec for Pool {
    type Op = Op;
    type Ret = Ret;

    fn apply(&self, op: &Op, ret: &Ret) -> Vec<Self> {
        let mut states = Vec::new();
        for before in self.let_go_or_not() {
            for mut state in before.step(op, ret) {
                state.advance_scans();
                if !states.contains(&state) {
                    states.push(state);
                }
            }
        }
        states
    }
}

impl Pool {
    /// This state, and every state in which some of the reaped streams' drivers have let go
    /// since (each releases the reaper's unit: its Draining slot empties, and hands nothing to
    /// a waiter, as a release on a slot that takes no reservations does not).
    fn let_go_or_not(&self) -> Vec<Pool> {
        let mut states = vec![self.clone()];
        for &(index, generation) in &self.letting_go {
            let mut more = Vec::new();
            for state in &states {
                let mut gone = state.clone();
                gone.letting_go.retain(|&held| held != (index, generation));
                if !gone.model.release(index, generation) {
                    continue;
                }
                gone.touch(index);
                gone.released = None;
                gone.advance_scans();
                more.push(gone);
            }
            states.extend(more);
        }
        states
    }
}

impl Pool {
    /// `op` returning `ret` (the scans under way advance afterwards, in [`Spec::apply`]).
    fn step(&self, op: &Op, ret: &Ret) -> Vec<Self> {
        let mut next = self.clone();
        next.released = None;
        match (op, ret) {
            (Op::Scan { id }, _) => {
                // From the lowest slot; a pass that starts over later is the same set.
                next.scans.push(ScanState {
                    id: *id,
                    cursors: 1,
                    met_full: 0,
                });
                next.scans.sort_unstable();
                vec![next]
            }
            (Op::Exhausted { id }, Ret::NoCapacity) => {
                // Every slot passed (none had room when looked at), and no Empty slot to
                // claim now (the vacancy word is read at one moment).
                let passed_all = next
                    .end_scan(*id)
                    .is_some_and(|cursors| cursors & (1 << next.model.slots.len()) != 0);
                let empty = next.model.slots.iter().any(|s| s.phase == Phase::Empty);
                if passed_all && !empty {
                    vec![next]
                } else {
                    vec![]
                }
            }
            // The scan's choice: a slot with room its scan reached, or a claim (below); or, for
            // a caller that waited, the slot of the release just before it (a release hands
            // its unit to the oldest waiter, whatever slot a scan would pick).
            (Op::Choose { id, waited }, Ret::Stream(index)) => {
                let Some(cursors) = next.end_scan(*id) else {
                    return vec![];
                };
                let mut direct = false;
                let choice = if cursors & (1 << index) != 0 && next.model.has_room(*index) {
                    // Its scan reached this slot (passing the lower ones) and found room.
                    Some(false)
                } else if next.model.next() == Some((*index, true))
                    || (cursors & (1 << next.model.slots.len()) != 0
                        && next.model.slots[*index].phase == Phase::Empty
                        && next.model.slots[*index].generation > 0)
                {
                    // A claim: with no room anywhere, the lowest Empty slot (a claimer looks
                    // for room once more after it reads the vacancies); or, after a scan that
                    // passed every slot, a slot it met Empty through a stale room bit (a slot
                    // retired under it, whose vacancy may not be published yet; a slot never
                    // used has no room bit to be stale), which it claims without looking for
                    // room again.
                    Some(true)
                } else if *waited && self.released == Some(*index) {
                    direct = true;
                    Some(false)
                } else {
                    None
                };
                if *waited {
                    let waiting = next.waiting(*id);
                    if direct {
                        // Resolved with the hand-off: no other unit was handed to it.
                        if waiting.unit.is_some() {
                            return vec![];
                        }
                        waiting.direct = true;
                    }
                }
                match choice {
                    Some(claim) => {
                        next.chosen.push((*id, *index, claim));
                        next.chosen.sort_unstable();
                        vec![next]
                    }
                    None => vec![],
                }
            }
            // The CAS that takes the chosen slot: a claim while it is still Empty, a join while
            // it still has room.
            (Op::Take { id }, Ret::Stream(index)) => {
                let Some(at) = next.chosen.iter().position(|c| c.0 == *id && c.1 == *index) else {
                    return vec![];
                };
                let (_, _, claim) = next.chosen.remove(at);
                let joins = next.model.has_room(*index);
                let slot = &mut next.model.slots[*index];
                if claim && slot.phase == Phase::Empty {
                    slot.phase = Phase::Starting;
                    slot.load = 1;
                } else {
                    // A join, or a claim that lost the slot to another claimer and joins the
                    // stream it is starting (as the table does when its claim's CAS fails).
                    if !joins {
                        return vec![];
                    }
                    slot.load += 1;
                }
                slot.used = true;
                next.touch(*index);
                if let Ok(at) = next.waits.binary_search_by_key(id, |w| w.id) {
                    next.waits[at].taken = true;
                }
                vec![next]
            }
            (Op::Handed { id }, _) => {
                let scanning = self.scans.iter().any(|s| s.id == *id)
                    || self.waits.iter().any(|w| w.id == *id);
                let waiting = next.waiting(*id);
                if waiting.handed {
                    return vec![];
                }
                waiting.handed = true;
                let direct = waiting.direct;
                let mut states = vec![next.clone()];
                // The release just before handed its unit over: it stays on the slot (one that
                // takes reservations: a release hands off only there).
                if let Some(index) = self.released.filter(|&i| {
                    scanning
                        && !direct
                        && matches!(self.model.slots[i].phase, Phase::Starting | Phase::Ready)
                }) {
                    let mut handed = next;
                    handed.model.slots[index].load += 1;
                    handed.waiting(*id).unit = Some(index);
                    states.push(handed);
                }
                states
            }
            (Op::GiveBack { id }, _) => {
                let Ok(at) = next.waits.binary_search_by_key(id, |w| w.id) else {
                    return vec![];
                };
                let waiting = next.waits.remove(at);
                if !waiting.handed || !waiting.taken {
                    return vec![];
                }
                if let Some(index) = waiting.unit {
                    // `SlotTable::release` of a unit it holds: it frees it (retiring a Draining
                    // slot at its last unit) or hands it to the next waiter.
                    let generation = next.model.slots[index].generation;
                    if !next.model.release(index, generation) {
                        return vec![];
                    }
                    next.touch(index);
                    next.released = Some(index);
                }
                vec![next]
            }
            (Op::Release(index), Ret::Done) => {
                let generation = next.model.slots[*index].generation;
                if next.model.release(*index, generation) {
                    next.touch(*index);
                    next.released = Some(*index);
                    vec![next]
                } else {
                    vec![]
                }
            }
            (Op::Kill(index), Ret::Done) => {
                let generation = next.model.slots[*index].generation;
                match next.model.drain(*index, generation) {
                    Some(_) => {
                        next.touch(*index);
                        vec![next]
                    }
                    None => vec![],
                }
            }
            (Op::ReapStart, Ret::Done) if next.pass.is_none() => {
                next.pass = Some(Pass {
                    next: 0,
                    retired: 0,
                    touched: 0,
                });
                vec![next]
            }
            (Op::ReapSlot { index, now }, Ret::Done) => {
                let Some(pass) = next.pass.clone() else {
                    return vec![];
                };
                if pass.next != *index {
                    return vec![];
                }
                // A starting stream may have connected (and been marked ready) by now: the
                // step may find it either way.
                let mut found = vec![next.clone()];
                if next.model.slots[*index].phase == Phase::Starting {
                    let mut ready = next.clone();
                    ready.model.slots[*index].phase = Phase::Ready;
                    found.push(ready);
                }
                let mut states = Vec::new();
                for mut candidate in found {
                    let before = candidate.model.slots[*index];
                    let retired = candidate.model.reap_slot(*index, *now, candidate.timeout);
                    if retired {
                        // Held for the driver: Draining with the reaper's unit, not Empty.
                        let slot = &mut candidate.model.slots[*index];
                        slot.phase = Phase::Draining;
                        slot.load = 1;
                        slot.generation = before.generation;
                        candidate.letting_go.push((*index, before.generation));
                        candidate.letting_go.sort_unstable();
                    }
                    candidate.pass = Some(Pass {
                        next: index + 1,
                        retired: pass.retired + usize::from(retired),
                        ..pass.clone()
                    });
                    states.push(candidate);
                }
                if pass.touched & (1 << index) != 0 {
                    // Its CAS lost to that operation: the slot stays as it was.
                    let mut skipped = next.clone();
                    skipped.pass = Some(Pass {
                        next: index + 1,
                        ..pass
                    });
                    states.push(skipped);
                }
                states.dedup();
                states
            }
            (Op::ReapEnd, Ret::Reaped(count)) => match &next.pass {
                Some(pass) if pass.next == next.model.slots.len() && pass.retired == *count => {
                    next.pass = None;
                    vec![next]
                }
                _ => vec![],
            },
            _ => vec![],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// An in-process peer: echoes every request, and fails the stream on a kill request
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Req {
    id: Option<u64>,
    kill: bool,
}

impl StreamRequest for Req {
    fn request_id(&self) -> Option<u64> {
        self.id
    }
    fn set_request_id(&mut self, id: u64) {
        self.id = Some(id);
    }
}

#[derive(Debug)]
struct Resp(u64);

impl StreamResponse for Resp {
    fn request_id(&self) -> u64 {
        self.0
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the peer failed the stream")]
struct Killed;

struct Inbound(mpsc::UnboundedReceiver<Result<Resp, Killed>>);

impl Stream for Inbound {
    type Item = Result<Resp, Killed>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

struct Peer;

impl Connector for Peer {
    type Request = Req;
    type Response = Resp;
    type Error = Killed;
    type Inbound = Inbound;

    async fn connect(&self, mut outbound: Outbound<Req>) -> Result<Inbound, Killed> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(req) =
                std::future::poll_fn(|cx| Pin::new(&mut outbound).poll_next(cx)).await
            {
                let answer = if req.kill {
                    Err(Killed)
                } else {
                    Ok(Resp(req.id.unwrap_or(u64::MAX)))
                };
                if tx.send(answer).is_err() {
                    break;
                }
            }
        });
        Ok(Inbound(rx))
    }
}

// ---------------------------------------------------------------------------------------------
// Recording a history
// ---------------------------------------------------------------------------------------------

const MAX_STREAMS: usize = 3;
const DEPTH: usize = 2;
const IDLE: Duration = Duration::from_millis(1);

struct Run {
    pool: StreamPool<Peer>,
    time: slotpool::MockClock,
    base: slotpool::Instant,
    clock: slotpool::Clock,
    recorder: Recorder,
    /// One kill in flight at a time, so each kill fails the incarnation its killer holds.
    killing: AtomicBool,
}

type Log = Vec<Event<Pool>>;

impl Run {
    fn record<T>(&self, log: &mut Log, thread: usize, op: Op, f: impl FnOnce() -> (T, Ret)) -> T {
        self.recorder
            .finish(log, thread, self.recorder.stamp(), op, f)
    }

    /// Sends on `guard` (a kill if asked and no other kill is in flight) and records the
    /// release (and the drain) it stands for.
    async fn send(&self, log: &mut Log, thread: usize, guard: StreamGuard<'_, Peer>, kill: bool) {
        let index = guard.stream_index().expect("a fresh guard");
        let kill = kill
            && self
                .killing
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        let call = self.recorder.stamp();
        let result = guard.send(Req { id: None, kill }).await;
        let done = self.recorder.stamp();
        if kill {
            self.killing.store(false, Ordering::SeqCst);
        }
        // A kill that reached the peer failed the stream under it: it was in flight when the
        // stream ended (as were the other requests on it, which fail the same way). One sent
        // on a guard whose stream had failed already was refused, as not sent, and fails
        // nothing.
        let failed_it = matches!(
            &result,
            Err(RequestError::StreamEnded {
                reach: Reach::MaybeApplied,
                source: Some(_),
            })
        );
        if kill && failed_it {
            log.push(Event {
                thread,
                op: Op::Kill(index),
                ret: Ret::Done,
                call,
                done,
            });
        }
        log.push(Event {
            thread,
            op: Op::Release(index),
            ret: Ret::Done,
            call,
            done,
        });
    }
}

async fn worker(run: Arc<Run>, thread: usize, seed: u64, ops: usize) -> Log {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut log = Vec::new();
    let mut held: Option<StreamGuard<'_, Peer>> = None;
    for _ in 0..ops {
        match held.take() {
            None => {
                // Wait only with nothing in hand, so the waits always end.
                let guard = if rng.random_bool(0.5) {
                    let call = run.recorder.stamp();
                    let mut acquire = std::pin::pin!(run.pool.acquire());
                    let first =
                        std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
                    let (acquired, waited) = match first {
                        Poll::Ready(acquired) => (acquired, false),
                        Poll::Pending => (acquire.await, true),
                    };
                    let guard = acquired.expect("pool open");
                    let done = run.recorder.stamp();
                    log.push(Event {
                        thread,
                        op: Op::Acquire { waited },
                        ret: Ret::Stream(guard.stream_index().expect("a fresh guard")),
                        call,
                        done,
                    });
                    Some(guard)
                } else {
                    try_acquire(&run, &mut log, thread)
                };
                held = guard;
            }
            Some(guard) => match rng.random_range(0..10) {
                0..=4 => run.send(&mut log, thread, guard, false).await,
                5 => run.send(&mut log, thread, guard, true).await,
                6..=7 => {
                    let index = guard.stream_index().expect("a fresh guard");
                    run.record(&mut log, thread, Op::Release(index), || {
                        drop(guard);
                        ((), Ret::Done)
                    });
                }
                _ => {
                    // A second unit while holding one (without waiting), then both go back.
                    let second = try_acquire(&run, &mut log, thread);
                    run.send(&mut log, thread, guard, false).await;
                    if let Some(second) = second {
                        run.send(&mut log, thread, second, false).await;
                    }
                }
            },
        }
        tokio::task::yield_now().await;
    }
    if let Some(guard) = held {
        run.send(&mut log, thread, guard, false).await;
    }
    log
}

fn try_acquire<'a>(run: &'a Run, log: &mut Log, thread: usize) -> Option<StreamGuard<'a, Peer>> {
    run.record(log, thread, Op::TryAcquire, || {
        match run.pool.try_acquire() {
            Ok(guard) => {
                let index = guard.stream_index().expect("a fresh guard");
                (Some(guard), Ret::Stream(index))
            }
            Err(TryAcquireError::NoCapacity) => (None, Ret::NoCapacity),
            Err(e) => panic!("unexpected {e:?}"),
        }
    })
}

/// Advances the mock clock by the idle timeout and reaps, `passes` times.
async fn reaper(run: Arc<Run>, thread: usize, passes: usize) -> Log {
    let mut log = Vec::new();
    for _ in 0..passes {
        run.time.advance(IDLE);
        let now = run.clock.now();
        let nanos = u64::try_from(now.duration_since(run.base).as_nanos()).expect("fits");
        let call = run.recorder.stamp();
        let reaped = run.pool.reap(now);
        let done = run.recorder.stamp();
        let step = |op, ret| Event {
            thread,
            op,
            ret,
            call,
            done,
        };
        log.push(step(Op::ReapStart, Ret::Done));
        log.extend(
            (0..MAX_STREAMS).map(|index| step(Op::ReapSlot { index, now: nanos }, Ret::Done)),
        );
        log.push(step(Op::ReapEnd, Ret::Reaped(reaped)));
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }
    log
}

/// One recorded run: `tasks` workers of `ops` operations each and a reaper, on a fresh pool.
async fn record_history(seed: u64, tasks: usize, ops: usize) -> Log {
    let (clock, time) = slotpool::Clock::mock();
    let base = clock.now();
    let pool = StreamPool::builder(Peer)
        .max_streams(MAX_STREAMS)
        .max_queue_depth(DEPTH)
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(clock.clone())
        .build()
        .expect("valid configuration");
    let run = Arc::new(Run {
        pool,
        time,
        base,
        clock,
        recorder: Recorder::default(),
        killing: AtomicBool::new(false),
    });
    let mut handles = Vec::new();
    for t in 0..tasks {
        let run = Arc::clone(&run);
        handles.push(tokio::spawn(worker(run, t, seed * 100 + t as u64, ops)));
    }
    handles.push(tokio::spawn(reaper(Arc::clone(&run), tasks, ops / 2)));
    let mut history = Vec::new();
    for handle in handles {
        history.extend(handle.await.expect("a task panicked"));
    }
    let stats = run.pool.stats();
    assert_eq!(
        (stats.table.in_flight, stats.table.waiting),
        (0, 0),
        "{stats:?}"
    );
    history
}

/// The history as the specification checks it: each reservation that got a stream becomes
/// its two steps, both with the reservation's own call and return stamps. A scan reads the
/// hints and picks a slot; the CAS that takes it comes later, after a preemption perhaps, and
/// other callers may have moved in between (filled a slot below, emptied one). One atomic step
/// would have to explain both at one point, and a scan preempted long enough fails a run that
/// did nothing wrong; as two, the choice must be the lowest slot with room (or an Empty slot)
/// when it was made, and the take must still find room (or Empty) when it is made.
fn steps(history: &[Event<Pool>]) -> Vec<Event<Pool>> {
    let mut steps = Vec::with_capacity(history.len() * 3);
    for (id, event) in history.iter().enumerate() {
        let step = |op| Event {
            op,
            ..event.clone()
        };
        let waited = match (&event.op, &event.ret) {
            (Op::Acquire { waited }, Ret::Stream(_)) => *waited,
            (Op::TryAcquire, Ret::Stream(_)) => false,
            (Op::TryAcquire, Ret::NoCapacity) => {
                steps.push(step(Op::Scan { id }));
                steps.push(step(Op::Exhausted { id }));
                continue;
            }
            _ => {
                steps.push(event.clone());
                continue;
            }
        };
        steps.push(step(Op::Scan { id }));
        steps.push(Event {
            op: Op::Choose { id, waited },
            ..event.clone()
        });
        steps.push(Event {
            op: Op::Take { id },
            ..event.clone()
        });
        if waited {
            steps.push(step(Op::Handed { id }));
            steps.push(step(Op::GiveBack { id }));
        }
    }
    steps
}

fn initial() -> Pool {
    Pool {
        model: Model::new(MAX_STREAMS, DEPTH as u32, false),
        timeout: u64::try_from(IDLE.as_nanos()).expect("fits"),
        pass: None,
        released: None,
        chosen: Vec::new(),
        scans: Vec::new(),
        waits: Vec::new(),
        letting_go: Vec::new(),
    }
}

/// Real multi-threaded runs of a pool of three streams of depth two, six tasks and a reaper
/// each: every recorded history is linearizable with respect to the slot-table model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_pool_histories_are_linearizable() {
    const TASKS: usize = 6;
    const OPS: usize = 80;
    let runs = lin::runs(60);
    let mut events = 0;
    let mut configurations = 0;
    let mut kills = 0;
    let mut waited = 0;
    let mut reaped = 0;
    let mut overlapping = 0;
    for seed in 0..runs {
        let history = record_history(seed, TASKS, OPS).await;
        overlapping += concurrent(&history);
        kills += history
            .iter()
            .filter(|e| matches!(e.op, Op::Kill(_)))
            .count();
        waited += history
            .iter()
            .filter(|e| matches!(e.op, Op::Acquire { waited: true }))
            .count();
        reaped += history
            .iter()
            .map(|e| match e.ret {
                Ret::Reaped(n) => n,
                _ => 0,
            })
            .sum::<usize>();
        match check(initial(), &steps(&history), 2_000_000) {
            Ok(searched) => {
                events += searched.events;
                configurations += searched.configurations;
            }
            Err(violation) => {
                let dumped = match std::env::var_os(DUMP) {
                    Some(path) => {
                        std::fs::write(&path, dump(&history)).expect("the dump file is writable");
                        format!(
                            " (history written to {}; replay it with {REPLAY} set to that file)",
                            path.to_string_lossy()
                        )
                    }
                    None => format!(" (set {DUMP} to a file to keep the history)"),
                };
                panic!("run {seed}{dumped}: {}", report(&history, &violation))
            }
        }
    }
    eprintln!(
        "{runs} histories, {events} events ({overlapping} concurrent with another), \
         {configurations} configurations searched, {kills} kills, {waited} acquires that \
         waited, {reaped} streams reaped"
    );
    // Waits depend on scheduling (every unit taken at once): counted, not required.
    assert!(kills > 0, "no stream was killed");
    assert!(reaped > 0, "no stream was reaped");
    assert!(
        overlapping > events / 10,
        "too few concurrent operations to check anything: {overlapping} of {events}"
    );
}

/// Why `history` is refused: where the search got stuck, and the events around it.
fn report(history: &[Event<Pool>], violation: &lin::Violation<Pool>) -> String {
    // The neighbourhood of the first event that fits nowhere, in call order.
    let from = violation.stuck_on.iter().map(|e| e.call).min().unwrap_or(0);
    let to = violation.stuck_on.iter().map(|e| e.done).max().unwrap_or(0);
    let mut near: Vec<_> = history
        .iter()
        .filter(|e| e.done + 40 >= from && e.call <= to)
        .collect();
    near.sort_by_key(|e| e.call);
    format!(
        "not linearizable. {} steps linearized ({} events, {} steps in all), ending in {:?}; \
         none of these fits next: {:#?}\nevents around them: {:#?}",
        violation.longest.len(),
        history.len(),
        steps(history).len(),
        violation.state,
        violation.stuck_on,
        near
    )
}

// ---------------------------------------------------------------------------------------------
// Keeping a refused history and checking it again
// ---------------------------------------------------------------------------------------------

/// The variable naming a file the recorded test writes a refused history to.
const DUMP: &str = "LIN_STREAM_DUMP";
/// The variable naming a history file (as written through [`DUMP`]) for [`replay`] to check.
const REPLAY: &str = "LIN_STREAM_REPLAY";

/// A history as text, one event a line: `thread call done op -> ret`, e.g.
/// `3 890 891 try -> none`, `0 829 1141 acquire waited -> stream 0`, `6 827 828 reap-slot 2
/// 20000000 -> done`.
fn dump(history: &[Event<Pool>]) -> String {
    let mut text = String::new();
    for e in history {
        let op = match &e.op {
            Op::Acquire { waited: true } => "acquire waited".to_string(),
            Op::Acquire { waited: false } => "acquire".to_string(),
            Op::TryAcquire => "try".to_string(),
            Op::Release(index) => format!("release {index}"),
            Op::Kill(index) => format!("kill {index}"),
            Op::ReapStart => "reap-start".to_string(),
            Op::ReapSlot { index, now } => format!("reap-slot {index} {now}"),
            Op::ReapEnd => "reap-end".to_string(),
            step => panic!("{step:?} is a step of the check, never recorded"),
        };
        let ret = match &e.ret {
            Ret::Stream(index) => format!("stream {index}"),
            Ret::NoCapacity => "none".to_string(),
            Ret::Done => "done".to_string(),
            Ret::Reaped(count) => format!("reaped {count}"),
        };
        text += &format!("{} {} {} {op} -> {ret}\n", e.thread, e.call, e.done);
    }
    text
}

/// The history [`dump`] wrote (`None` for a line it cannot have written).
fn parse(text: &str) -> Option<Vec<Event<Pool>>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (left, ret) = line.split_once(" -> ")?;
            let mut words = left.split_whitespace();
            let mut number = || words.next()?.parse::<u64>().ok();
            let (thread, call, done) = (number()?, number()?, number()?);
            let index = |n: Option<u64>| n.and_then(|n| usize::try_from(n).ok());
            let op = match words.next()? {
                "acquire" => Op::Acquire {
                    waited: words.next() == Some("waited"),
                },
                "try" => Op::TryAcquire,
                "release" => Op::Release(index(words.next()?.parse().ok())?),
                "kill" => Op::Kill(index(words.next()?.parse().ok())?),
                "reap-start" => Op::ReapStart,
                "reap-slot" => Op::ReapSlot {
                    index: index(words.next()?.parse().ok())?,
                    now: words.next()?.parse().ok()?,
                },
                "reap-end" => Op::ReapEnd,
                _ => return None,
            };
            let mut ret = ret.split_whitespace();
            let ret = match (ret.next()?, ret.next()) {
                ("stream", Some(n)) => Ret::Stream(n.parse().ok()?),
                ("none", None) => Ret::NoCapacity,
                ("done", None) => Ret::Done,
                ("reaped", Some(n)) => Ret::Reaped(n.parse().ok()?),
                _ => return None,
            };
            Some(Event {
                thread: usize::try_from(thread).ok()?,
                op,
                ret,
                call,
                done,
            })
        })
        .collect()
}

/// Checks the history file that [`REPLAY`] names, if it is set (to study a history the
/// recorded test refused, after a change to the specification). Always: a recorded history
/// comes back from its text as it was, and is accepted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay() {
    if let Some(path) = std::env::var_os(REPLAY) {
        let text = std::fs::read_to_string(&path).expect("the history file is readable");
        let history = parse(&text).expect("a history written by the recorded test");
        if let Err(violation) = check(initial(), &steps(&history), 20_000_000) {
            panic!(
                "{}: {}",
                path.to_string_lossy(),
                report(&history, &violation)
            );
        }
        eprintln!("{}: linearizable", path.to_string_lossy());
    }
    let history = record_history(7, 6, 80).await;
    let text = dump(&history);
    let again = parse(&text).expect("the dump parses");
    assert_eq!(dump(&again), text);
    assert_eq!(again.len(), history.len());
    assert!(check(initial(), &steps(&again), 2_000_000).is_ok());
}

// ---------------------------------------------------------------------------------------------
// The checker can fail
// ---------------------------------------------------------------------------------------------

/// A history the model cannot explain is reported: two tries that overlap nothing, the
/// second claiming stream 1 while stream 0 still has room.
#[test]
fn the_checker_rejects_a_second_stream_opened_early() {
    let event = |op, ret, call, done| Event::<Pool> {
        thread: 0,
        op,
        ret,
        call,
        done,
    };
    let fine = [
        event(Op::TryAcquire, Ret::Stream(0), 0, 1),
        event(Op::TryAcquire, Ret::Stream(0), 2, 3),
        event(Op::TryAcquire, Ret::Stream(1), 4, 5),
    ];
    assert!(check(initial(), &steps(&fine), 1000).is_ok());
    let early = [
        event(Op::TryAcquire, Ret::Stream(0), 0, 1),
        event(Op::TryAcquire, Ret::Stream(1), 2, 3),
    ];
    assert!(check(initial(), &steps(&early), 1000).is_err());
    // Overlapping, the same results are explained by either order only if one fits: the
    // second stream still cannot open before the first is full.
    let overlapping = [
        event(Op::TryAcquire, Ret::Stream(1), 0, 3),
        event(Op::TryAcquire, Ret::Stream(0), 1, 2),
    ];
    assert!(check(initial(), &steps(&overlapping), 1000).is_err());
    // A release that overlaps a try lets the try see capacity or not.
    let racing = [
        event(Op::TryAcquire, Ret::Stream(0), 0, 1),
        event(Op::TryAcquire, Ret::Stream(0), 2, 3),
        event(Op::TryAcquire, Ret::Stream(1), 4, 5),
        event(Op::Release(1), Ret::Done, 6, 9),
        event(Op::TryAcquire, Ret::Stream(1), 7, 8),
    ];
    assert!(check(initial(), &steps(&racing), 1000).is_ok());
    // A scan preempted between its choice and its CAS: it chose to claim slot 1 (slot 0 full),
    // lost it to another claimer and joined that stream at the end, after slot 0 had room
    // again. No single point of its interval explains Stream(1): where slot 1 is the pick,
    // counting its unit there from then on overfills slot 1 at 7-8, and from 9 on slot 0 has
    // room. Its two steps do.
    let preempted = [
        event(Op::TryAcquire, Ret::Stream(1), 0, 20),
        event(Op::TryAcquire, Ret::Stream(0), 1, 2),
        event(Op::TryAcquire, Ret::Stream(0), 3, 4),
        event(Op::TryAcquire, Ret::Stream(1), 5, 6),
        event(Op::TryAcquire, Ret::Stream(1), 7, 8),
        event(Op::Release(0), Ret::Done, 9, 10),
        event(Op::Release(1), Ret::Done, 11, 12),
        event(Op::Release(1), Ret::Done, 13, 14),
    ];
    assert!(check(initial(), &steps(&preempted), 1000).is_ok());
}

/// A waiter handed a unit while its own last scan is under way holds both for a moment, and
/// gives the handed one back after its take (see [`Waiting`]): the history of the recorded
/// run that showed it, cut to its bones. Slot 2's unit goes to the waiter, whose scan is
/// stalled; the stream is killed, stays Draining on the handed unit, and a try finds no
/// capacity; the waiter then joins slot 0 and gives slot 2's unit back, which empties it for
/// the next try to claim. A caller that never waited is handed nothing, so the same history
/// with an acquire that did not wait is refused.
#[test]
fn a_waiter_gives_back_a_unit_handed_to_it_during_its_own_scan() {
    let event = |thread, op, ret, call, done| Event::<Pool> {
        thread,
        op,
        ret,
        call,
        done,
    };
    let history = |waited| {
        vec![
            event(1, Op::TryAcquire, Ret::Stream(0), 0, 1),
            event(2, Op::TryAcquire, Ret::Stream(0), 2, 3),
            event(3, Op::TryAcquire, Ret::Stream(1), 4, 5),
            event(4, Op::TryAcquire, Ret::Stream(1), 6, 7),
            event(5, Op::TryAcquire, Ret::Stream(2), 8, 9),
            event(6, Op::TryAcquire, Ret::Stream(2), 10, 11),
            event(0, Op::Acquire { waited }, Ret::Stream(0), 12, 21),
            event(5, Op::Release(2), Ret::Done, 13, 14),
            event(6, Op::Kill(2), Ret::Done, 15, 16),
            event(6, Op::Release(2), Ret::Done, 15, 16),
            event(7, Op::TryAcquire, Ret::NoCapacity, 17, 18),
            event(1, Op::Release(0), Ret::Done, 19, 20),
            event(7, Op::TryAcquire, Ret::Stream(2), 22, 23),
        ]
    };
    assert!(check(initial(), &steps(&history(true)), 10_000).is_ok());
    assert!(check(initial(), &steps(&history(false)), 10_000).is_err());
    // Nor is the unit handed to a waiter that resolves with it, here or later: resolved with
    // slot 2's unit, it has no other to give back.
    let mut direct = history(true);
    direct[6].ret = Ret::Stream(2);
    assert!(check(initial(), &steps(&direct), 10_000).is_err());
}
