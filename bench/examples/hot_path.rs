//! A fixed number of acquire → release rounds of one hot path on one task, for instruction
//! counting, and the budgets table that counts every hot path at once.
//!
//! ```sh
//! cargo run --release -p slotpool-bench --example hot_path -- budgets      # the table
//! cargo run --release -p slotpool-bench --example hot_path -- peers        # the peers' table
//! cargo run --release -p slotpool-bench --example hot_path -- stream 100000
//! valgrind --tool=callgrind --toggle-collect='hot_path::timed*' target/release/examples/hot_path stream 100000
//! ```
//!
//! **Budgets.** `budgets [ROUNDS]` re-executes this binary under `valgrind --tool=callgrind
//! --dump-instr=yes --compress-pos=no --compress-strings=no --toggle-collect='hot_path::timed*'`
//! for every path in [`BUDGETS`], at `ROUNDS` (default 10 000) and twice as many rounds, and
//! prints per operation the instructions executed and the **locked read-modify-writes**
//! among them, each the difference of the two runs divided by `ROUNDS` (so the set-up inside
//! the timed frame, a runtime's first poll, a first-use initialisation, cancels out). Locked
//! RMWs are counted exactly: callgrind's per-instruction counts (`0xADDR LINE COUNT`, object
//! relative; the line after each `calls=` line is a call's inclusive cost and is skipped) are
//! summed at the addresses where `objdump -d` of this same binary shows a `lock`-prefixed
//! instruction or an `xchg` with a memory operand. It needs `valgrind` and `objdump`.
//!
//! **Paths** (one task, no contention; `ROUNDS` defaults to 100 000):
//!
//! | mode | one round |
//! |---|---|
//! | `floor` | one CAS below a limit and one `fetch_sub` on one counter (the floor of every table) |
//! | `stream` | `StreamPool::acquire().await` and drop the guard (64 streams × depth 8, one open) |
//! | `stream-try` | `try_acquire()` and drop, in a plain loop (also prints wall ns/round) |
//! | `stream-async` | as `stream`, printing wall ns/round |
//! | `stream-owned` | `acquire_owned().await` and drop (the future borrows the pool; the room the guard holds keeps the pool's state alive, with no reference count) |
//! | `stream-scan` | as `stream` with 256 streams open and the lowest 240 full (`stream/256-streams-240-full`) |
//! | `stream-depth1` | as `stream` at `max_queue_depth(1)` (`stream-depth1/uncontended`) |
//! | `stream-depth1-busy` | `stream-depth1/256-streams-240-busy` |
//! | `client` | `ClientPool` checkout and return (`client/uncontended`) |
//! | `managed` | `managed::Pool::get().await` and drop the object (`managed/uncontended`, no-op manager, 16 objects; its `recycle_now` accepts, so the `get` takes the fast path) |
//! | `managed-async` | `managed` with a manager that recycles in the async `recycle` (the trait's default, ready at once) |
//! | `keyed` | `Keyed::admit` and drop, cycling the 19 families of `keyed/uncontended` |
//! | `session-hot` | `SessionPool::acquire` of an active session and drop, cycling 1000 sessions |
//! | `limit` | `Limit::try_acquire` and drop |
//! | `gate` | a wait on the gate and its notify: with the one permit of a `Limit` held, poll its `acquire()` (it queues), drop the held permit (which hands it to the waiter), poll again (ready) |
//! | `client-168`, `managed-216` | `client` and `managed` with an object of 168 and 216 bytes (the gRPC bench's tonic client, a `managed::postgres::PgClient`) |
//!
//! **Peers.** `peers [ROUNDS]` counts the rows of [`PEERS`] the same way: the floor,
//! slotpool's `managed` and `client` rows, and beside them what they are timed against in
//! `managed/uncontended` and `client/uncontended` (a bare tokio `Semaphore`, asyncband,
//! deadpool, bb8). A timed ratio between two of them swings with the machine's load from run
//! to run; these counts do not.
//!
//! and, for comparison only (not in the budgets): `semaphore` (a tokio `Semaphore` of 16
//! permits: `acquire().await` and drop the permit), `reference`, `reference-depth1`,
//! `reference-depth1-busy` (R1's stream pool), `client-deadpool`, `managed-deadpool`,
//! `managed-bb8` and `managed-asyncband` (the peers of `managed/uncontended`),
//! `keyed-reference` (R2's design); `saturated-stream` and `saturated-reference` run
//! `stream/saturated` (64 tasks for 16 slots on 2 workers), `saturated-managed` and
//! `saturated-semaphore` run `managed/saturated` (64 tasks for 16 objects, or a bare tokio
//! `Semaphore` of 16 permits); count those with `--toggle-collect='*saturated*'`, which takes
//! the tasks' polls.
//!
//! The timed rounds run inside [`timed`], so `--toggle-collect='hot_path::timed*'` counts
//! them alone; divide by the rounds.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use slotpool::blocks::Limit;
use slotpool_bench::cases::client as client_cases;
use slotpool_bench::cases::keyed as keyed_cases;
use slotpool_bench::cases::managed;
use slotpool_bench::cases::session as session_cases;
use slotpool_bench::cases::stream::{
    fill_slotpool, prewarm_reference, prewarm_slotpool, reference_acquire_release, saturated_tasks,
    slotpool_acquire_release, slotpool_pool, Hold, DEPTH, SAT_DEPTH, SAT_STREAMS, SAT_TASKS,
    SCAN_STREAMS, STREAMS, WORKERS,
};
use slotpool_bench::cases::stream_depth1 as depth1;
use slotpool_bench::fixtures::{
    current_thread, floor_acquire_release, multi_thread, Floor, NoopConnector,
};
use slotpool_bench::reference::stream::RefStreamPool;

/// The hot paths the budgets table lists, in order, as (mode, what one operation is); the
/// floor comes first, and every row is compared with it. Adding a path is one line here (and
/// its mode in [`run`]).
const BUDGETS: &[(&str, &str)] = &[
    ("floor", "CAS below a limit + `fetch_sub`"),
    ("stream", "stream `acquire().await` + drop"),
    ("stream-try", "stream `try_acquire()` + drop"),
    ("stream-owned", "stream `acquire_owned().await` + drop"),
    ("stream-scan", "stream acquire + drop, 240 of 256 full"),
    ("stream-depth1", "stream acquire + drop, depth 1"),
    ("client", "client checkout + return"),
    ("client-168", "client checkout + return, a 168-byte client"),
    ("managed", "managed `get().await` + drop"),
    (
        "managed-async",
        "managed `get().await` + drop, recycled by an async `recycle`",
    ),
    (
        "managed-216",
        "managed `get().await` + drop, a 216-byte object",
    ),
    ("keyed", "keyed `admit` + drop"),
    ("session-hot", "session hot `acquire` + drop"),
    ("limit", "`Limit::try_acquire` + drop"),
    ("gate", "gate wait + notify: queue, hand over, resolve"),
];

/// The peers of the object rows, counted as the budgets are (`peers [ROUNDS]`): the floor
/// first, slotpool's managed row, then the bound and the pools it is timed beside in
/// `managed/uncontended` (and deadpool's unmanaged pool, `client/uncontended`'s peer). Not
/// budgets: what each design costs per checkout and return, with no clock in it.
const PEERS: &[(&str, &str)] = &[
    ("floor", "CAS below a limit + `fetch_sub`"),
    ("managed", "slotpool managed `get().await` + drop"),
    (
        "semaphore",
        "tokio `Semaphore::acquire().await` + drop (the bound)",
    ),
    ("managed-asyncband", "asyncband bounded pool `get` + drop"),
    ("managed-deadpool", "deadpool managed `get` + drop"),
    ("managed-bb8", "bb8 `get` + drop"),
    ("client", "slotpool client checkout + return"),
    ("client-deadpool", "deadpool unmanaged `get` + drop"),
];

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "stream".into());
    if which == "budgets" || which == "peers" {
        let rounds = args.next().map_or(10_000, |n| n.parse().expect("rounds"));
        let (title, rows) = match which.as_str() {
            "budgets" => ("hot-path budgets", BUDGETS),
            _ => ("peers of the object rows", PEERS),
        };
        table(title, rows, rounds);
        return;
    }
    let rounds: u64 = args.next().map_or(100_000, |n| n.parse().expect("rounds"));
    run(&which, rounds);
}

/// Runs `rounds` rounds of path `which` inside [`timed`].
fn run(which: &str, rounds: u64) {
    let rt = current_thread();
    match which {
        "stream" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "stream-try" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            let start = std::time::Instant::now();
            timed(|| {
                for _ in 0..rounds {
                    let guard = pool.try_acquire().expect("room");
                    std::hint::black_box(&guard);
                }
            });
            println!(
                "{:.1} ns/op",
                start.elapsed().as_nanos() as f64 / rounds as f64
            );
        }
        "stream-async" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            let elapsed = timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "stream-owned" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            timed(|| {
                rt.block_on(async {
                    for _ in 0..rounds {
                        let guard = pool.acquire_owned().await.expect("open");
                        std::hint::black_box(&guard);
                    }
                })
            });
        }
        "stream-scan" => {
            let pool = slotpool_pool(&rt, NoopConnector, SCAN_STREAMS, DEPTH);
            let _held = fill_slotpool(&rt, &pool, DEPTH);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "reference" => {
            let pool = {
                let _enter = rt.enter();
                RefStreamPool::new(NoopConnector, Some(STREAMS), DEPTH)
            };
            prewarm_reference(&rt, &pool, 1, 1);
            timed(|| rt.block_on(reference_acquire_release(&pool, rounds)));
        }
        "stream-depth1" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, depth1::DEPTH);
            prewarm_slotpool(&rt, &pool, 1, depth1::DEPTH);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "reference-depth1" => {
            let pool = depth1::reference_pool(&rt, STREAMS);
            depth1::prewarm_reference(&rt, &pool, 1);
            timed(|| rt.block_on(reference_acquire_release(&pool, rounds)));
        }
        "stream-depth1-busy" => {
            let pool = slotpool_pool(&rt, NoopConnector, depth1::BUSY_STREAMS, depth1::DEPTH);
            let _held = depth1::fill_slotpool(&rt, &pool);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "reference-depth1-busy" => {
            let pool = depth1::reference_pool(&rt, depth1::BUSY_STREAMS);
            let _held = depth1::fill_reference(&rt, &pool);
            timed(|| rt.block_on(reference_acquire_release(&pool, rounds)));
        }
        "floor" => {
            let floor = Floor::new(STREAMS * DEPTH);
            let elapsed = timed(|| floor_acquire_release(&floor, rounds));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "saturated-stream" => {
            let rt = multi_thread(WORKERS);
            let pool = Arc::new(slotpool_pool(&rt, NoopConnector, SAT_STREAMS, SAT_DEPTH));
            prewarm_slotpool(&rt, &pool, SAT_STREAMS, SAT_DEPTH);
            saturated(&rt, &pool, rounds);
        }
        "saturated-managed" => {
            let rt = multi_thread(WORKERS);
            let pool = Arc::new(managed::slotpool(&rt));
            saturated(&rt, &pool, rounds);
        }
        "saturated-semaphore" => {
            let rt = multi_thread(WORKERS);
            let pool = Arc::new(tokio::sync::Semaphore::new(managed::OBJECTS));
            saturated(&rt, &pool, rounds);
        }
        "saturated-reference" => {
            let rt = multi_thread(WORKERS);
            let pool = Arc::new(RefStreamPool::new(
                NoopConnector,
                Some(SAT_STREAMS),
                SAT_DEPTH,
            ));
            prewarm_reference(&rt, &pool, SAT_STREAMS, SAT_DEPTH);
            saturated(&rt, &pool, rounds);
        }
        "client" => {
            let pool = client_cases::slotpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "client-168" => {
            let pool = rt.block_on(large::clients());
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "client-deadpool" => {
            let pool = client_cases::deadpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "keyed" => {
            let keyed = keyed_cases::slotpool_keyed();
            let elapsed =
                timed(|| rt.block_on(keyed_cases::slotpool_admit_release(&keyed, 0, rounds)));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "keyed-reference" => {
            let reference = slotpool_bench::reference::keyed::RefKeyed::new();
            let elapsed =
                timed(|| rt.block_on(keyed_cases::reference_admit_release(&reference, 0, rounds)));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "managed" => {
            let pool = managed::slotpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "managed-async" => {
            let pool = large::AsyncPool(managed::prewarmed(&rt, managed::NoopAsyncObjects));
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "managed-216" => {
            let pool = rt.block_on(large::pool());
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "managed-deadpool" => {
            let pool = managed::deadpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "managed-bb8" => {
            let pool = client_cases::bb8(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "semaphore" => {
            let semaphore = client_cases::tokio_semaphore();
            timed(|| rt.block_on(client_cases::checkouts(&semaphore, rounds)));
        }
        "managed-asyncband" => {
            let pool = managed::asyncband(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "session-hot" => {
            let pool = session_cases::slotpool_pool(&rt);
            let ids = session_cases::hot_ids();
            session_cases::fill_slotpool(&rt, &pool, &ids);
            let ctx = session_cases::context();
            timed(|| {
                rt.block_on(async {
                    for id in ids.iter().cycle().take(rounds as usize) {
                        match pool.acquire(id, &ctx).await {
                            Ok(session) => drop(std::hint::black_box(session)),
                            Err(e) => panic!("hot acquire failed: {e}"),
                        }
                    }
                })
            });
        }
        "limit" => {
            let limit = Limit::new(STREAMS * DEPTH).expect("valid capacity");
            timed(|| {
                for _ in 0..rounds {
                    let permit = limit.try_acquire().expect("room");
                    std::hint::black_box(&permit);
                }
            });
        }
        "gate" => {
            let limit = Limit::new(1).expect("valid capacity");
            let mut cx = Context::from_waker(Waker::noop());
            let mut held = limit.try_acquire().expect("the one permit");
            timed(|| {
                for _ in 0..rounds {
                    let mut wait = pin!(limit.acquire());
                    assert!(
                        wait.as_mut().poll(&mut cx).is_pending(),
                        "the permit is held"
                    );
                    drop(held);
                    held = match wait.as_mut().poll(&mut cx) {
                        Poll::Ready(Ok(permit)) => permit,
                        _ => panic!("the released permit goes to the waiter"),
                    };
                }
            });
        }
        other => panic!("unknown path `{other}` (see the module docs)"),
    }
}

/// Runs about `rounds` rounds of `pool` in [`saturated_tasks`] on `rt` (the `saturated-*`
/// paths), inside [`timed`].
fn saturated<P: Hold>(rt: &tokio::runtime::Runtime, pool: &Arc<P>, rounds: u64) {
    let per_task = rounds / SAT_TASKS as u64;
    timed(|| rt.block_on(saturated_tasks(pool, SAT_TASKS, per_task)));
}

/// Runs the timed rounds (a named frame for callgrind's `--toggle-collect`).
#[inline(never)]
fn timed<R>(run: impl FnOnce() -> R) -> R {
    std::hint::black_box(run())
}

// ---------------------------------------------------------------------------------------------
// Budgets: this binary under callgrind, path by path
// ---------------------------------------------------------------------------------------------

/// What callgrind counted in the timed frame of one run.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    /// Instructions executed, in every object.
    instructions: u64,
    /// Locked read-modify-writes among them, in every object `objdump` can read.
    locked: u64,
    /// Instructions executed outside this binary (libc's `memcmp`, `malloc`, ...).
    elsewhere: u64,
}

/// The locked instructions of each object met so far, by its path (`None`: unreadable).
type LockedSites = HashMap<String, Option<HashSet<u64>>>;

/// Prints a table of `rows` (the budgets, or the peers): every path at `rounds` and
/// `2 × rounds`.
fn table(title: &str, rows: &[(&str, &str)], rounds: u64) {
    let exe = std::env::current_exe().expect("the path of this binary");
    let mut sites = LockedSites::new();
    assert!(
        locked_sites(&mut sites, &exe.to_string_lossy()).is_some(),
        "cannot disassemble {} with objdump (is binutils installed?)",
        exe.display()
    );
    println!(
        "{title}: callgrind, per operation, ({rounds} → {} rounds) / {rounds}; \
         floor = one CAS below a limit + one fetch_sub",
        2 * rounds
    );
    println!();
    println!(
        "| path | one operation | instructions | locked RMWs | × floor's instructions | outside the binary |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut floor = None;
    for &(mode, op) in rows {
        let once = measure(&exe, &mut sites, mode, rounds);
        let twice = measure(&exe, &mut sites, mode, 2 * rounds);
        let per_op =
            |f: fn(&Cost) -> u64| f(&twice).saturating_sub(f(&once)) as f64 / rounds as f64;
        let (instructions, locked_rmws) = (per_op(|c| c.instructions), per_op(|c| c.locked));
        let elsewhere = per_op(|c| c.elsewhere);
        let floor_instructions = *floor.get_or_insert(instructions);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1}× | {:.1} |",
            mode,
            op,
            instructions,
            locked_rmws,
            instructions / floor_instructions,
            elsewhere
        );
    }
    let unread: Vec<&str> = sites
        .iter()
        .filter(|(_, locked)| locked.is_none())
        .map(|(object, _)| object.as_str())
        .collect();
    if !unread.is_empty() {
        println!();
        println!(
            "(locked RMWs not counted in {}: objdump cannot read them)",
            unread.join(", ")
        );
    }
}

/// Runs `exe MODE ROUNDS` under callgrind, counting the timed frame, and reads the counts.
fn measure(exe: &Path, sites: &mut LockedSites, mode: &str, rounds: u64) -> Cost {
    let out = std::env::temp_dir().join(format!(
        "hot_path-{}-{mode}-{rounds}.callgrind",
        std::process::id()
    ));
    let status = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--dump-instr=yes",
            "--compress-pos=no",
            "--compress-strings=no",
            "--toggle-collect=hot_path::timed*",
        ])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args([mode, &rounds.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run valgrind (is it installed?): {e}"));
    assert!(status.success(), "`{mode} {rounds}` failed under callgrind");
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", out.display()));
    let _ = std::fs::remove_file(&out);
    parse_callgrind(&text, &exe.to_string_lossy(), sites)
}

/// Sums callgrind's per-instruction costs (`--dump-instr=yes --compress-pos=no
/// --compress-strings=no` output): all of them, those at the locked instructions of their
/// object, and those outside `exe`.
fn parse_callgrind(text: &str, exe: &str, sites: &mut LockedSites) -> Cost {
    let mut cost = Cost::default();
    let mut object = String::new();
    let mut skip_next = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("ob=") {
            name.clone_into(&mut object);
            continue;
        }
        if line.starts_with("calls=") {
            // The next line is the call's inclusive cost, counted where it was spent.
            skip_next = true;
            continue;
        }
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let Some(rest) = line.strip_prefix("0x") else {
            continue;
        };
        let mut fields = rest.split_ascii_whitespace();
        let (Some(address), Some(_line), Some(count)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(address), Ok(count)) = (u64::from_str_radix(address, 16), count.parse::<u64>())
        else {
            continue;
        };
        cost.instructions += count;
        if object != exe {
            cost.elsewhere += count;
        }
        if locked_sites(sites, &object).is_some_and(|locked| locked.contains(&address)) {
            cost.locked += count;
        }
    }
    cost
}

/// The addresses of `object`'s locked read-modify-writes, from `objdump -d` (cached): every
/// `lock`-prefixed instruction and every `xchg` with a memory operand (locked implicitly).
/// Callgrind reports addresses relative to their object, as `objdump` prints them. `None`
/// for an object `objdump` cannot read (the vDSO, say).
fn locked_sites<'a>(sites: &'a mut LockedSites, object: &str) -> Option<&'a HashSet<u64>> {
    sites
        .entry(object.to_owned())
        .or_insert_with(|| disassemble_locked(object))
        .as_ref()
}

fn disassemble_locked(object: &str) -> Option<HashSet<u64>> {
    let output = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", object])
        .output()
        .ok()
        .filter(|output| output.status.success())?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut locked = HashSet::new();
    for line in text.lines() {
        // `  bcf6c:\tlock cmpxchg %rsi,(%rcx)`
        let Some((address, instruction)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(address) = u64::from_str_radix(address.trim(), 16) else {
            continue;
        };
        let instruction = instruction.trim_start();
        if instruction.starts_with("lock")
            || (instruction.starts_with("xchg") && instruction.contains('('))
        {
            locked.insert(address);
        }
    }
    Some(locked)
}

/// `managed-216`: the `managed` path with an object the size of a `managed::postgres::PgClient`
/// (216 bytes), to tell what the object's moves cost.
mod large {
    use std::convert::Infallible;
    use std::hint::black_box;

    use slotpool::managed::{Manager, Pool};
    use slotpool_bench::cases::client::Checkout;

    pub struct Large;

    impl Manager for Large {
        type Type = [u64; 27];
        type Error = Infallible;

        async fn create(&self) -> Result<[u64; 27], Infallible> {
            Ok([0; 27])
        }

        // As `managed::postgres::PgManager`'s `Fast` recycling: decided with no await.
        fn recycle_now(
            &self,
            _: &mut [u64; 27],
            _: &slotpool::managed::Meta,
        ) -> Option<slotpool::managed::RecycleResult<Infallible>> {
            Some(Ok(()))
        }
    }

    /// `managed-async`: [`NoopAsyncObjects`](slotpool_bench::cases::managed::NoopAsyncObjects).
    pub struct AsyncPool(pub Pool<slotpool_bench::cases::managed::NoopAsyncObjects>);

    impl Checkout for AsyncPool {
        async fn checkout(&self) {
            let object = self.0.get().await.expect("never fails");
            black_box(&object.0);
        }
    }

    pub struct LargePool(Pool<Large>);

    impl Checkout for LargePool {
        async fn checkout(&self) {
            let object = self.0.get().await.expect("never fails");
            black_box(&object[0]);
        }
    }

    pub async fn pool() -> LargePool {
        let pool = Pool::builder(Large)
            .max_size(16)
            .reap_interval(Some(slotpool_bench::cases::managed::IDLE_PASSES))
            .build()
            .expect("valid");
        let held: Vec<_> = futures_held(&pool).await;
        drop(held);
        LargePool(pool)
    }

    /// A client the size of the gRPC bench's tonic client (168 bytes).
    pub struct LargeClients;

    impl slotpool::client::ClientFactory<u64> for LargeClients {
        type Client = [u64; 21];
        type Error = Infallible;
        async fn make(&self, _: &u64) -> Result<[u64; 21], Infallible> {
            Ok([0; 21])
        }
    }

    pub struct LargeClientPool(
        std::sync::Arc<
            slotpool::client::ClientPool<slotpool_bench::fixtures::IdChannels, LargeClients>,
        >,
    );

    impl Checkout for LargeClientPool {
        async fn checkout(&self) {
            let client = self.0.acquire().await.expect("never fails");
            black_box(&client[0]);
        }
    }

    pub async fn clients() -> LargeClientPool {
        let channels =
            slotpool::channel::ChannelPool::builder(slotpool_bench::fixtures::IdChannels)
                .max_clients_per_channel(4)
                .reap_interval(None)
                .build()
                .expect("valid");
        let clients = slotpool::client::ClientPool::builder(channels, LargeClients)
            .max_clients(Some(16))
            .reap_interval(Some(slotpool_bench::cases::managed::IDLE_PASSES))
            .build()
            .expect("valid");
        let mut held = Vec::new();
        for _ in 0..16 {
            held.push(clients.acquire().await.expect("room"));
        }
        drop(held);
        LargeClientPool(clients)
    }

    async fn futures_held(pool: &Pool<Large>) -> Vec<slotpool::managed::Object<Large>> {
        let mut held = Vec::new();
        for _ in 0..16 {
            held.push(pool.get().await.expect("room"));
        }
        held
    }
}
