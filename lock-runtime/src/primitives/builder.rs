//! What every builder carries (a [`Lock`](crate::Lock), an [`RwLock`](crate::RwLock), a
//! [`Semaphore`](crate::Semaphore), a [`MultiLock`](crate::MultiLock), a
//! [`LockLayer`](crate::layer::LockLayer)): its options, which of them were given, and its
//! client. The setters are written here once; each builder's public setters are one-line
//! fronts with the docs of its primitive, and [`with_client`] resolves any builder's client
//! and defaults.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{LockClient, client};
use crate::context;
use crate::error::LockError;
use crate::lock_order::{OrderHold, OrderSpec};
use crate::options::{Explicit, LockOptions, OnLost};

/// A builder's options, which of `ttl` and `wait` were given (the client's defaults fill
/// in the rest), the client it names (none: the global one), and how the lock-order check
/// names its locks.
#[derive(Debug, Clone, Default)]
pub(crate) struct LockSpec {
    pub(crate) options: LockOptions,
    pub(crate) explicit: Explicit,
    pub(crate) client: Option<LockClient>,
    /// How the lock-order check names its locks.
    pub(crate) order: OrderSpec,
}

impl LockSpec {
    /// Sets the lease.
    pub(crate) fn ttl(&mut self, ttl: Duration) {
        self.options.ttl = ttl;
        self.explicit.ttl = true;
    }

    /// Sets how long to wait for a held lock.
    pub(crate) fn wait(&mut self, wait: Duration) {
        self.options.wait = wait;
        self.explicit.wait = true;
    }

    /// Turns renewal on or off.
    pub(crate) fn watchdog(&mut self, watchdog: bool) {
        self.options.watchdog = watchdog;
    }

    /// Sets what a guarded body does when the lease is lost.
    pub(crate) fn on_lost(&mut self, on_lost: OnLost) {
        self.options.on_lost = on_lost;
    }

    /// Issues a fencing token on every acquisition, or not.
    pub(crate) fn fencing(&mut self, fencing: bool) {
        self.options.fencing = fencing;
    }

    /// Bounds how long a hold may last ([`LockOptions::max_hold`]).
    pub(crate) fn max_hold(&mut self, max_hold: Duration) {
        self.options.max_hold = Some(max_hold);
        self.explicit.max_hold = true;
    }

    /// Replaces all options; a `ttl` or `wait` equal to the default's counts as not given.
    pub(crate) fn options(&mut self, options: LockOptions) {
        self.explicit = Explicit::of(&options);
        self.options = options;
    }

    /// Replaces all options, with which of `ttl` and `wait` count as given.
    pub(crate) fn explicit_options(&mut self, options: LockOptions, explicit: Explicit) {
        self.options = options;
        self.explicit = explicit;
    }

    /// Names the client the locks go through.
    pub(crate) fn client(&mut self, client: &LockClient) {
        self.client = Some(client.clone());
    }

    /// The lock-order check of this task's acquisition of `key` (as given; `redis_key`
    /// with the client's prefix), when `client` has the check on: the hold as the check
    /// knows it, or the inversion's error ([`crate::lock_order`]).
    pub(crate) fn check_order(
        &self,
        client: &LockClient,
        key: &str,
        redis_key: &str,
    ) -> Result<Option<Arc<OrderHold>>, LockError> {
        let Some(check) = client.lock_order() else {
            return Ok(None);
        };
        let held = context::held_orders(client.id());
        let class = self.order.class_of(key);
        check
            .check(&held, redis_key, class, self.order.site)
            .map(Some)
    }
}

/// A builder that carries a [`LockSpec`].
pub(crate) trait Builder: Clone {
    /// Its options and client.
    fn spec(&self) -> &LockSpec;

    /// Its options and client, to change.
    fn spec_mut(&mut self) -> &mut LockSpec;

    /// This builder with all options replaced, and which of `ttl` and `wait` count as
    /// given.
    fn with_explicit_options(mut self, options: LockOptions, explicit: Explicit) -> Self {
        self.spec_mut().explicit_options(options, explicit);
        self
    }
}

/// The client `builder`'s locks go through (its own, or the global one), and `builder`
/// with the client's default ttl, wait and max_hold in place of those not given; or the
/// error of a max_hold it cannot keep, naming `key`.
pub(crate) fn with_client<'b, B: Builder>(
    builder: &'b B,
    key: &str,
) -> Result<(LockClient, Cow<'b, B>), LockError> {
    let spec = builder.spec();
    let client = match &spec.client {
        Some(client) => client.clone(),
        None => client()?.clone(),
    };
    let resolved = match spec.explicit.resolve(&spec.options, client.lock_defaults()) {
        Some(options) => {
            let mut owned = builder.clone();
            owned.spec_mut().explicit_options(options, Explicit::ALL);
            Cow::Owned(owned)
        }
        None => Cow::Borrowed(builder),
    };
    let options = &resolved.spec().options;
    if options.max_hold.is_some() {
        crate::options::check_max_hold(options, key)?;
    }
    Ok((client, resolved))
}
