//! The one builder of every primitive: what it locks (a [`kind`](crate::kind)), its
//! options, which of them were given, and its client. The setters are written here once,
//! for every kind that takes them; [`with_client`] resolves a builder's client and defaults,
//! and [`LockBuilder::run_under`] runs a guarded body as the options say.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::call_site::CallSite;
use crate::client::{LockClient, client};
use crate::context;
use crate::error::LockError;
use crate::lock_order::{OrderHold, OrderSpec};
use crate::options::{Explicit, LockOptions, OnLost};
use crate::primitives::kind::{OneKey, TakesFence, TakesMinimumHold};
use crate::primitives::run_path::{Held, run_held};

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

/// A lock of one kind, built: the key or keys it locks (`K`, see [`kind`](crate::kind)),
/// its options, which of them were given, and its client. [`Lock`](crate::Lock),
/// [`RwLock`](crate::RwLock), [`Semaphore`](crate::Semaphore),
/// [`MultiLock`](crate::MultiLock) and [`LockLayer`](crate::layer::LockLayer) are this
/// builder over their kinds: the setters below are theirs, and each adds how it is made
/// and taken.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{Lock, OnLost};
///
/// let lock = Lock::new("report:daily")
///     .ttl(Duration::from_secs(60))
///     .wait(Duration::ZERO)
///     .on_lost(OnLost::Continue);
/// assert_eq!(lock.options().wait, Duration::ZERO);
/// ```
#[derive(Debug, Clone)]
pub struct LockBuilder<K> {
    /// What it locks.
    pub(crate) kind: K,
    /// The options, which of them were given, the client and the lock-order names.
    pub(crate) spec: LockSpec,
}

impl<K> LockBuilder<K> {
    /// A builder of `kind` with default options, on the global client; the line that calls
    /// it (through the `#[track_caller]` constructors) is its call site for the lock-order
    /// check.
    #[track_caller]
    pub(crate) fn of(kind: K) -> Self {
        let mut spec = LockSpec::default();
        spec.order.site = CallSite::caller();
        LockBuilder { kind, spec }
    }

    /// Sets the lease of each hold: a lock's, a reader's or writer's, each permit's, each
    /// key's (default 30 s, or the client's [`Config::default_ttl`]; at most
    /// [`MAX_TTL`](crate::MAX_TTL)).
    ///
    /// [`Config::default_ttl`]: crate::Config::default_ttl
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.spec.options.ttl = ttl;
        self.spec.explicit.ttl = true;
        self
    }

    /// Sets how long to wait for a held lock (default 10 s, or the client's
    /// [`Config::default_wait`]; zero tries once). A writer's wait covers its turn in the
    /// queue and the readers' leaving; a multi-key lock's covers all its keys; a layer's
    /// zero answers a concurrent request with 429 at once.
    ///
    /// [`Config::default_wait`]: crate::Config::default_wait
    pub fn wait(mut self, wait: Duration) -> Self {
        self.spec.options.wait = wait;
        self.spec.explicit.wait = true;
        self
    }

    /// Turns renewal on or off (default on).
    pub fn watchdog(mut self, watchdog: bool) -> Self {
        self.spec.options.watchdog = watchdog;
        self
    }

    /// Bounds how long a hold may last (default: unbounded, or the client's
    /// [`Config::default_max_hold`](crate::Config::default_max_hold)). A hold that reaches
    /// it is ended as lost with [`LostCause::MaxHold`](crate::LostCause::MaxHold): the
    /// watchdog stops renewing it, `run` stops the body and releases the lock at once, and
    /// a guard reads [`is_lost`](crate::LockGuard::is_lost). See [`LockOptions::max_hold`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// let lock = lock_runtime::Lock::new("report:daily").max_hold(Duration::from_secs(300));
    /// lock.run(async {
    ///     // ... a step that could hang on a dead peer is stopped after 5 minutes ...
    ///     Ok::<(), lock_runtime::LockError>(())
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.spec.options.max_hold = Some(max_hold);
        self.spec.explicit.max_hold = true;
        self
    }

    /// Sets what `run` (`run_read`, `run_write`, a layer's request) does when the lease,
    /// or any key's lease, is lost (default [`OnLost::Cancel`]).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.spec.options.on_lost = on_lost;
        self
    }

    /// Replaces all options at once. A `ttl` or `wait` equal to [`LockOptions::default`]'s
    /// counts as not given: the client's [`Config::default_ttl`] and
    /// [`Config::default_wait`] apply to it.
    ///
    /// [`Config::default_ttl`]: crate::Config::default_ttl
    /// [`Config::default_wait`]: crate::Config::default_wait
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.spec.explicit = Explicit::of(&options);
        self.spec.options = options;
        self
    }

    /// Takes the locks through `client` instead of the global one.
    pub fn client(mut self, client: &LockClient) -> Self {
        self.spec.client = Some(client.clone());
        self
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.spec.options
    }

    /// This builder with all options replaced, and which of `ttl` and `wait` count as
    /// given.
    pub(crate) fn with_explicit_options(
        mut self,
        options: LockOptions,
        explicit: Explicit,
    ) -> Self {
        self.spec.options = options;
        self.spec.explicit = explicit;
        self
    }

    /// Runs `body` in `span` under what `acquire()` takes, as the options say a loss is
    /// met ([`run_held`]).
    pub(crate) fn run_under<H, A, F, T, E>(
        &self,
        acquire: impl FnOnce() -> A,
        body: F,
        span: tracing::Span,
    ) -> impl Future<Output = Result<T, E>>
    where
        H: Held,
        A: Future<Output = Result<H, LockError>>,
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        run_held(acquire, self.spec.options.on_lost, body, span)
    }
}

impl<K: OneKey> LockBuilder<K> {
    /// The key as given (without the client's prefix).
    pub fn key(&self) -> &str {
        self.kind.key()
    }
}

impl<K: TakesFence> LockBuilder<K> {
    /// Issues a fencing token on every acquisition (default off): a lock's guard, a
    /// writer's guard (readers get none), each key's guard of a multi-key lock has its
    /// [`fence`](crate::LockGuard::fence).
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.spec.options.fencing = fencing;
        self
    }
}

impl<K: TakesMinimumHold> LockBuilder<K> {
    /// Keeps the key at least `hold` after acquiring it (default zero: released at once).
    ///
    /// A release (or drop) that comes sooner does not delete the key: it stops renewing it
    /// and sets its expiry (owner-checked) to what is left of `hold`, so other owners find
    /// it held until then; nor is the lock passed to another task of this process. This is
    /// ShedLock's `lockAtLeastFor` for a job scheduled on every replica: with `wait` zero the
    /// first replica runs the tick and a replica whose schedule fires a little late is told
    /// [`LockError::Busy`] too. `ttl` is the "at most": `hold` may not exceed it
    /// ([`LockError::Config`] at acquisition).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_runtime::{Lock, LockError};
    ///
    /// # async fn tick() -> Result<(), LockError> {
    /// match Lock::new("job:daily-report")
    ///     .ttl(Duration::from_secs(60))
    ///     .wait(Duration::ZERO)
    ///     .hold_at_least(Duration::from_secs(30))
    ///     .acquire()
    ///     .await
    /// {
    ///     Ok(guard) => {
    ///         // ... the job: this replica runs this tick ...
    ///         guard.release().await?; // the key stays until 30 s after it was taken
    ///     }
    ///     Err(LockError::Busy { .. }) => { /* another replica ran this tick */ }
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.spec.options.hold_at_least = hold;
        self
    }
}

/// The client `builder`'s locks go through (its own, or the global one), and `builder`
/// with the client's default ttl, wait and max_hold in place of those not given; or the
/// error of a max_hold it cannot keep, naming `key`.
pub(crate) fn with_client<'b, K: Clone>(
    builder: &'b LockBuilder<K>,
    key: &str,
) -> Result<(LockClient, Cow<'b, LockBuilder<K>>), LockError> {
    let spec = &builder.spec;
    let client = match &spec.client {
        Some(client) => client.clone(),
        None => client()?.clone(),
    };
    let resolved = match spec.explicit.resolve(&spec.options, client.lock_defaults()) {
        Some(options) => Cow::Owned(
            builder
                .clone()
                .with_explicit_options(options, Explicit::ALL),
        ),
        None => Cow::Borrowed(builder),
    };
    let options = &resolved.spec.options;
    if options.max_hold.is_some() {
        crate::options::check_max_hold(options, key)?;
    }
    Ok((client, resolved))
}
