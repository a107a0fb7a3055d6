//! The cases the comparison runs, one file per group. Each file names its cases, sets their
//! sizes and full-run operation counts, builds slotpool, the reference design and the floor
//! or peers over the same [`fixtures`](crate::fixtures), and hands one runner per
//! implementation to the harness ([`report::interleave`](crate::report::interleave)). The
//! runners are public so the criterion benches (`benches/`) time the same code.
//!
//! | file | cases | reference |
//! |---|---|---|
//! | `stream.rs` | `stream/*`: acquire/release uncontended, over 256 streams, from 8 tasks, saturated; a round trip | R1 stream pool |
//! | `stream_depth1.rs` | `stream-depth1/*`: slotpool at `max_queue_depth(1)`, uncontended, from 8 tasks, 240 of 256 busy | R1 depth-1 pool |
//! | `keyed.rs` | `keyed/*`: admission uncontended and from 8 tasks; through `spawn_blocking` | R2 |
//! | `session.rs` | `session/*`: hot re-acquire, churn | R3 |
//! | `client.rs` | `client/*`: exclusive checkout, also against deadpool, bb8 and a bare semaphore | R1 client pool |
//! | `managed.rs` | `managed/*`: the managed pool's checkout uncontended, from 8 tasks, saturated, over a no-op manager | deadpool, bb8, asyncband, a bare semaphore |
//! | `postgres.rs` | `postgres/*`: a prepared `SELECT 1` per checkout against a throwaway PostgreSQL server, at concurrency 1, 16, 64; the checkout and return of a real connection alone, from 1 and 8 tasks (`pool-only`) | deadpool-postgres, bb8-postgres, one connection per task; in `pool-only`, asyncband and a hand-rolled semaphore + `Mutex<Vec>` |
//! | `e2e.rs` | `e2e/*`: GetPage requests through the whole gRPC stack | R1's stack ([`crate::grpc`]) |
//! | `scaling.rs` | `scaling/*` (`--scaling`): the contended cases at 1-16 workers | as above |

pub mod client;
pub mod e2e;
pub mod keyed;
pub mod managed;
pub mod postgres;
pub mod scaling;
pub mod session;
pub mod stream;
pub mod stream_depth1;
