//! The lost signal: how a lease's holder learns, at once, that the lease is lost.
//!
//! A lease is lost at most once, so the signal is a write-once cause and a [`Notify`]: far
//! smaller than a `tokio::sync::watch` channel (which carries eight notifiers and a lock,
//! about 350 bytes per held lock) and made on every acquisition.
//!
//! The lease is judged by the clock, not only by the watchdog's report: the signal also
//! carries the lease's validity point (DESIGN §4: send time + ttl − drift, moved by each
//! confirmed renewal), and a reader past it finds the lease lost, whenever the watchdog
//! gets its turn. A holder starved past that point (a paused process, a busy machine) sees
//! `is_lost()` and is cancelled at its next poll, before its body takes another step.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::LostCause;

/// One holder's view of a lease's loss; clones share it. The watchdog keeps one clone with
/// the lease and [`set`](LostSignal::set)s it; a pass gives the next holder a new one.
#[derive(Debug, Clone, Default)]
pub(crate) struct LostSignal(Arc<SignalState>);

#[derive(Debug, Default)]
struct SignalState {
    cause: OnceLock<LostCause>,
    notify: Notify,
    /// The validity point, as nanoseconds after [`base`] shifted left by one, the lowest
    /// bit telling whether the lease renews (passing the point is then `RenewalFailed`,
    /// else `Expired`); 0 while none is known.
    valid_until: AtomicU64,
    /// When the holder last reported progress ([`LostSignal::progress`]), as nanoseconds
    /// after [`base`]; 0 while it has not. It rides here because this is the one state a
    /// holder and the watchdog share per hold: a report is one atomic store.
    progress: AtomicU64,
}

/// The instant validity points are counted from.
fn base() -> std::time::Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    *BASE.get_or_init(std::time::Instant::now)
}

/// `at` as nanoseconds after [`base`]: at least 1 (0 says "none"), below 2^63.
fn after_base(at: Instant) -> u64 {
    let after = at.into_std().saturating_duration_since(base());
    u64::try_from(after.as_nanos())
        .unwrap_or(u64::MAX)
        .clamp(1, u64::MAX >> 1)
}

impl LostSignal {
    /// A signal not set yet.
    pub(crate) fn new() -> Self {
        LostSignal::default()
    }

    /// Marks the lease lost for `cause` and wakes every task waiting in
    /// [`lost`](LostSignal::lost). The first cause stays.
    pub(crate) fn set(&self, cause: LostCause) {
        let _ = self.0.cause.set(cause);
        self.0.notify.notify_waiters();
    }

    /// The lease is valid until `valid_until` on the local clock (a renewal confirmed, an
    /// extension, a new hold); `renew` says whether the watchdog renews it.
    pub(crate) fn valid_until(&self, valid_until: Instant, renew: bool) {
        self.0.valid_until.store(
            after_base(valid_until) << 1 | u64::from(renew),
            Ordering::Release,
        );
    }

    /// Why the lease was lost, if it was: told (by the watchdog, `extend`, a release, the
    /// shutdown), or found by the clock past the validity point before anyone told it.
    pub(crate) fn cause(&self) -> Option<LostCause> {
        if let Some(cause) = self.reported() {
            return Some(cause);
        }
        let valid_until = self.0.valid_until.load(Ordering::Acquire);
        if valid_until == 0 || after_base(Instant::now()) < valid_until >> 1 {
            return None;
        }
        Some(if valid_until & 1 == 1 {
            LostCause::RenewalFailed
        } else {
            LostCause::Expired
        })
    }

    /// The holder reports progress now: one atomic store, no Redis command (the next
    /// renewal carries it, see `renewals.rs`).
    pub(crate) fn progress(&self) {
        self.0
            .progress
            .store(after_base(Instant::now()), Ordering::Relaxed);
    }

    /// When the holder last reported progress, if it did.
    pub(crate) fn last_progress(&self) -> Option<Instant> {
        match self.0.progress.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Instant::from_std(
                base() + std::time::Duration::from_nanos(nanos),
            )),
        }
    }

    /// The cause someone told ([`set`](Self::set)), not what the clock says: whoever finds
    /// a loss reports it (a WARN, a counted loss) unless it was told already.
    pub(crate) fn reported(&self) -> Option<LostCause> {
        self.0.cause.get().copied()
    }

    /// Resolves when the lease is lost; pends forever while it is not (also after it ended
    /// without a loss). Each poll looks at the clock first: a task resumed past the
    /// validity point finds the lease lost before anything else it awaits.
    pub(crate) async fn lost(&self) -> LostCause {
        loop {
            let mut notified = pin!(self.0.notify.notified());
            // Registered before the check, so a `set` between the two still wakes us.
            notified.as_mut().enable();
            let woken = std::future::poll_fn(|cx| {
                if let Some(cause) = self.cause() {
                    return Poll::Ready(Some(cause));
                }
                notified.as_mut().poll(cx).map(|()| None)
            })
            .await;
            if let Some(cause) = woken {
                return cause;
            }
        }
    }
}

/// Runs a guarded `body` until it ends or its lease is lost (`check` says now, `lost`
/// resolves then). Each poll looks at the lease first, by the clock, so a body resumed past
/// its validity point takes no step; the task waits on the loss only while the body is
/// pending, so a body that ends at its first poll registers nothing.
pub(crate) async fn until_lost<T, L>(
    body: impl Future<Output = T>,
    check: impl Fn() -> Option<L>,
    lost: impl Future<Output = L>,
) -> Result<T, L> {
    let mut body = pin!(body);
    let mut lost = pin!(lost);
    std::future::poll_fn(|cx| {
        if let Some(loss) = check() {
            return Poll::Ready(Err(loss));
        }
        if let Poll::Ready(output) = body.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        lost.as_mut().poll(cx).map(Err)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_hears_the_first_cause() {
        let signal = LostSignal::new();
        let waiter = tokio::spawn({
            let signal = signal.clone();
            async move { signal.lost().await }
        });
        tokio::task::yield_now().await;
        assert_eq!(signal.cause(), None);
        signal.set(LostCause::TokenGone);
        signal.set(LostCause::Expired);
        assert_eq!(waiter.await.unwrap(), LostCause::TokenGone);
        assert_eq!(signal.clone().cause(), Some(LostCause::TokenGone));
    }

    #[tokio::test]
    async fn past_its_validity_point_the_lease_reads_lost_before_anyone_tells() {
        let signal = LostSignal::new();
        signal.valid_until(Instant::now() + std::time::Duration::from_secs(60), true);
        assert_eq!(signal.cause(), None);
        signal.valid_until(Instant::now() - std::time::Duration::from_millis(1), true);
        assert_eq!(signal.cause(), Some(LostCause::RenewalFailed));
        assert_eq!(signal.reported(), None, "the clock's verdict is no report");
        assert_eq!(signal.lost().await, LostCause::RenewalFailed);
        let expired = LostSignal::new();
        expired.valid_until(Instant::now() - std::time::Duration::from_millis(1), false);
        assert_eq!(expired.cause(), Some(LostCause::Expired));
        expired.set(LostCause::TokenGone);
        assert_eq!(
            expired.cause(),
            Some(LostCause::TokenGone),
            "a told cause wins"
        );
    }

    #[test]
    fn progress_is_kept_as_the_last_report() {
        let signal = LostSignal::new();
        assert_eq!(signal.last_progress(), None);
        let before = Instant::now();
        signal.clone().progress();
        let reported = signal.last_progress().expect("a report");
        assert!(reported >= before - std::time::Duration::from_millis(1));
        assert!(reported <= Instant::now());
    }

    #[tokio::test]
    async fn an_unset_signal_pends() {
        let signal = LostSignal::new();
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), signal.lost());
        assert!(waited.await.is_err());
    }
}
