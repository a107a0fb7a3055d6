//! Containing panics of user code.
//!
//! Everything a user hands a pool (connectors, factories, managers, bootstraps, closures,
//! inbound streams, callbacks) is outside the pool's proof, and may panic. A pool calls such
//! code only through `catch` or `CatchUnwind`, at the place where it polls or calls it, so a
//! panic becomes a value: the pool turns it into a typed error for the callers it touched,
//! retires what the code was building, and carries on. Nothing here re-raises a panic.
//!
//! The payload's message (a `&str` or `String` payload; anything else is named as such) is
//! kept for the error and logged once as a `tracing` error event by `report`. The payload
//! itself is dropped inside a second guard: a payload whose `Drop` panics cannot unwind
//! through the pool either.

// Every helper has a call site in the pools; a loom build leaves the pools out.
#![cfg_attr(slotpool_loom, allow(dead_code))]

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::sync::Frozen;

/// A panic of user code, caught: what it said.
///
/// Cheap to clone (every caller that a panic touched gets a copy in its error).
#[derive(Clone, PartialEq, Eq)]
pub struct Panic {
    message: Frozen<str>,
}

impl Panic {
    /// Takes the message out of a caught payload, then drops the payload where a panic in its
    /// own `Drop` is caught too.
    pub(crate) fn from_payload(payload: Box<dyn Any + Send>) -> Self {
        let message: Frozen<str> = if let Some(text) = payload.downcast_ref::<&'static str>() {
            Frozen::from(*text)
        } else if let Some(text) = payload.downcast_ref::<String>() {
            Frozen::from(text.as_str())
        } else {
            Frozen::from("a panic with a payload that is not a string")
        };
        // A payload's destructor is user code as well.
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
        Panic { message }
    }

    /// A panic made up by the pool itself (for tests and for places that learn of a panic
    /// only from its effect, such as a task that ended by panicking).
    pub(crate) fn new(message: &str) -> Self {
        Panic {
            message: Frozen::from(message),
        }
    }

    /// What the panic said (its `&str` or `String` payload).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Panic").field(&&*self.message).finish()
    }
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "panicked: {}", self.message)
    }
}

/// Calls user code, turning a panic into [`Panic`].
pub(crate) fn catch<R>(call: impl FnOnce() -> R) -> Result<R, Panic> {
    catch_unwind(AssertUnwindSafe(call)).map_err(Panic::from_payload)
}

/// Logs a caught panic once: which user code (`place`, e.g. `"stream connector"`) and what it
/// said. Request contents are never part of it.
pub(crate) fn report(place: &'static str, panic: &Panic) {
    tracing::error!(
        place,
        message = panic.message(),
        "user code panicked; contained"
    );
}

/// A future of user code whose polls are guarded: it resolves to `Err(Panic)` if a poll
/// panicked, and is never polled again after that (a panicked `async fn` must not be resumed).
#[derive(Debug)]
pub(crate) struct CatchUnwind<F> {
    /// `None` once the inner future panicked (it is dropped then, inside a guard).
    inner: Option<F>,
}

impl<F> CatchUnwind<F> {
    pub(crate) fn new(inner: F) -> Self {
        CatchUnwind { inner: Some(inner) }
    }
}

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Panic>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(Panic::new("polled again after a panic")));
        };
        match catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                let panic = Panic::from_payload(payload);
                drop_guarded(this.inner.take());
                Poll::Ready(Err(panic))
            }
        }
    }
}

/// Drops a value of user code, containing a panic in its destructor (which is logged).
pub(crate) fn drop_guarded<T>(value: T) {
    if let Err(panic) = catch(move || drop(value)) {
        report("a destructor", &panic);
    }
}

/// Drops values of user code one at a time, each as [`drop_guarded`]: a panic in one
/// destructor is contained and the rest are still dropped. (Dropping the collection under one
/// guard would drop the rest while the first panic unwinds, and a second panic there aborts
/// the process.)
pub(crate) fn drop_each_guarded<T>(values: impl IntoIterator<Item = T>) {
    for value in values {
        drop_guarded(value);
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use super::{catch, CatchUnwind, Panic};

    fn quiet<R>(body: impl FnOnce() -> R) -> R {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let result = body();
        std::panic::set_hook(hook);
        result
    }

    #[test]
    fn a_panic_shows_what_it_said() {
        let panic = Panic::new("connector broke");
        assert_eq!(panic.to_string(), "panicked: connector broke");
        assert_eq!(format!("{panic:?}"), "Panic(\"connector broke\")");
    }

    #[test]
    fn messages_of_str_and_string_payloads_are_kept() {
        quiet(|| {
            assert_eq!(catch(|| panic!("plain")).unwrap_err().message(), "plain");
            let n = 7;
            assert_eq!(
                catch(|| panic!("formatted {n}")).unwrap_err().message(),
                "formatted 7"
            );
            let other = catch(|| std::panic::panic_any(42_u32)).unwrap_err();
            assert_eq!(
                other.message(),
                "a panic with a payload that is not a string"
            );
            assert_eq!(catch(|| 5).unwrap(), 5);
        });
    }

    /// A payload whose destructor panics is contained as well.
    #[test]
    fn a_payload_that_panics_on_drop_does_not_escape() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("payload drop");
            }
        }
        let caught = quiet(|| catch(|| std::panic::panic_any(Bomb)));
        assert_eq!(
            caught.unwrap_err(),
            Panic::new("a panic with a payload that is not a string")
        );
    }

    /// A future that panics resolves to `Err`, and is not polled again.
    #[test]
    fn a_panicking_future_resolves_to_err_once() {
        struct Explodes(u32);
        impl Future for Explodes {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                self.0 += 1;
                assert!(self.0 < 2, "resumed after panicking");
                panic!("first poll");
            }
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut future = CatchUnwind::new(Explodes(0));
        let first = quiet(|| Pin::new(&mut future).poll(&mut cx));
        assert_eq!(first, Poll::Ready(Err(Panic::new("first poll"))));
        let second = Pin::new(&mut future).poll(&mut cx);
        assert!(matches!(second, Poll::Ready(Err(_))));
    }
}
