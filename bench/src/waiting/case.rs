//! Section 11's cases: who waits, on how many keys, in how many processes.

use std::time::Duration;

use crate::contenders::Contender;

/// One measurement: who waits, on how many keys, in how many processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Case {
    /// Ours, rslock or redis-py.
    pub(crate) contender: Contender,
    /// Waiting keys (one waiter each).
    pub(crate) keys: u64,
    /// Waiting processes the keys are spread over.
    pub(crate) processes: u64,
    /// Ours only: the keys are semaphores of one permit (held by the holders, so every
    /// waiter waits), not locks.
    pub(crate) semaphore: bool,
}

/// The cases of a full run: ours at 1,000 and 10,000 keys in one process and across four,
/// our semaphore (one permit) at 1,000 and 10,000 keys in one process; the polling peers
/// at 1,000 in one process. At 10,000 a poller's own process is the
/// limit, not the library (rslock measured 1.6 requests per waiter per second there, 27
/// at 1,000, its process at 67 % of a core of the 2; one Python process cannot poll
/// 10,000 locks ten times a second, and each redis-py task asking holds a connection).
pub(crate) fn cases(python: bool) -> Vec<Case> {
    let mut cases = Vec::new();
    for processes in [1, 4] {
        for keys in [1_000, 10_000] {
            cases.push(Case {
                contender: Contender::Api,
                keys,
                processes,
                semaphore: false,
            });
        }
    }
    for keys in [1_000, 10_000] {
        cases.push(Case {
            contender: Contender::Api,
            keys,
            processes: 1,
            semaphore: true,
        });
    }
    cases.push(Case {
        contender: Contender::Rslock,
        keys: 1_000,
        processes: 1,
        semaphore: false,
    });
    if python {
        cases.push(Case {
            contender: Contender::RedisPy,
            keys: 1_000,
            processes: 1,
            semaphore: false,
        });
    }
    cases
}

impl Case {
    /// The case's id for `BENCH_ONLY=waiting/ID`: the contender's, or `semaphore`.
    pub(super) fn id(&self) -> &'static str {
        if self.semaphore {
            "semaphore"
        } else {
            self.contender.id()
        }
    }

    /// The case's label in notes.
    pub(super) fn label(&self) -> &'static str {
        if self.semaphore {
            "ours, Semaphore API"
        } else {
            self.contender.label()
        }
    }
}

/// The holders' ttl for a window: the window, the settling before it and the spread of the
/// holders' first renewals fit between their first and second renewal (each may be sent up
/// to ttl/12 early, to share a pipeline).
pub(super) fn holder_ttl(window: Duration) -> Duration {
    (window + Duration::from_secs(8)) * 3
}
