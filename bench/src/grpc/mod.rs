//! The GetPage service over real tonic: the generated code, the glue that lets slotpool's
//! `StreamPool` carry its messages, an in-process test server with fault knobs ([`server`]),
//! R1's whole nested stack rebuilt faithfully for comparison ([`reference`](mod@reference)),
//! and slotpool's own stack wired the way R1 nests it ([`stack`]). The two stacks live here
//! together, not with the pool designs in `crate::reference`: R1's adds no design of its own
//! (it nests R1's stream, client and channel pools over tonic) and must be built exactly as
//! slotpool's is, from the same endpoint connector and client factory.
//!
//! The service (`proto/getpage.proto`, compiled by `build.rs` without a system `protoc`) has
//! one bidirectional method, `GetPages`: many page requests on one stream, each answered by a
//! response that echoes its `request_id` and carries a per-request [`StatusCode`]. A failed
//! request is a response with a non-OK status, never a stream error, so it does not tear the
//! stream down.

pub mod reference;
pub mod server;
pub mod stack;

use slotpool::stream::{StreamRequest, StreamResponse};

/// The code generated from `proto/getpage.proto`.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod proto {
    tonic::include_proto!("getpage");
}

pub use proto::page_service_client::PageServiceClient;
pub use proto::page_service_server::{PageService, PageServiceServer};
pub use proto::{GetPageRequest, GetPageResponse, RelTag, StatusCode};

/// Size of a page image in a successful response.
pub const PAGE_SIZE: usize = 8192;

/// The `lsn` that asks the test server to end the stream carrying the request (instead of
/// answering it). See [`server::TestServer`].
pub const END_STREAM_LSN: u64 = u64::MAX;

impl StreamRequest for GetPageRequest {
    fn request_id(&self) -> Option<u64> {
        self.request_id
    }

    fn set_request_id(&mut self, id: u64) {
        self.request_id = Some(id);
    }
}

impl StreamResponse for GetPageResponse {
    fn request_id(&self) -> u64 {
        self.request_id
    }
}

/// A request for `block` of a fixed test relation at `lsn`, with no request id (the pool
/// assigns one).
pub fn page_request(block: u32, lsn: u64) -> GetPageRequest {
    GetPageRequest {
        request_id: None,
        rel: Some(RelTag {
            spc_oid: 1663,
            db_oid: 5,
            rel_number: 16_384,
            fork: 0,
        }),
        block,
        lsn,
    }
}

/// A request that makes the test server end the stream carrying it (see [`END_STREAM_LSN`]).
pub fn end_stream_request() -> GetPageRequest {
    page_request(0, END_STREAM_LSN)
}

/// The block and LSN the test server stamps at the start of an OK page, so a test can check
/// that a response reached the caller whose request it answers.
pub fn page_stamp(response: &GetPageResponse) -> Option<(u32, u64)> {
    let block = u32::from_le_bytes(response.page.get(0..4)?.try_into().ok()?);
    let lsn = u64::from_le_bytes(response.page.get(4..12)?.try_into().ok()?);
    Some((block, lsn))
}
