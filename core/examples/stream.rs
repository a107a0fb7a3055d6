//! A stream pool (`slotpool::stream`) over an in-process peer: each stream the pool opens
//! starts a peer task that answers every request it reads, as a gRPC server answers a
//! bidirectional call. Sixteen callers share two streams of four requests in flight each.
//!
//! ```sh
//! cargo run -p slotpool --example stream
//! ```

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use slotpool::stream::{Connector, Outbound, StreamPool, StreamRequest, StreamResponse};
use tokio::sync::mpsc;

/// A request and its response: the pool stamps an id on each request, the peer echoes it.
struct Msg(Option<u64>, String);

impl StreamRequest for Msg {
    fn request_id(&self) -> Option<u64> {
        self.0
    }
    fn set_request_id(&mut self, id: u64) {
        self.0 = Some(id);
    }
}

impl StreamResponse for Msg {
    fn request_id(&self) -> u64 {
        self.0.unwrap_or(0)
    }
}

/// The inbound half of a stream: what the peer sends back.
struct Inbound(mpsc::UnboundedReceiver<Msg>);

impl Stream for Inbound {
    type Item = Result<Msg, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|msg| msg.map(Ok))
    }
}

/// Opens a stream by starting a peer task that reads the requests and answers each one.
struct Peer;

impl Connector for Peer {
    type Request = Msg;
    type Response = Msg;
    type Error = Infallible;
    type Inbound = Inbound;

    async fn connect(&self, mut requests: Outbound<Msg>) -> Result<Inbound, Infallible> {
        let (answers, inbound) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            // Ends when the pool closes the stream (its outbound half ends).
            while let Some(Msg(id, text)) =
                std::future::poll_fn(|cx| Pin::new(&mut requests).poll_next(cx)).await
            {
                let _ = answers.send(Msg(id, text.to_uppercase()));
            }
        });
        Ok(Inbound(inbound))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = StreamPool::builder(Peer)
        .max_streams(2)
        .max_queue_depth(4)
        .build()?;

    // A guard is room for one request on a stream; `send` returns its response.
    let guard = pool.acquire().await?;
    match guard.send(Msg(None, "hello".into())).await {
        Ok(Msg(_, text)) => println!("the peer says {text}"),
        Err(e) if e.reach().retry_is_safe() => println!("not sent, safe to retry: {e}"),
        Err(e) => println!("may have been applied: {e}"),
    }

    // Shared by spawned tasks: an `Arc` and owned guards. Callers beyond the eight requests
    // in flight wait for room (FIFO).
    let pool = Arc::new(pool);
    let callers: Vec<_> = (0..16)
        .map(|n| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let guard = pool.acquire_owned().await.map_err(|e| e.to_string())?;
                let answer = guard.send(Msg(None, format!("word-{n}"))).await;
                answer
                    .map(|Msg(_, text)| (n, text))
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    for caller in callers {
        let (n, text) = caller.await??;
        assert_eq!(
            text,
            format!("WORD-{n}"),
            "every caller gets its own answer"
        );
    }

    let stats = pool.stats();
    println!(
        "{} requests answered over {} streams",
        stats.completed, stats.spin_ups
    );
    assert!(stats.spin_ups <= 2);
    Ok(())
}
