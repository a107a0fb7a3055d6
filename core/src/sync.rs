//! The one place that names synchronisation primitives.
//!
//! Every atomic, lock, `Arc`, `UnsafeCell`, spin hint and published pointer the crate uses
//! comes from here.
//! In a normal build they are `std`'s atomics, `parking_lot`'s mutex, `crossbeam-utils`'
//! `CachePadded` and `arc-swap`. Built with `RUSTFLAGS="--cfg slotpool_loom"` they are loom's, so
//! the loom models in `slotpool-loom-tests` explore every interleaving of the real protocol code
//! rather than a copy of it. No other module may import `std::sync` or `parking_lot` directly.
//!
//! A crate-specific cfg is used instead of plain `cfg(loom)` because `RUSTFLAGS` reach every
//! dependency, and some of them change behaviour under `cfg(loom)` in ways we do not want.

pub(crate) use crossbeam_utils::CachePadded;

#[cfg(not(slotpool_loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Arc, Weak};

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

/// A statistics counter that many threads bump without sharing a cache line: one
/// cache-padded stripe per thread slot, summed on read. Relaxed: counters order nothing.
#[cfg_attr(slotpool_loom, allow(dead_code))] // the pools that count are not built under loom
pub(crate) struct Counter {
    stripes: [CachePadded<AtomicU64>; COUNTER_STRIPES],
}

const COUNTER_STRIPES: usize = 8;

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

    /// Adds `n`.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.stripes[stripe_index()].fetch_add(n, Ordering::Relaxed);
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

/// This thread's counter stripe, assigned round-robin on first use.
#[cfg_attr(slotpool_loom, allow(dead_code))]
#[inline]
fn stripe_index() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|stripe| {
        let mut index = stripe.get();
        if index == usize::MAX {
            index = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % COUNTER_STRIPES;
            stripe.set(index);
        }
        index
    })
}
