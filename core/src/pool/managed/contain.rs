//! Futures of user code polled under a panic guard, in place (no allocation): the recycle and
//! create futures and the hooks' runs. `crate::panic::CatchUnwind` needs an `Unpin` future it
//! can move into a `Box`; these are pinned inside the `get` future itself, and their
//! destructors (user code as well) are guarded too.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::panic::{catch, report, Panic};

/// A future of user code whose polls and whose destructor are guarded: it resolves to
/// `Err(Panic)` if a poll panicked (and is dropped at once: a panicked `async fn` must not be
/// resumed), and a panic in its destructor is caught and logged.
pub(super) struct Contained<F> {
    /// INVARIANT: structurally pinned (polled and dropped in place, never moved out), and
    /// dropped exactly once: when a poll panicked, or with `self`.
    inner: ManuallyDrop<F>,
    /// Set once `inner` has been dropped.
    dropped: bool,
}

impl<F> Contained<F> {
    pub(super) fn new(inner: F) -> Self {
        Contained {
            inner: ManuallyDrop::new(inner),
            dropped: false,
        }
    }

    fn drop_inner(&mut self) {
        if self.dropped {
            return;
        }
        self.dropped = true;
        // SAFETY: `inner` is dropped in place exactly once (the flag above) and never used
        // again; dropping in place keeps the pinning guarantee.
        if let Err(panic) = catch(|| unsafe { ManuallyDrop::drop(&mut self.inner) }) {
            report("a destructor", &panic);
        }
    }
}

impl<F: Future> Future for Contained<F> {
    type Output = Result<F::Output, Panic>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: we never move `inner` out of the pinned `self` (it is polled through a
        // pinned reference below and dropped in place), so projecting the pin is sound.
        let this = unsafe { self.get_unchecked_mut() };
        if this.dropped {
            return Poll::Ready(Err(Panic::new("polled again after a panic")));
        }
        // SAFETY: as above: `inner` stays where it is until it is dropped in place.
        let inner = unsafe { Pin::new_unchecked(&mut *this.inner) };
        match catch(|| inner.poll(cx)) {
            Ok(poll) => poll.map(Ok),
            Err(panic) => {
                this.drop_inner();
                Poll::Ready(Err(panic))
            }
        }
    }
}

impl<F> Drop for Contained<F> {
    fn drop(&mut self) {
        self.drop_inner();
    }
}

impl<F> std::fmt::Debug for Contained<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contained")
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

/// Runs `future` with a deadline `after` from now on tokio's timer: `Err(after)` if it passed
/// first. Deadlines need a tokio runtime with timers (tokio's default); outside one the
/// future runs without a deadline rather than the timer's panic escaping the pool.
pub(super) async fn within<F: std::future::Future>(
    after: Option<std::time::Duration>,
    future: F,
) -> Result<F::Output, std::time::Duration> {
    let Some(after) = after else {
        return Ok(future.await);
    };
    match timer(after) {
        None => Ok(future.await),
        Some(deadline) => {
            tokio::select! {
                biased;
                output = future => Ok(output),
                () = deadline => Err(after),
            }
        }
    }
}

/// A sleep of `after` on the current runtime's timer, if there is one.
pub(super) fn timer(after: std::time::Duration) -> Option<tokio::time::Sleep> {
    tokio::runtime::Handle::try_current().ok()?;
    // A runtime built without timers panics here; that is no reason to panic the caller.
    catch(|| tokio::time::sleep(after)).ok()
}
