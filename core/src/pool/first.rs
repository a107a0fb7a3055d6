//! A future whose first poll tries a path with no await and ends there in the common case;
//! otherwise it starts an async general path from what the try found and polls that in place.
//! The acquires of the client and session pools are built on it: their hot case (an idle
//! client, a live session) runs no state machine of its own.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

/// See the [module documentation](self). `T` is the try (run once, at the first poll): its
/// `Break` is the output, its `Continue` what `G` starts the general path `S` from. Closures,
/// so that `S`, an `async fn`'s future, can be named here.
pub(crate) struct FirstPoll<T, G, S> {
    /// `None` once run.
    try_first: Option<T>,
    /// `None` once run.
    start: Option<G>,
    /// INVARIANT: structurally pinned (polled in place, dropped with `self`). Once `Some`, the
    /// rest of the future is its.
    general: Option<S>,
}

impl<T, G, S> FirstPoll<T, G, S> {
    #[inline]
    pub(crate) fn new(try_first: T, start: G) -> Self {
        FirstPoll {
            try_first: Some(try_first),
            start: Some(start),
            general: None,
        }
    }
}

impl<T, G, S, R, O> Future for FirstPoll<T, G, S>
where
    T: FnOnce() -> ControlFlow<O, R>,
    G: FnOnce(R) -> S,
    S: Future<Output = O>,
{
    type Output = O;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<O> {
        // SAFETY: only `general` is pinned, and it is polled in place and never moved out
        // (dropped with `self`); the closures are taken out by value, which moves nothing
        // pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if let Some(try_first) = this.try_first.take() {
            match try_first() {
                ControlFlow::Break(output) => return Poll::Ready(output),
                ControlFlow::Continue(found) => {
                    let Some(start) = this.start.take() else {
                        unreachable!("the general path starts once")
                    };
                    this.general.get_or_insert(start(found));
                }
            }
        }
        match this.general.as_mut() {
            // SAFETY: as above.
            Some(general) => unsafe { Pin::new_unchecked(general) }.poll(cx),
            None => panic!("a first-poll future polled after it resolved"),
        }
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::cell::Cell;
    use std::future::poll_fn;
    use std::rc::Rc;
    use std::task::Waker;

    use super::*;

    /// Counts its drops.
    struct Dropped(Rc<Cell<usize>>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    /// [`FirstPoll::new`] with the bounds its `poll` needs, so the general path's type is
    /// known even for a future never polled.
    fn first_poll<T, G, S, R, O>(try_first: T, start: G) -> FirstPoll<T, G, S>
    where
        T: FnOnce() -> ControlFlow<O, R>,
        G: FnOnce(R) -> S,
        S: Future<Output = O>,
    {
        FirstPoll::new(try_first, start)
    }

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_try_that_breaks_resolves_at_the_first_poll_and_starts_nothing() {
        let started = Cell::new(false);
        let mut future = std::pin::pin!(FirstPoll::new(
            || ControlFlow::<u32, ()>::Break(7),
            |()| {
                started.set(true);
                async { 0 }
            },
        ));
        assert_eq!(poll_once(future.as_mut()), Poll::Ready(7));
        assert!(!started.get());
    }

    #[test]
    fn a_try_that_continues_starts_the_general_path_from_what_it_found() {
        let (tries, starts) = (Cell::new(0), Cell::new(0));
        let mut pending = true;
        let mut future = std::pin::pin!(FirstPoll::new(
            || {
                tries.set(tries.get() + 1);
                ControlFlow::<u32, u32>::Continue(5)
            },
            |found| {
                starts.set(starts.get() + 1);
                poll_fn(move |_| {
                    if std::mem::take(&mut pending) {
                        Poll::Pending
                    } else {
                        Poll::Ready(found * 2)
                    }
                })
            },
        ));
        assert_eq!(poll_once(future.as_mut()), Poll::Pending);
        assert_eq!(poll_once(future.as_mut()), Poll::Ready(10));
        // The second poll went to the general path alone.
        assert_eq!((tries.get(), starts.get()), (1, 1));
    }

    /// A first-poll future whose try continues into a general path that holds a `Dropped` on
    /// `drops` and never ends.
    fn never_ending(drops: &Rc<Cell<usize>>) -> impl Future<Output = ()> {
        let held = Dropped(Rc::clone(drops));
        first_poll(
            || ControlFlow::<(), ()>::Continue(()),
            move |()| async move {
                let _held = &held;
                std::future::pending::<()>().await
            },
        )
    }

    #[test]
    fn the_general_path_is_dropped_once_with_the_future_and_never_if_not_started() {
        let drops = Rc::new(Cell::new(0));
        drop(never_ending(&drops));
        // Never started: the closure (and what it holds) is dropped, once.
        assert_eq!(drops.get(), 1);

        let drops = Rc::new(Cell::new(0));
        let mut future = Box::pin(never_ending(&drops));
        assert_eq!(poll_once(future.as_mut()), Poll::Pending);
        assert_eq!(drops.get(), 0);
        drop(future);
        assert_eq!(drops.get(), 1);
    }

    #[test]
    #[should_panic(expected = "polled after it resolved")]
    fn a_poll_after_the_try_resolved_panics() {
        let mut future = std::pin::pin!(FirstPoll::new(
            || ControlFlow::<(), ()>::Break(()),
            |()| async {},
        ));
        let _ = poll_once(future.as_mut());
        let _ = poll_once(future.as_mut());
    }
}
