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
//! Time is whatever nanosecond base the owner passes in (the pools use their injected clock),
//! so tests and loom drive it without sleeping.
//!
//! **Growing backoff** ([`Breaker::growing`]): the first opening lasts `first`, and each
//! failed probe after it doubles the length, up to the backoff; a success starts over. A
//! short first pause lets a peer that restarts in a moment be found at once, and the growth
//! keeps a long outage at a handful of attempts.
//!
//! **Jitter** ([`Breaker::jittered`]): each opening lasts between half its length and the
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
#[non_exhaustive]
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
    /// The longest it stays open, in the owner's nanoseconds.
    backoff: u64,
    /// How long the first opening after a success lasts (the backoff unless growing).
    first: u64,
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
            first: backoff_nanos,
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

    /// This breaker with a growing backoff: the first opening after a success lasts
    /// `first_nanos` (at most the backoff), each later one twice the one before, up to the
    /// backoff (see the [module documentation](self)).
    #[must_use]
    pub fn growing(mut self, first_nanos: u64) -> Self {
        self.first = first_nanos.clamp(1, self.backoff.max(1));
        self
    }

    /// How long an opening at `now` lasts, after `failures` consecutive failures: `first`
    /// doubled for each failure past the threshold, capped at the backoff, then jittered.
    fn backoff_at(&self, now: u64, failures: u64) -> u64 {
        let doublings = failures.saturating_sub(u64::from(self.threshold)).min(63);
        let length = self
            .first
            .checked_shl(doublings as u32)
            .filter(|&l| l >> doublings == self.first)
            .map_or(self.backoff, |l| l.min(self.backoff));
        if !self.jitter {
            return length;
        }
        // splitmix64's finaliser: every bit of `now` moves every bit of the spread.
        let mut x = now.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        let half = length / 2;
        length - x % (half + 1)
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
                // A probe is out: ask again soon (its outcome may end the pause).
                _ => return Err(self.first),
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
            let backoff = self.backoff_at(now, failures);
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
            .map(|i| jittered.backoff_at(i * 7_919_113, 1))
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
        assert!((0..100).all(|i| plain.backoff_at(i, 1 + i % 5) == backoff));
        // Spread evenly: openings a millisecond apart (pools that met one outage) land in
        // every eighth of the range, none with more than twice its share, and nearly all
        // apart from each other.
        let ms: Vec<u64> = (0..800u64)
            .map(|i| jittered.backoff_at(1_000_000_000 + i * 1_000_000, 1))
            .collect();
        let mut buckets = [0usize; 8];
        for &l in &ms {
            let bucket = ((l - backoff / 2) * 8 / (backoff / 2 + 1)) as usize;
            buckets[bucket] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (50..=200).contains(&n)),
            "{buckets:?}"
        );
        let mut distinct = ms.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 750, "{} distinct of 800", distinct.len());

        // Opened at 5: half-open at its jittered end, not before.
        jittered.on_failure(5, false);
        let end = 5 + jittered.backoff_at(5, 1);
        assert_eq!(jittered.admit(|| end - 1), Err(1));
        assert_eq!(jittered.admit(|| end), Ok(Admission::Probe));
    }

    /// A growing backoff starts at `first`, doubles with each failure past the threshold up
    /// to the backoff, and starts over after a success.
    #[test]
    fn a_growing_backoff_doubles_up_to_the_backoff_and_starts_over() {
        let breaker = Breaker::new(3, 1_000).growing(100);
        let lengths: Vec<u64> = (3..9)
            .map(|failures| breaker.backoff_at(0, failures))
            .collect();
        assert_eq!(lengths, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(breaker.backoff_at(0, u64::MAX), 1_000, "no overflow");

        for _ in 0..3 {
            breaker.on_failure(0, false);
        }
        assert_eq!(breaker.admit(|| 99), Err(1));
        assert_eq!(breaker.admit(|| 100), Ok(Admission::Probe));
        assert_eq!(
            breaker.admit(|| 100),
            Err(100),
            "a probe is out: ask again soon"
        );
        breaker.on_failure(100, true);
        assert_eq!(
            breaker.admit(|| 299),
            Err(1),
            "the second opening lasts 200"
        );
        assert_eq!(breaker.admit(|| 300), Ok(Admission::Probe));
        breaker.on_success();
        for _ in 0..3 {
            breaker.on_failure(1_000, false);
        }
        assert_eq!(
            breaker.admit(|| 1_099),
            Err(1),
            "after a success: 100 again"
        );
    }
}
