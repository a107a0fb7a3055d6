//! Batches: items handed to one bulk task at a time.
//!
//! The protocol is told on the type.

use std::fmt;

use crate::sync::{trace_transition, AtomicBool, Mutex, Ordering};

/// Items queued for a bulk task, with at most one such task scheduled at a time.
///
/// A [`Batch`] hands items to a task that processes them in bulk, with at most one such task
/// scheduled at a time (the session pool queues new sessions for their event readers this way,
/// one starter task per batch rather than one reader task per session). [`Batch::push`]
/// queues under a mutex and then claims the `scheduled` flag (a load, then a swap only if it
/// was clear); the one push that claims it schedules the drain. The drain's
/// [`Batch::take`] clears the flag **before** it takes the items. So an item is either taken
/// by a drain whose take locks the queue after the push unlocked it, or its push sees the flag
/// clear and schedules a new drain: the swaps are `AcqRel`, and the mutex orders a clear that
/// came before the push. No item is left queued with the flag set and no drain to come.
pub struct Batch<T> {
    /// Queued items. INVARIANT: not empty only while `scheduled` is set or a push that will
    /// set it is under way.
    items: Mutex<Vec<T>>,
    /// Whether a drain is scheduled and has not yet taken the items.
    scheduled: AtomicBool,
}

impl<T> Batch<T> {
    /// An empty batch with no drain scheduled.
    pub fn new() -> Self {
        Self {
            items: Mutex::new(Vec::new()),
            scheduled: AtomicBool::new(false),
        }
    }

    /// Queues `item`. Returns `true` when the caller must schedule a drain (one that calls
    /// [`Batch::take`], or [`Batch::unschedule`] if it can never run).
    pub fn push(&self, item: T) -> bool {
        self.items.lock().push(item);
        // The load keeps pushes during a scheduled batch from writing the flag's line.
        let claimed =
            !self.scheduled.load(Ordering::Relaxed) && !self.scheduled.swap(true, Ordering::AcqRel);
        trace_transition!("batch: pushed (schedules a drain: {})", claimed);
        claimed
    }

    /// The scheduled drain's call: unschedules itself, then takes every queued item (a push
    /// after this schedules the next drain).
    pub fn take(&self) -> Vec<T> {
        self.scheduled.swap(false, Ordering::AcqRel);
        let items = std::mem::take(&mut *self.items.lock());
        trace_transition!("batch: took {}", items.len());
        items
    }

    /// A scheduled drain that will never run (its executor shut down) gives up its turn, so
    /// the next push schedules another; the items stay queued for it.
    pub fn unschedule(&self) {
        // A swap rather than a store: the same in Rust's model, but loom 0.7 lets a plain store
        // land between another thread's RMW read and write (tokio-rs/loom#254), which would
        // report a stranded item that cannot happen.
        self.scheduled.swap(false, Ordering::AcqRel);
    }

    /// Number of queued items (a snapshot).
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether no item is queued (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Batch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.len())
            .field("scheduled", &self.scheduled.load(Ordering::Relaxed))
            .finish()
    }
}
