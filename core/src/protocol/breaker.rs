//! A circuit breaker for resource spin-up: after repeated connect failures, fail fast.
//!
//! # The protocol
//!
//! One atomic word holds the state and, when open, the time it may half-open:
//!
//! ```text
//!   Closed --(threshold consecutive failures)--> Open(until)
//!   Open(until) --(a claim at now >= until wins the CAS)--> HalfOpen   (that claim is the probe)
//!   HalfOpen --(probe succeeds)--> Closed
//!   HalfOpen --(probe fails)--> Open(now + backoff)
//! ```
//!
//! Only spin-ups consult the breaker (joining a resource that is already open never does), so
//! the common path pays nothing: a closed breaker is one relaxed load on the claim path and no
//! clock read. Exactly one caller becomes the half-open probe, because the Open → HalfOpen
//! transition is a CAS; everyone else keeps failing fast until the probe reports. A success
//! from any connect closes the breaker (the peer is evidently back).
//!
//! Time is whatever nanosecond base the owner passes in (the pools use their injected
//! `quanta::Clock`), so tests and loom drive it without sleeping.
//!
//! **Jitter** ([`Breaker::jittered`]): each opening lasts between half the backoff and the
//! whole of it, spread by a hash of the time it opened, so that pools that saw the same
//! outage at the same moment do not all probe the recovering peer together. No random
//! number generator and no shared state: the same opening time gives the same length.

use crate::sync::{AtomicU64, Ordering};

const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const STATE_MASK: u64 = 0b11;

/// The breaker's state, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Spin-ups proceed.
    #[default]
    Closed,
    /// Spin-ups fail fast until the backoff ends.
    Open,
    /// One probe spin-up is in flight; others fail fast until it reports.
    HalfOpen,
}

/// What a spin-up may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The breaker is closed: go ahead.
    Normal,
    /// The breaker was open and its backoff has passed: this spin-up is the one probe; report
    /// its outcome with `probe = true`.
    Probe,
}

/// A consecutive-failure circuit breaker. See the [module documentation](self).
#[derive(Debug)]
pub struct Breaker {
    /// Consecutive failures that open the breaker; 0 disables it.
    threshold: u32,
    /// How long it stays open, in the owner's nanoseconds.
    backoff: u64,
    /// Failures since the last success.
    failures: AtomicU64,
    /// `until << 2 | state`. INVARIANT: `until` is meaningful only in `OPEN`.
    word: AtomicU64,
    /// Whether an opening's length is spread over `[backoff / 2, backoff]`.
    jitter: bool,
}

impl Breaker {
    /// A breaker that opens after `threshold` consecutive failures for `backoff_nanos`.
    /// `threshold == 0` never opens.
    pub fn new(threshold: u32, backoff_nanos: u64) -> Self {
        Self {
            threshold,
            backoff: backoff_nanos,
            failures: AtomicU64::new(0),
            word: AtomicU64::new(CLOSED),
            jitter: false,
        }
    }

    /// This breaker with each opening spread over `[backoff / 2, backoff]` (see the
    /// [module documentation](self)).
    #[must_use]
    pub fn jittered(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// How long an opening at `now` lasts.
    fn backoff_at(&self, now: u64) -> u64 {
        if !self.jitter {
            return self.backoff;
        }
        // splitmix64's finaliser: every bit of `now` moves every bit of the spread.
        let mut x = now.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        let half = self.backoff / 2;
        self.backoff - x % (half + 1)
    }

    /// The longest an opening lasts (the backoff), in the owner's nanoseconds.
    pub fn backoff(&self) -> u64 {
        self.backoff
    }

    /// Asks whether a spin-up may start at the time `now()` returns (read only when open).
    ///
    /// # Errors
    /// `Err(retry_after_nanos)` while open or while another caller's probe is in flight.
    pub fn admit(&self, now: impl FnOnce() -> u64) -> Result<Admission, u64> {
        let mut word = self.word.load(Ordering::Acquire);
        if word & STATE_MASK == CLOSED {
            return Ok(Admission::Normal);
        }
        let now = now();
        loop {
            match word & STATE_MASK {
                CLOSED => return Ok(Admission::Normal),
                OPEN => {
                    let until = word >> 2;
                    if now < until {
                        return Err(until - now);
                    }
                    match self.word.compare_exchange(
                        word,
                        HALF_OPEN,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            tracing::debug!("circuit breaker half-open: one probe spin-up");
                            return Ok(Admission::Probe);
                        }
                        // Another caller became the probe, or a success closed it.
                        Err(actual) => word = actual,
                    }
                }
                _ => return Err(self.backoff),
            }
        }
    }

    /// A spin-up succeeded: the breaker closes.
    pub fn on_success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if self.word.swap(CLOSED, Ordering::AcqRel) & STATE_MASK != CLOSED {
            tracing::info!("circuit breaker closed: a spin-up succeeded");
        }
    }

    /// A spin-up failed at `now`. A failed probe, or the threshold-th consecutive failure,
    /// opens the breaker until `now + backoff`.
    pub fn on_failure(&self, now: u64, probe: bool) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if self.threshold == 0 {
            return;
        }
        if probe || failures >= u64::from(self.threshold) {
            let backoff = self.backoff_at(now);
            let until = now.saturating_add(backoff).min(u64::MAX >> 2);
            if self.word.swap(until << 2 | OPEN, Ordering::AcqRel) & STATE_MASK != OPEN {
                tracing::warn!(
                    consecutive_failures = failures,
                    probe,
                    backoff_ms = backoff / 1_000_000,
                    "circuit breaker opened: spin-ups fail fast until the backoff ends"
                );
            }
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        match self.word.load(Ordering::Acquire) & STATE_MASK {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }
}

#[cfg(all(test, not(slotpool_loom), not(slotpool_shuttle)))]
mod tests {
    use super::*;

    /// A jittered opening lasts between half the backoff and all of it, and the lengths spread
    /// over that range; without jitter every opening lasts the backoff.
    #[test]
    fn jitter_spreads_openings_over_the_upper_half_of_the_backoff() {
        let backoff = 1_000_000;
        let plain = Breaker::new(1, backoff);
        let jittered = Breaker::new(1, backoff).jittered();
        let lengths: Vec<u64> = (0..1000u64)
            .map(|i| jittered.backoff_at(i * 7_919_113))
            .collect();
        assert!(lengths
            .iter()
            .all(|&l| (backoff / 2..=backoff).contains(&l)));
        let (low, high) = lengths
            .iter()
            .partition::<Vec<u64>, _>(|&&l| l < backoff * 3 / 4);
        assert!(
            low.len() > 300 && high.len() > 300,
            "{} / {}",
            low.len(),
            high.len()
        );
        assert!((0..100).all(|i| plain.backoff_at(i) == backoff));

        // Opened at 5: half-open at its jittered end, not before.
        jittered.on_failure(5, false);
        let end = 5 + jittered.backoff_at(5);
        assert_eq!(jittered.admit(|| end - 1), Err(1));
        assert_eq!(jittered.admit(|| end), Ok(Admission::Probe));
    }
}
