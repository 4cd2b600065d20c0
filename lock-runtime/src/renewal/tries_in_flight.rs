//! The tries in flight: acquisition requests sent to Redis whose replies are not read yet.
//!
//! Such a reply may hold a place in a queue or a grant, which the client learns of only
//! when it reads it. A shutdown that collected what the client holds while one was in
//! flight would miss it (the place or grant would stay in Redis until it lapsed). So each
//! try counts itself here for as long as its reply is unread, and the shutdown, having
//! closed the client, waits (within a bound) for the count to reach zero before it
//! collects again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

/// How many tries are in flight, and a signal for when none is.
#[derive(Debug, Default)]
pub(crate) struct TriesInFlight {
    count: AtomicUsize,
    none: Notify,
    /// A shutdown waits in [`settled`](TriesInFlight::settled): the last try to end wakes
    /// it (otherwise ending a try touches only the count, as on every uncontended
    /// acquisition).
    awaited: AtomicBool,
}

/// One try in flight, until dropped: after its reply was read and what it holds was
/// registered (the place kept by the watchdog, the lease on its schedule), or given up.
pub(crate) struct TryInFlight<'a>(&'a TriesInFlight);

impl TriesInFlight {
    /// Counts a try about to be sent.
    pub(crate) fn start(&self) -> TryInFlight<'_> {
        self.count.fetch_add(1, Ordering::SeqCst);
        TryInFlight(self)
    }

    /// Waits until no try is in flight, or until `bound`.
    pub(crate) async fn settled(&self, bound: Instant) {
        self.awaited.store(true, Ordering::SeqCst);
        for _ in 0..1_000 {
            let notified = self.none.notified();
            tokio::pin!(notified);
            // Registered before the look, so a try ending between the two still wakes us.
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(bound, notified).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for TryInFlight<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.awaited.load(Ordering::SeqCst)
        {
            self.0.none.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn settles_when_the_last_try_ends_or_at_the_bound() {
        let tries = std::sync::Arc::new(TriesInFlight::default());
        tries.settled(Instant::now()).await;
        let first = tries.start();
        let bound = Instant::now() + Duration::from_millis(30);
        tries.settled(bound).await;
        assert!(Instant::now() >= bound, "settled with a try in flight");
        let waiter = tokio::spawn({
            let tries = tries.clone();
            async move {
                tries
                    .settled(Instant::now() + Duration::from_secs(30))
                    .await
            }
        });
        tokio::task::yield_now().await;
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the end of the last try wakes the shutdown")
            .unwrap();
    }
}
