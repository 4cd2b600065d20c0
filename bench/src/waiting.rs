//! Section 11: what waiting costs Redis.
//!
//! N keys are held by our lock (a client of this process of its own, its watchdog renewing
//! them), and N waiters wait on the N distinct keys in one child process or spread across
//! four (this binary again in `wait-worker` mode, or redis-py's script in its `waitworker`
//! mode). Once every waiter has queued, the server's counters are read over a window:
//! commands (`INFO commandstats`, commands run inside scripts included), requests sent (a
//! `MONITOR` tap), server CPU (`INFO cpu`) and the children's CPU.
//!
//! Our waiters park only behind a holder that a renewal has noted for them (its process's
//! liveness key, see `lock_runtime`'s liveness module), so for ours the window opens after
//! the holders' first renewal (a third of their ttl) and closes before their second: the
//! holders' renewals, which are not what waiting costs, fall outside it. What is left in
//! the window is the waiting processes' and the holders' process's liveness refreshes.
//!
//! A child connects, starts its waiters, says `ready` once they all wait, starts its CPU
//! clock at `go`, prints one JSON line ([`WaitReport`]) at `stop`, and keeps waiting until
//! its stdin says more or closes (a peer's requests are tapped after its report). Every
//! wait is bounded; a child that fails or hangs is killed with the others.

mod case;
mod driver;
mod protocol;
mod record;
mod report;
mod semaphore;
mod worker;

pub(crate) use driver::measure;
pub(crate) use record::WaitRecord;
pub(crate) use report::{goal_rows, section};
pub(crate) use worker::{WORKER_ARG, worker_main};

/// `BENCH_ONLY=waiting` runs this section alone.
pub(crate) const NAME: &str = "waiting";
