//! The reference designs: the pools of the three seed systems (`SEEDS.md`), rebuilt faithfully
//! from their descriptions so that slotpool is measured against the designs it replaces, with
//! their locks, maps and semaphores, never a strawman. One design per file; each module doc
//! says what the design does and which of its costs are kept on purpose.
//!
//! | file | design |
//! |---|---|
//! | `stream.rs` | R1's multiplexed stream pool: a linear scan of a `Mutex<HashMap>`, a semaphore of `max_streams × max_queue_depth` |
//! | `stream_depth1.rs` | R1's later depth-1 design: exclusive streams popped lowest id first from a `Mutex<BTreeMap>` |
//! | `client.rs` | R1's channel and client pools: `Mutex<BTreeMap>`s, a semaphore for `max_clients` |
//! | `keyed.rs` | R2's keyed admission of a blocking pool: one global `Mutex<BTreeMap>` of semaphores, with R2's census of families |
//! | `session.rs` | R3's session pool: one async mutex over all state |
//!
//! The stream references open streams through [`stream::RefConnector`], which the fixtures
//! implement next to slotpool's `Connector`; the others run over slotpool's own traits.

pub mod client;
pub mod keyed;
pub mod session;
pub mod stream;
pub mod stream_depth1;
