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
