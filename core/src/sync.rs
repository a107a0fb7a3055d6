//! The one place that names synchronisation primitives.
//!
//! Every atomic, lock, `Arc`, `UnsafeCell`, spin hint and published pointer the crate uses
//! comes from here.
//! In a normal build they are `std`'s atomics, `parking_lot`'s mutex, `crossbeam-utils`'
//! `CachePadded` and `arc-swap`. Built with `RUSTFLAGS="--cfg slotpool_loom"` they are loom's, so
//! the loom models in `slotpool-loom-tests` explore every interleaving of the real protocol code
//! rather than a copy of it. No other module may import `std::sync` or `parking_lot` directly.
//!
//! Built with `RUSTFLAGS="--cfg slotpool_shuttle"` they are shuttle's (its atomics, mutex and
//! reader-writer lock; `Arc` is std's there too), so the shuttle tests in
//! `slotpool-loom-tests` run the real protocols under shuttle's randomized and PCT schedulers,
//! with many more threads and operations than loom can explore exhaustively. Shuttle treats
//! every atomic access as `SeqCst`, so orderings are loom's to check, and interleavings at
//! scale are shuttle's.
//!
//! A crate-specific cfg is used instead of plain `cfg(loom)` because `RUSTFLAGS` reach every
//! dependency, and some of them change behaviour under `cfg(loom)` in ways we do not want.

pub(crate) use crossbeam_utils::CachePadded;

/// std's `Arc`, under loom too: for immutable values that no protocol synchronises on (a
/// caught panic's message, a name), so loom need not model their reference counts.
pub(crate) type Frozen<T> = std::sync::Arc<T>;

#[cfg(all(slotpool_loom, slotpool_shuttle))]
compile_error!("`--cfg slotpool_loom` and `--cfg slotpool_shuttle` swap the same facade: pick one");

/// `std`'s `UnsafeCell` behind loom's interface, for normal and shuttle builds.
#[cfg(not(slotpool_loom))]
mod cell {
    /// `std`'s `UnsafeCell` behind loom's closure interface (`with` / `with_mut`), so code that
    /// hands out exclusive access by a protocol reads the same in both builds and loom can
    /// check that no two accesses overlap. Every caller states in a `// SAFETY:` comment which
    /// protocol step makes its access exclusive.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a pointer for reading the value.
        #[allow(dead_code)] // the same interface as loom's; not every build reads through it
        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a pointer for writing the value.
        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
mod imp {
    pub(crate) use super::cell::UnsafeCell;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Arc, Weak};

    /// A mutex whose `lock` returns the guard directly (poisoning is not part of our model:
    /// no protocol code panics while holding a lock).
    pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

    /// A reader-writer lock whose `read` / `write` return the guard directly (no poisoning,
    /// as for `Mutex`).
    pub(crate) type RwLock<T> = parking_lot::RwLock<T>;

    /// Orders a preceding `SeqCst` RMW before a following `SeqCst` load of another word (the
    /// Dekker pairing the gate relies on). In the C++20 model that Rust uses, `SeqCst`
    /// accesses already share one total order, so this compiles to nothing; it exists so
    /// the loom build can state the same guarantee (see the loom branch).
    #[inline(always)]
    pub(crate) fn dekker_fence() {}

    /// Backs off inside a short spin: the CPU's spin hint.
    #[inline]
    pub(crate) fn spin() {
        std::hint::spin_loop();
    }

    /// A value published for lock-free readers and replaced whole by writers (`arc-swap`).
    pub(crate) struct Published<T> {
        inner: arc_swap::ArcSwap<T>,
    }

    impl<T> Published<T> {
        pub(crate) fn new(value: T) -> Self {
            Self {
                inner: arc_swap::ArcSwap::from_pointee(value),
            }
        }

        /// Runs `f` on the current value without taking a lock.
        #[inline]
        pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
            f(&self.inner.load())
        }

        /// Returns a strong reference to the current value.
        pub(crate) fn load_full(&self) -> Arc<T> {
            self.inner.load_full()
        }

        /// Replaces the value; readers see either the old or the new one, never a mix.
        pub(crate) fn store(&self, value: Arc<T>) {
            self.inner.store(value);
        }
    }
}

#[cfg(slotpool_shuttle)]
mod imp {
    pub(crate) use super::cell::UnsafeCell;
    pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    #[allow(unused_imports)] // `Weak` is used by the pools only
    pub(crate) use shuttle::sync::{Arc, Weak};

    /// shuttle's mutex behind the same interface as `parking_lot::Mutex`.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(shuttle::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> shuttle::sync::MutexGuard<'_, T> {
            match self.0.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Self::new(T::default())
        }
    }

    /// shuttle's reader-writer lock behind the same interface as `parking_lot::RwLock`.
    #[derive(Debug)]
    pub(crate) struct RwLock<T>(shuttle::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(shuttle::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> shuttle::sync::RwLockReadGuard<'_, T> {
            match self.0.read() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }

        pub(crate) fn write(&self) -> shuttle::sync::RwLockWriteGuard<'_, T> {
            match self.0.write() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }
    }

    /// Shuttle runs every atomic access sequentially consistent: the Dekker pairing holds
    /// without a fence.
    #[inline]
    pub(crate) fn dekker_fence() {}

    /// Under shuttle a spin must yield, or a spinning thread would never let the one it waits
    /// for run.
    #[inline]
    pub(crate) fn spin() {
        shuttle::thread::yield_now();
    }

    /// Stand-in for `arc-swap` under shuttle, as under loom: a mutex around an `Arc`, so that
    /// shuttle can switch threads at every publication and read.
    pub(crate) struct Published<T> {
        inner: Mutex<Arc<T>>,
    }

    impl<T> Published<T> {
        pub(crate) fn new(value: T) -> Self {
            Self {
                inner: Mutex::new(Arc::new(value)),
            }
        }

        pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
            let current = self.load_full();
            f(&current)
        }

        pub(crate) fn load_full(&self) -> Arc<T> {
            Arc::clone(&self.inner.lock())
        }

        pub(crate) fn store(&self, value: Arc<T>) {
            *self.inner.lock() = value;
        }
    }
}

#[cfg(slotpool_loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use loom::sync::Arc;

    /// loom's mutex behind the same interface as `parking_lot::Mutex`.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            match self.0.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }
    }

    /// loom's reader-writer lock behind the same interface as `parking_lot::RwLock`.
    #[derive(Debug)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            match self.0.read() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }

        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            match self.0.write() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }
    }

    /// loom models `SeqCst` loads and RMWs as `AcqRel` (its README: "Unsupported features"),
    /// which is weaker than what Rust guarantees and would report false lost wake-ups in the
    /// store-load (Dekker) pattern. loom does model `fence(SeqCst)` exactly, so at each point
    /// where the code relies on the single `SeqCst` order we state it with a real fence here.
    #[inline]
    pub(crate) fn dekker_fence() {
        loom::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Under loom a spin must yield, or the model would explore an unbounded busy loop.
    #[allow(dead_code)] // used by the tokio pools, which are not built under loom
    #[inline]
    pub(crate) fn spin() {
        loom::thread::yield_now();
    }

    /// Stand-in for `arc-swap` under loom: a mutex around an `Arc`. It has the same
    /// observable semantics (readers see the old or the new value whole), which is all the
    /// protocols rely on.
    pub(crate) struct Published<T> {
        inner: loom::sync::Mutex<Arc<T>>,
    }

    impl<T> Published<T> {
        pub(crate) fn new(value: T) -> Self {
            Self {
                inner: loom::sync::Mutex::new(Arc::new(value)),
            }
        }

        pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
            let current = self.load_full();
            f(&current)
        }

        pub(crate) fn load_full(&self) -> Arc<T> {
            match self.inner.lock() {
                Ok(guard) => Arc::clone(&guard),
                Err(poisoned) => Arc::clone(&poisoned.into_inner()),
            }
        }

        pub(crate) fn store(&self, value: Arc<T>) {
            match self.inner.lock() {
                Ok(mut guard) => *guard = value,
                Err(poisoned) => *poisoned.into_inner() = value,
            }
        }
    }
}

pub(crate) use imp::*;

impl<T: std::fmt::Debug> std::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.with(|value| f.debug_tuple("Published").field(value).finish())
    }
}

/// Traces a protocol transition under tests and loom only, so a failing interleaving can be
/// read; compiles to nothing in normal builds.
macro_rules! trace_transition {
    ($($arg:tt)*) => {
        #[cfg(all(slotpool_loom, slotpool_trace))]
        {
            std::println!($($arg)*);
        }
    };
}
pub(crate) use trace_transition;

/// A count of how often a rare protocol branch ran, kept in loom builds only, so that a model
/// can assert it reached the branch it is named for. std's atomic, not loom's: it orders
/// nothing, and loom need not explore it.
#[cfg(slotpool_loom)]
#[derive(Debug, Default)]
pub(crate) struct Probe(std::sync::atomic::AtomicUsize);

#[cfg(slotpool_loom)]
impl Probe {
    pub(crate) fn hit(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Counts one run of a branch on a [`Probe`] in loom builds; compiles to nothing otherwise
/// (the probe fields exist in loom builds only).
macro_rules! probe {
    ($probe:expr) => {
        #[cfg(slotpool_loom)]
        {
            $probe.hit();
        }
    };
}
pub(crate) use probe;

/// A statistics counter that many threads bump without sharing a cache line and, in the
/// common case, without an atomic read-modify-write: one cache-padded stripe per thread slot,
/// summed on read. Relaxed: counters order nothing.
///
/// A thread that takes its first count claims one of [`OWNED_STRIPES`] stripe indices for its
/// lifetime (the same index in every counter) from the claim word, a [`StripeOwners`], and is
/// then the only writer of that stripe in every counter, so it bumps it with a plain load and
/// store (no `lock` prefix; the hot paths of the pools count every acquire). When all are
/// taken, a thread shares one of [`SHARED_STRIPES`] stripes, round-robin, and bumps it with
/// `fetch_add`. An index goes back when its thread exits; the release/acquire pair on the
/// claim word hands the stripe's value to the next owner, so no count is lost.
///
/// The claim word and the stripes are facade types, and the loom model at the end of this file
/// runs the real claim, bump, give-back and sum. The thread-locals that remember a thread's
/// index (and give it back from their destructor) are `std`'s, in normal builds only: under
/// loom and shuttle, whose threads share one OS thread's thread-locals, every count is an
/// RMW on a shared stripe.
#[cfg_attr(slotpool_loom, allow(dead_code))] // the pools that count are not built under loom
pub(crate) struct Counter {
    stripes: [CachePadded<AtomicU64>; COUNTER_STRIPES],
}

/// Stripes each owned by one thread at a time (at most 64: one bit each in the claim word).
pub(crate) const OWNED_STRIPES: usize = 12;
/// Stripes shared by the threads that found every owned stripe taken.
const SHARED_STRIPES: usize = 4;
const COUNTER_STRIPES: usize = OWNED_STRIPES + SHARED_STRIPES;

#[cfg_attr(slotpool_loom, allow(dead_code))]
impl Counter {
    pub(crate) fn new() -> Self {
        Self {
            stripes: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// Adds one.
    #[inline]
    pub(crate) fn incr(&self) {
        self.add(1);
    }

    /// Adds one to this counter and one to `other`, with one look-up of this thread's stripe
    /// for both (for a path that counts two things every time).
    #[inline]
    pub(crate) fn incr_with(&self, other: &Counter) {
        #[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
        {
            let index = STRIPE.with(std::cell::Cell::get);
            if index < OWNED_STRIPES {
                Self::bump_owned(&self.stripes[index], 1);
                Self::bump_owned(&other.stripes[index], 1);
                return;
            }
        }
        self.incr();
        other.incr();
    }

    /// Adds `n`.
    #[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        let index = STRIPE.with(std::cell::Cell::get);
        if index < OWNED_STRIPES {
            Self::bump_owned(&self.stripes[index], n);
        } else {
            self.add_unowned(n);
        }
    }

    /// Adds `n` (on a shared stripe: see the type's docs).
    #[cfg(any(slotpool_loom, slotpool_shuttle))]
    pub(crate) fn add(&self, n: u64) {
        self.add_at(OWNED_STRIPES, n);
    }

    /// [`Counter::add`] for a thread without an owned stripe yet, or with none to be had.
    #[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
    #[cold]
    #[inline(never)]
    fn add_unowned(&self, n: u64) {
        self.add_at(stripe_index(), n);
    }

    /// Adds `n` to stripe `index`: with a plain load and store if it is an owned stripe (the
    /// caller owns it), with `fetch_add` if it is shared.
    fn add_at(&self, index: usize, n: u64) {
        let stripe = &self.stripes[index % COUNTER_STRIPES];
        if index < OWNED_STRIPES {
            Self::bump_owned(stripe, n);
        } else {
            stripe.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds `n` to a stripe this thread owns.
    #[inline]
    fn bump_owned(stripe: &AtomicU64, n: u64) {
        // This thread owns the stripe (see the type's docs): nobody else writes it, so a plain
        // load and store cannot lose a concurrent count.
        stripe.store(
            stripe.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// The total (a snapshot; concurrent increments may or may not be counted).
    pub(crate) fn get(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Counter").field(&self.get()).finish()
    }
}

/// Which owned stripe indices are taken: bit `i` for index `i`. A thread claims the lowest
/// free bit with a CAS (Acquire) and gives it back with `fetch_and` (Release) when it exits,
/// so the next owner of an index sees every plain store the previous one made to its stripes.
#[cfg_attr(any(slotpool_loom, slotpool_shuttle), allow(dead_code))]
pub(crate) struct StripeOwners {
    bits: AtomicU64,
}

#[cfg_attr(any(slotpool_loom, slotpool_shuttle), allow(dead_code))]
impl StripeOwners {
    /// Every bit free.
    #[cfg(not(slotpool_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            bits: AtomicU64::new(0),
        }
    }

    /// Every bit free (loom's atomics cannot be built in a `const`).
    #[cfg(slotpool_loom)]
    pub(crate) fn new() -> Self {
        Self {
            bits: AtomicU64::new(0),
        }
    }

    /// Claims the lowest free owned index, or `None` when all [`OWNED_STRIPES`] are taken.
    pub(crate) fn claim(&self) -> Option<StripeClaim<'_>> {
        let all = if OWNED_STRIPES == 64 {
            u64::MAX
        } else {
            (1u64 << OWNED_STRIPES) - 1
        };
        let mut owners = self.bits.load(Ordering::Relaxed);
        loop {
            let free = !owners & all;
            if free == 0 {
                return None;
            }
            let bit = free.trailing_zeros() as usize;
            // Acquire: pairs with the previous owner's Release in `give_back`.
            match self.bits.compare_exchange_weak(
                owners,
                owners | (1 << bit),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(StripeClaim {
                        owners: self,
                        index: bit,
                    })
                }
                // Another thread claimed or gave back an index (or a spurious failure): retry
                // with the word it left.
                Err(actual) => owners = actual,
            }
        }
    }

    fn give_back(&self, index: usize) {
        // Release: the next owner's claim (Acquire) sees every store we made to the stripe.
        self.bits.fetch_and(!(1u64 << index), Ordering::Release);
    }
}

/// A thread's claim on an owned stripe index; gives it back when dropped.
#[cfg_attr(any(slotpool_loom, slotpool_shuttle), allow(dead_code))]
pub(crate) struct StripeClaim<'a> {
    owners: &'a StripeOwners,
    index: usize,
}

impl StripeClaim<'_> {
    /// The owned stripe index.
    #[cfg_attr(any(slotpool_loom, slotpool_shuttle), allow(dead_code))]
    pub(crate) fn index(&self) -> usize {
        self.index
    }
}

impl Drop for StripeClaim<'_> {
    fn drop(&mut self) {
        self.owners.give_back(self.index);
    }
}

#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
thread_local! {
    /// This thread's counter stripe (`usize::MAX` until its first count).
    static STRIPE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    /// The owned stripe index this thread holds, given back when the thread exits.
    static OWNED: StripeOwnership = const { StripeOwnership(std::cell::Cell::new(None)) };
}

/// The claim word of every counter's owned stripes.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
static STRIPE_OWNERS: StripeOwners = StripeOwners::new();

/// Round-robin for threads that share a stripe.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
static NEXT_SHARED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A thread's claim on an owned stripe index, held in a thread-local and dropped (the index
/// given back) at thread exit.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
struct StripeOwnership(std::cell::Cell<Option<StripeClaim<'static>>>);

#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
impl Drop for StripeOwnership {
    fn drop(&mut self) {
        if let Some(claim) = self.0.take() {
            // Counts made later in this thread's teardown go to a shared stripe.
            let _ = STRIPE.try_with(|stripe| stripe.set(shared_stripe()));
            drop(claim);
        }
    }
}

/// This thread's counter stripe index, claimed on first use.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
fn stripe_index() -> usize {
    let index = STRIPE.with(std::cell::Cell::get);
    if index < COUNTER_STRIPES {
        return index;
    }
    assign_stripe()
}

/// This thread's owned stripe index (below [`OWNED_STRIPES`]), claimed on first use; `None`
/// when it shares a stripe (every owned one was taken) or its thread-locals are gone. Besides
/// the counters, the stream pool's release windows are indexed by it
/// ([`crate::protocol::slots::Windows`]): one thread at a time owns each.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
#[inline]
pub(crate) fn owned_stripe() -> Option<usize> {
    let index = STRIPE.try_with(std::cell::Cell::get).ok()?;
    if index < OWNED_STRIPES {
        return Some(index);
    }
    owned_stripe_unassigned(index)
}

/// [`owned_stripe`] for a thread that shares a stripe or has none yet.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
#[cold]
#[inline(never)]
fn owned_stripe_unassigned(index: usize) -> Option<usize> {
    let index = if index < COUNTER_STRIPES {
        index
    } else {
        assign_stripe()
    };
    (index < OWNED_STRIPES).then_some(index)
}

/// Under loom and shuttle no thread owns a stripe (see [`Counter`]).
#[cfg(slotpool_shuttle)]
#[inline]
pub(crate) fn owned_stripe() -> Option<usize> {
    None
}

#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
fn shared_stripe() -> usize {
    OWNED_STRIPES + NEXT_SHARED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARED_STRIPES
}

/// Claims a free owned stripe index for this thread, or assigns a shared one.
#[cfg(not(any(slotpool_loom, slotpool_shuttle)))]
#[cold]
#[inline(never)]
fn assign_stripe() -> usize {
    let index = match STRIPE_OWNERS.claim() {
        Some(claim) => {
            let index = claim.index();
            // Registered for give-back at exit; if this thread's TLS is being torn down
            // already, the claim is dropped here (the index given back) and we share instead.
            match OWNED.try_with(|owned| owned.0.set(Some(claim))) {
                Ok(()) => index,
                Err(_) => shared_stripe(),
            }
        }
        None => shared_stripe(),
    };
    let _ = STRIPE.try_with(|stripe| stripe.set(index));
    index
}

/// The stripe ownership under loom: threads claim owned stripes, bump them with plain loads
/// and stores, and give them back at exit while others claim the same index and a late
/// reader sums. Run with `RUSTFLAGS="--cfg slotpool_loom" cargo test --release -p slotpool
/// --lib --target-dir target/loom` (`.ci/run` does).
#[cfg(all(test, slotpool_loom))]
mod loom_tests {
    use super::{Counter, StripeOwners};
    use loom::sync::Arc;
    use loom::thread;

    /// Counts `n` on `counter` the way a thread that owns a stripe does, then exits (drops
    /// its claim, giving the index back). Returns the index it owned.
    fn count_and_exit(owners: &StripeOwners, counter: &Counter, n: u64) -> usize {
        let claim = owners.claim().expect("an owned stripe is free");
        for _ in 0..n {
            counter.add_at(claim.index(), 1);
        }
        claim.index()
    }

    /// Two threads that own the same stripe one after the other (the second claims while
    /// the first is exiting) and a third that owns another, then a reader that sums after
    /// they are gone: the second owner's plain load sees every count of the first (the
    /// Release at give-back pairs with the Acquire of the claim), so nothing is lost. A
    /// reader racing the counts sees a total no larger than the final one.
    #[test]
    fn a_stripe_handed_over_at_thread_exit_loses_no_count() {
        // (executions, executions in which the second thread reused the first's index):
        // std, so the counts outlive loom's executions.
        let reach = std::sync::Arc::new(std::sync::Mutex::new((0u32, 0u32)));
        let counting = std::sync::Arc::clone(&reach);
        loom::model(move || {
            let owners = Arc::new(StripeOwners::new());
            let counter = Arc::new(Counter::new());
            let spawn = |n: u64| {
                let (owners, counter) = (Arc::clone(&owners), Arc::clone(&counter));
                thread::spawn(move || count_and_exit(&owners, &counter, n))
            };
            let first = spawn(2);
            let second = spawn(1);
            let racing = counter.get();
            let (a, b) = (first.join().unwrap(), second.join().unwrap());
            // After both exited, a third owner takes the lowest index again.
            let third = count_and_exit(&owners, &counter, 1);
            assert_eq!(third, 0, "an index was not given back");
            assert!(racing <= 3);
            assert_eq!(counter.get(), 4, "a count was lost at a hand-over");
            let mut reach = counting.lock().unwrap();
            reach.0 += 1;
            if a == b {
                // The second claimed the index the first had given back.
                reach.1 += 1;
            }
        });
        let (executions, handed_over) = *reach.lock().unwrap();
        assert!(executions > 1, "one execution: nothing raced");
        assert!(
            handed_over > 0,
            "no execution handed a stripe from one thread to the next"
        );
    }

    /// Threads without an owned stripe share one and bump it with an RMW: two of them
    /// counting at once lose nothing.
    #[test]
    fn a_shared_stripe_loses_no_count() {
        loom::model(|| {
            let counter = Arc::new(Counter::new());
            let other = {
                let counter = Arc::clone(&counter);
                thread::spawn(move || counter.add_at(super::OWNED_STRIPES, 1))
            };
            counter.add_at(super::OWNED_STRIPES, 1);
            other.join().unwrap();
            assert_eq!(
                counter.get(),
                2,
                "two threads sharing a stripe lost a count"
            );
        });
    }
}
#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::{Counter, OWNED_STRIPES};

    /// More threads than owned stripes count at once (some share a stripe), then a second
    /// wave reuses the stripes the first gave back at exit: no count is lost either way.
    #[test]
    fn counter_is_exact_across_owned_shared_and_reused_stripes() {
        const THREADS: usize = OWNED_STRIPES * 2 + 3;
        const EACH: u64 = 20_000;
        let counter = Counter::new();
        for _wave in 0..2 {
            let start = std::sync::Barrier::new(THREADS);
            std::thread::scope(|s| {
                for _ in 0..THREADS {
                    s.spawn(|| {
                        start.wait();
                        for i in 0..EACH {
                            if i % 2 == 0 {
                                counter.incr();
                            } else {
                                counter.add(1);
                            }
                        }
                    });
                }
            });
        }
        assert_eq!(counter.get(), 2 * THREADS as u64 * EACH);
    }

    /// Threads alive at once hold different owned stripes (each its own release window: see
    /// `slots::Windows`), a thread keeps its stripe, and a thread that finds every owned
    /// stripe held gets none (its releases take a reference count instead). Other tests may
    /// hold stripes meanwhile, so how many are owned here is not asserted.
    #[cfg(not(slotpool_shuttle))]
    #[test]
    fn owned_stripes_are_one_per_live_thread() {
        const THREADS: usize = OWNED_STRIPES + 4;
        let claimed = std::sync::Barrier::new(THREADS);
        let got: Vec<Option<usize>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        let first = super::owned_stripe();
                        // Every thread is alive while the others claim.
                        claimed.wait();
                        assert_eq!(super::owned_stripe(), first, "a thread keeps its stripe");
                        first
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut owned: Vec<usize> = got.iter().flatten().copied().collect();
        assert!(owned.iter().all(|&i| i < OWNED_STRIPES), "{got:?}");
        let held = owned.len();
        owned.sort_unstable();
        owned.dedup();
        assert_eq!(
            owned.len(),
            held,
            "two live threads share a stripe: {got:?}"
        );
        assert!(
            got.iter().any(Option::is_none),
            "more threads than owned stripes, yet every one owns one: {got:?}"
        );
    }
}
