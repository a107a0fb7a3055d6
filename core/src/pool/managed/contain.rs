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
pub(super) fn within<F: Future>(after: Option<std::time::Duration>, future: F) -> Within<F> {
    Within {
        future,
        unarmed: after,
        armed: None,
        sleep: None,
    }
}

pin_project_lite::pin_project! {
    /// [`within`]'s future: written out rather than an `async fn` over `tokio::select!`,
    /// which held `future` three times (800 bytes for a 256-byte future and a 112-byte
    /// timer): the `get`'s wait came to 544 bytes, every one of them copied when the future
    /// moved.
    pub(super) struct Within<F> {
        // Polled in place, dropped with `self`.
        #[pin]
        future: F,
        // The deadline until the first poll arms it (it runs from there).
        unarmed: Option<std::time::Duration>,
        // The deadline once armed, if the runtime has a timer; its timer beside it.
        armed: Option<std::time::Duration>,
        #[pin]
        sleep: Option<tokio::time::Sleep>,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Result<F::Output, std::time::Duration>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(after) = this.unarmed.take() {
            if let Some(sleep) = timer(after) {
                // Armed once, while `sleep` is `None`: nothing pinned is dropped or moved.
                this.sleep.set(Some(sleep));
                *this.armed = Some(after);
            }
        }
        // The future first: a deadline and an output in the same poll give the output.
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if let (Some(sleep), Some(after)) = (this.sleep.as_mut().as_pin_mut(), *this.armed) {
            if sleep.poll(cx).is_ready() {
                return Poll::Ready(Err(after));
            }
        }
        Poll::Pending
    }
}

/// A sleep of `after` on the current runtime's timer, if there is one.
pub(super) fn timer(after: std::time::Duration) -> Option<tokio::time::Sleep> {
    tokio::runtime::Handle::try_current().ok()?;
    // A runtime built without timers panics here; that is no reason to panic the caller.
    catch(|| tokio::time::sleep(after)).ok()
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::future::{pending, poll_fn};
    use std::task::Waker;
    use std::time::Duration;

    use super::*;

    const AFTER: Duration = Duration::from_millis(5);

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    /// Pending at its first poll, ready with 7 at the next.
    fn ready_at_the_second_poll() -> impl Future<Output = u32> {
        let mut polled = false;
        poll_fn(move |_| {
            if std::mem::replace(&mut polled, true) {
                Poll::Ready(7)
            } else {
                Poll::Pending
            }
        })
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_deadline_fires_after_its_time_from_the_first_poll() {
        let start = tokio::time::Instant::now();
        assert_eq!(within(Some(AFTER), pending::<()>()).await, Err(AFTER));
        assert_eq!(start.elapsed(), AFTER);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_deadline_runs_from_the_first_poll_not_from_creation() {
        let mut future = std::pin::pin!(within(Some(AFTER), pending::<()>()));
        tokio::time::advance(AFTER * 2).await;
        assert_eq!(poll_once(future.as_mut()), Poll::Pending);
        let start = tokio::time::Instant::now();
        assert_eq!(future.await, Err(AFTER));
        assert_eq!(start.elapsed(), AFTER);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_output_beats_a_deadline_passed_by_the_same_poll() {
        let mut future = std::pin::pin!(within(Some(AFTER), ready_at_the_second_poll()));
        assert_eq!(poll_once(future.as_mut()), Poll::Pending);
        tokio::time::advance(AFTER * 2).await;
        assert_eq!(poll_once(future.as_mut()), Poll::Ready(Ok(7)));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn no_deadline_lets_the_future_run_on() {
        let mut future = std::pin::pin!(within(None, ready_at_the_second_poll()));
        assert_eq!(poll_once(future.as_mut()), Poll::Pending);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(future.await, Ok(7));
    }

    /// Outside a runtime there is no timer: the future runs without its deadline, and
    /// nothing panics.
    #[test]
    fn outside_a_runtime_the_future_runs_without_a_deadline() {
        let mut future = std::pin::pin!(within(Some(Duration::ZERO), ready_at_the_second_poll()));
        assert_eq!(poll_once(future.as_mut()), Poll::Pending);
        assert_eq!(poll_once(future.as_mut()), Poll::Ready(Ok(7)));
    }

    /// A pending future of 256 bytes.
    struct Big([u8; 256]);

    impl Future for Big {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            std::hint::black_box(&self.0);
            Poll::Pending
        }
    }

    /// What `within` adds to a future: the timer and a few words, not a second copy of the
    /// future (as the `async fn` over `tokio::select!` it replaced kept).
    #[test]
    fn within_holds_the_future_once() {
        let size = std::mem::size_of_val(&within(Some(AFTER), Big([0; 256])));
        let timer = std::mem::size_of::<Option<tokio::time::Sleep>>();
        assert!(
            size <= 256 + timer + 32,
            "{size} bytes for a 256-byte future and a {timer}-byte timer"
        );
    }
}
