//! slotpool's reference designs, the cases that run them beside slotpool, and the reporting
//! of the side-by-side comparison (`cargo run --release -p slotpool-bench`, see `main.rs`).
//!
//! | module | owns |
//! |---|---|
//! | [`reference`](mod@reference) | the reference designs of the seed systems, one file each: R1's stream pool and its depth-1 successor, R1's channel and client pools, R2's keyed admission, R3's session pool |
//! | [`cases`] | what the comparison runs: one file per group of cases (`stream/`, `stream-depth1/`, `keyed/`, `session/`, `client/`, `e2e/`, and `--scaling`), each building slotpool, the reference and the floor or peers over the same fixtures and handing runners to the harness |
//! | [`fixtures`] | what every case runs over: the connectors, runtimes, task helpers and the floor |
//! | [`report`] | the harness (interleaved repeats, medians) and the table, JSON and chart of a run |
//! | [`faults`] | the fault bench (`--faults`): PostgreSQL pools under a restart, terminated backends, an outage, a blackhole (its TCP proxy) and slow queries, the stream pool over tonic with its peer killed, blackholed and slowed, and the accounting after each |
//! | [`grpc`] | the GetPage service over real tonic: the in-process test server, slotpool's nested stack and R1's, used by the `e2e/` cases, the gRPC tests and the soak |
//!
//! Imports run one way: `report` and `reference` know no case; `fixtures` knows the
//! references' connector trait; `cases` use all of them; `faults` uses the postgres cases'
//! server and building blocks (`cases::postgres`) and `fixtures`. R1's gRPC stack stays in
//! [`grpc`] rather than [`reference`](mod@reference): it adds no pool design of its own (it nests
//! [`reference::stream`] and [`reference::client`] over tonic) and it must be wired exactly as
//! slotpool's stack beside it is (the same endpoint connector and client factory), so the two
//! stacks live together.
#![allow(missing_docs)]

pub mod cases;
pub mod faults;
pub mod fixtures;
pub mod grpc;
pub mod reference;
pub mod report;
