//! The tests' log capture (`crate::common::logs::capture_logs`) against tracing's process-wide
//! callsite-interest cache: an event whose callsite another thread hit first, with no
//! subscriber, still reaches the capture. The file holds one test, so that its process has no
//! other dispatcher than the capture's (as a lone test of a test binary, or one whose peers
//! hold none at that moment).
//!
//! Before the capture kept a second dispatcher alive, this test failed every time: the other
//! thread's first hit was decided by its own default (none) alone and cached as `never`, and
//! the capturing thread's event was dropped before the capture saw it (the cause of
//! `session::a_panicking_connect_fails_with_not_sent`'s empty capture).

use crate::common::logs::capture_logs;

/// One callsite, hit from whichever thread calls it.
fn warn_once(what: &str) {
    tracing::warn!(what, "a callsite shared across threads");
}

#[test]
fn an_event_whose_callsite_another_thread_hit_first_is_captured() {
    let (logs, _guard) = capture_logs();
    std::thread::spawn(|| warn_once("on a thread with no subscriber"))
        .join()
        .expect("the other thread logs without panicking");
    warn_once("on the capturing thread");
    let text = logs.text();
    assert!(
        text.contains("on the capturing thread"),
        "the capture saw the event: {text:?}"
    );
    assert!(
        !text.contains("on a thread with no subscriber"),
        "a capture is this thread's alone: {text:?}"
    );
}
