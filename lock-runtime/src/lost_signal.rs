//! The lost signal: how the watchdog tells a lease's holder, at once, that the lease is lost.
//!
//! A lease is lost at most once, so the signal is a write-once cause and a [`Notify`]: far
//! smaller than a `tokio::sync::watch` channel (which carries eight notifiers and a lock,
//! about 350 bytes per held lock) and made on every acquisition.

use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use crate::LostCause;

/// One holder's view of a lease's loss; clones share it. The watchdog keeps one clone with
/// the lease and [`set`](LostSignal::set)s it; a pass gives the next holder a new one.
#[derive(Debug, Clone, Default)]
pub(crate) struct LostSignal(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    cause: OnceLock<LostCause>,
    notify: Notify,
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

    /// Why the lease was lost, if it was.
    pub(crate) fn cause(&self) -> Option<LostCause> {
        self.0.cause.get().copied()
    }

    /// Resolves when the lease is lost; pends forever while it is not (also after it ended
    /// without a loss).
    pub(crate) async fn lost(&self) -> LostCause {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a `set` between the two still wakes us.
            notified.as_mut().enable();
            if let Some(cause) = self.cause() {
                return cause;
            }
            notified.await;
        }
    }
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
    async fn an_unset_signal_pends() {
        let signal = LostSignal::new();
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), signal.lost());
        assert!(waited.await.is_err());
    }
}
