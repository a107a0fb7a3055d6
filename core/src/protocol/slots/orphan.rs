//! Units that keep their table alive: [`SlotTable::orphan`], the orphaned release and the
//! release windows (see the [module documentation](super), "Units that keep their table
//! alive").

use std::fmt;
use std::ptr::NonNull;

use super::{Reservation, SlotTable, SlotWord};
use crate::sync::{spin, AtomicU64, CachePadded, Ordering};

/// What an owner parks in its table when it lets go with units out: its reference, dropped by
/// whoever takes it back (see the [`slots`](super) module docs, "Units that keep their
/// table alive").
pub type Keep = Box<dyn Send + Sync>;

/// Release windows per table (one per owned counter stripe; two under loom, where the models
/// name the window each thread uses).
#[cfg(not(slotpool_loom))]
pub const WINDOWS: usize = crate::sync::OWNED_STRIPES;
/// Release windows per table (loom build: 2).
#[cfg(slotpool_loom)]
pub const WINDOWS: usize = 2;

impl<T> SlotTable<T> {
    /// The table's owner lets go of it while holders may still hold units that keep it alive
    /// (see the [`slots`](super) module docs). `keep` is the owner's reference; it is handed
    /// back when no unit was out (drop it: nobody else waits for it), and otherwise parked
    /// until the last such unit is released. Call once, after [`SlotTable::close`], when
    /// nothing but unit holders can reserve any more.
    pub fn orphan(&self, keep: Keep) -> Option<Keep> {
        // Under the lock, so that no release takes the reference back before every slot is
        // flagged (it would miss the units on the slots not flagged yet).
        let mut parked = self.parked.lock();
        let mut loaded = false;
        self.for_each_slot(|_, slot| {
            let old = SlotWord(slot.word.fetch_or(SlotWord::ORPHAN_BIT, Ordering::SeqCst));
            loaded |= old.load() > 0;
        });
        if loaded {
            // The release that leaves no orphaned unit out takes it back.
            *parked = Some(keep);
            None
        } else {
            Some(keep)
        }
    }

    /// After a release whose RMW returned an orphaned word: the parked reference if no
    /// orphaned slot has load any more (the caller drops it once it is done with the table).
    /// The reads run under the lock, so after the owner flagged every slot.
    #[cold]
    #[inline(never)]
    pub(super) fn orphan_released(&self) -> Option<Keep> {
        let mut parked = self.parked.lock();
        let mut loaded = false;
        self.for_each_slot(|_, slot| {
            let word = slot.word();
            loaded |= word.orphaned() && word.load() > 0;
        });
        if loaded {
            None
        } else {
            parked.take()
        }
    }

    /// [`SlotTable::release_held`] for a holder whose unit is all that keeps the table alive
    /// (an owned guard): the same release, but a parked reference that it frees is handed to
    /// the caller, to drop only after its last access to the table.
    #[inline(always)]
    pub fn release_owned(&self, reservation: Reservation) -> Option<Keep> {
        let keep = self.release_held_keep::<true>(reservation);
        #[cfg(slotpool_loom)]
        self.tomb.0.with(|_| ());
        keep
    }

    /// Marks the table freed (loom build): every release of an owned unit reads the mark
    /// after its last access, so one that is not ordered before this call is a race loom
    /// reports. Called by the models' stand-in for the pool state's drop, after
    /// [`Windows::wait_closed`].
    #[cfg(slotpool_loom)]
    pub fn bury(&self) {
        self.tomb.0.with_mut(|_| ());
    }
}

/// The table's freed mark under loom (see [`SlotTable::bury`]): a cell whose accesses loom
/// checks for order.
#[cfg(slotpool_loom)]
#[derive(Default)]
pub(super) struct Tomb(loom::cell::UnsafeCell<()>);

// SAFETY: the cell holds nothing; its accesses exist for loom to check their order, and an
// unordered pair is the bug the models look for.
#[cfg(slotpool_loom)]
unsafe impl Sync for Tomb {}

/// The release windows of one table (see the [`slots`](super) module docs): one mark per
/// owned counter stripe, odd while a thread of that stripe is inside a release.
pub struct Windows {
    marks: [CachePadded<AtomicU64>; WINDOWS],
}

impl Windows {
    /// Every window closed.
    pub fn new() -> Self {
        Self {
            marks: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// Opens window `index` (below [`WINDOWS`]; the caller's thread owns it, so a plain load
    /// and store do).
    ///
    /// # Panics
    /// If `index` is not below [`WINDOWS`].
    #[inline]
    pub fn open(&self, index: usize) -> Window {
        let mark = &self.marks[index];
        let value = mark.load(Ordering::Relaxed).wrapping_add(1);
        debug_assert!(value & 1 == 1, "window {index} opened twice");
        mark.store(value, Ordering::Relaxed);
        Window {
            mark: NonNull::from(&**mark),
            value,
        }
    }

    /// Waits until no window is open (spinning: a window is a few dozen instructions, unless
    /// its thread was preempted). Called once nothing can open a window any more, before the
    /// table and these windows are freed.
    pub fn wait_closed(&self) {
        for mark in &self.marks {
            while mark.load(Ordering::Acquire) & 1 != 0 {
                spin();
            }
        }
    }

    /// Releases `reservation`, which the caller holds and which is all that keeps `table` and
    /// `this` alive, inside window `index`: [`SlotTable::release_owned`] between
    /// [`Windows::open`] and [`Window::close`]. Returns what the caller must drop after it
    /// (once it no longer uses the table).
    ///
    /// # Safety
    /// `this` and `table` belong to one pool state, which the unit keeps alive (a holder
    /// whose release frees the table drops the returned reference last); the caller's thread
    /// owns window `index`; the caller holds `reservation` and uses neither pointer after
    /// this call.
    #[inline(always)]
    pub unsafe fn release_owned<T>(
        this: *const Windows,
        index: usize,
        table: *const SlotTable<T>,
        reservation: Reservation,
    ) -> Option<Keep> {
        // SAFETY: the unit keeps both alive until the window is open, and the window until
        // it closes (the caller's contract).
        let window = unsafe { &*this }.open(index);
        // SAFETY: as above.
        let keep = unsafe { &*table }.release_owned(reservation);
        // SAFETY: the window's own table; nothing of it is touched after.
        unsafe { window.close() };
        keep
    }
}

impl Default for Windows {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Windows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let open = self
            .marks
            .iter()
            .filter(|mark| mark.load(Ordering::Relaxed) & 1 != 0)
            .count();
        f.debug_struct("Windows").field("open", &open).finish()
    }
}

/// An open release window (see [`Windows::open`]); [`Window::close`] ends it.
#[must_use = "a window left open blocks the table's free for ever"]
pub struct Window {
    mark: NonNull<AtomicU64>,
    value: u64,
}

impl Window {
    /// Closes the window: the caller's last access to the table.
    ///
    /// # Safety
    /// The windows this came from are alive (an open window keeps them so until this store),
    /// and the caller uses nothing of the table after this call.
    #[inline]
    pub unsafe fn close(self) {
        // SAFETY: the caller's contract.
        unsafe { self.mark.as_ref() }.store(self.value.wrapping_add(1), Ordering::Release);
    }
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window").field("mark", &self.value).finish()
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::{Windows, WINDOWS};

    /// A window is open from `open` to `close`, each on its own mark; `wait_closed` returns
    /// at once when every window is closed, and the debug output counts the open ones.
    #[test]
    fn windows_open_and_close_on_their_own_marks() {
        let windows = Windows::new();
        windows.wait_closed();
        assert_eq!(format!("{windows:?}"), "Windows { open: 0 }");
        let first = windows.open(0);
        let last = windows.open(WINDOWS - 1);
        assert_eq!(format!("{windows:?}"), "Windows { open: 2 }");
        assert_eq!(format!("{first:?}"), "Window { mark: 1 }");
        // SAFETY: `windows` is alive and nothing else uses the marks.
        unsafe { first.close() };
        assert_eq!(format!("{windows:?}"), "Windows { open: 1 }");
        // SAFETY: as above.
        unsafe { last.close() };
        windows.wait_closed();
        let again = windows.open(0);
        assert_eq!(
            format!("{again:?}"),
            "Window { mark: 3 }",
            "a mark counts on"
        );
        // SAFETY: as above.
        unsafe { again.close() };
        assert_eq!(format!("{windows:?}"), "Windows { open: 0 }");
    }
}
