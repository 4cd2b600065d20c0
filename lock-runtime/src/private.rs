//! What `#[distributed_lock]` expands to. Not a public API: names here may change in any
//! release. Everything forwards to the public programmatic API, so there is one code path.
//!
//! The attribute crate is pinned to this crate's exact version (`=` in the dependency), so
//! an expansion never meets a `__private` of another release.

use std::borrow::Cow;
use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::call_site::CallSite;
use crate::client::LockClient;
use crate::error::LockError;
pub use crate::key::KeyBuilder;
use crate::lock_order::OrderSpec;
use crate::options::MAX_TTL;
pub use crate::options::OnLost;
use crate::primitives::builder::{LockBuilder, LockSpec};
use crate::primitives::kind::Attribute;
use crate::primitives::lock::Lock;
use crate::primitives::multi::MultiLock;
use crate::primitives::rwlock::RwLock;
use crate::primitives::semaphore::Semaphore;

/// [`MAX_TTL`] in milliseconds: the expansion asserts a written `ttl` against it in a
/// constant, so the attribute's compile-time check and the runtime's share one limit.
pub const MAX_TTL_MS: u64 = {
    let ms = MAX_TTL.as_millis();
    assert!(ms <= u64::MAX as u128);
    ms as u64
};

/// The options of one annotated function: the runtime's defaults
/// ([`LockOptions::default`](crate::LockOptions::default), or the client's `Config::default_ttl` and `default_wait`
/// for a `ttl` or `wait` the attribute leaves out), with the options the attribute names
/// set on them by [`LockBuilder`]'s setters, each from a value it checked at compile time
/// or from an expression; and the client named by `client = ...`.
pub type Options = LockBuilder<Attribute>;

impl Options {
    /// The defaults of [`LockOptions`](crate::LockOptions), on the global client.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        LockBuilder {
            kind: Attribute::default(),
            spec: LockSpec::default(),
        }
    }

    /// The function's key templates as written and where it is (its path, `file!()`,
    /// `line!()`): the classes and the call site the lock-order check reports.
    pub fn order(
        mut self,
        templates: &'static [&'static str],
        function: &'static str,
        file: &'static str,
        line: u32,
    ) -> Self {
        self.kind.templates = templates;
        self.spec.order.site = CallSite::function(function, file, line);
        self
    }

    /// `ttl = "..."`.
    pub fn ttl_ms(self, ms: u64) -> Self {
        self.ttl(Duration::from_millis(ms))
    }

    /// `wait = "..."`.
    pub fn wait_ms(self, ms: u64) -> Self {
        self.wait(Duration::from_millis(ms))
    }

    /// `max_hold = "..."`, checked at compile time.
    pub fn max_hold_ms(self, ms: u64) -> Self {
        self.max_hold(Duration::from_millis(ms))
    }

    /// `client = EXPR`, read by [`client_of`]: `None` fails the call.
    pub fn client_named(mut self, client: Option<LockClient>) -> Self {
        self.kind.client_unset = client.is_none();
        self.spec.client = client;
        self
    }

    /// The client named by `client = ...` (`None`: the global one), or the error of a
    /// `client = ...` that gave none.
    fn named_client(&self, key: &str) -> Result<Option<&LockClient>, LockError> {
        if self.kind.client_unset {
            return Err(LockError::config(format!(
                "lock `{key}`: its `client = ...` gave `None`: the client is not set; \
                 set it before the first call"
            )));
        }
        Ok(self.spec.client.as_ref())
    }
}

/// `builder`, one of the programmatic API's builders, with `options` applied; a
/// `client = ...` that gave none is the error (the calling function returns it as its `E`).
fn build<K>(
    builder: LockBuilder<K>,
    options: Options,
    key: &str,
) -> Result<LockBuilder<K>, LockError> {
    let client = options.named_client(key)?.cloned();
    let LockSpec {
        options: lock_options,
        explicit,
        order,
        ..
    } = options.spec;
    let mut builder = builder.with_explicit_options(lock_options, explicit);
    if client.is_some() {
        builder.spec.client = client;
    }
    builder.spec.order = OrderSpec {
        class: (options.kind.templates.first()).map(|template| Cow::Borrowed(*template)),
        site: order.site,
    };
    Ok(builder)
}

mod sealed {
    pub trait Sealed {}

    /// Implemented by no type: the bound of a [`super::FromLockError`] impl that never applies.
    pub trait Never {}
}

/// What `client = EXPR` may name: a [`LockClient`], an `Arc` of one, a reference to
/// either, or an `Option` of these (`None`: the call fails with [`LockError::Config`]).
#[diagnostic::on_unimplemented(
    message = "`client = ...` takes a `LockClient`, not `{Self}`",
    label = "not a `LockClient`",
    note = "give a `LockClient`, a reference to one, an `Arc<LockClient>`, or an \
            `Option<&LockClient>` (`None` fails the call with `LockError::Config`)"
)]
pub trait ClientArg: sealed::Sealed {
    /// The client, cloned (a `LockClient` is an `Arc`).
    fn lock_client(&self) -> Option<LockClient>;
}

impl sealed::Sealed for LockClient {}
impl ClientArg for LockClient {
    fn lock_client(&self) -> Option<LockClient> {
        Some(self.clone())
    }
}

impl sealed::Sealed for Arc<LockClient> {}
impl ClientArg for Arc<LockClient> {
    fn lock_client(&self) -> Option<LockClient> {
        Some(LockClient::clone(self))
    }
}

impl<T: ClientArg + ?Sized> sealed::Sealed for &T {}
#[diagnostic::do_not_recommend]
impl<T: ClientArg + ?Sized> ClientArg for &T {
    fn lock_client(&self) -> Option<LockClient> {
        T::lock_client(self)
    }
}

impl<T: ClientArg> sealed::Sealed for Option<T> {}
#[diagnostic::do_not_recommend]
impl<T: ClientArg> ClientArg for Option<T> {
    fn lock_client(&self) -> Option<LockClient> {
        self.as_ref().and_then(T::lock_client)
    }
}

/// `client = EXPR`: the expansion passes `&(EXPR)`, so naming a field does not move it.
pub fn client_of<C: ClientArg + ?Sized>(client: &C) -> Option<LockClient> {
    client.lock_client()
}

/// A placeholder's value: what [`KeyBuilder::value`] renders. The expansion passes each
/// placeholder through [`KeyPart::key_part`], spanned at the key template, so a value that
/// does not print is reported there with the fix, not as rustc's cast to `&dyn Display`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `Display`: a key placeholder needs a value that prints",
    label = "a placeholder in this key names a `{Self}`",
    note = "name a field that prints, e.g. `<item.id>` rather than `<item>`, or implement \
            `Display` for `{Self}`"
)]
pub trait KeyPart {
    /// The value as [`KeyBuilder::value`] takes it.
    fn key_part(&self) -> &dyn Display;
}

#[diagnostic::do_not_recommend]
impl<T: Display> KeyPart for T {
    #[inline(always)]
    fn key_part(&self) -> &dyn Display {
        self
    }
}

/// The error type of an annotated function: a lock failure must convert into it.
///
/// The expansion checks it once, spanned at the function's error type, as
/// `<E as FromLockError<_>>::FAILURE`, and hands the value to `run` (which needs nothing else
/// of `E`). The two impls, told apart by their marker, make rustc weigh `E: From<LockError>`
/// before it picks one: where `E` has no such impl neither applies, this check is the one
/// error, and the type `run` receives stays unknown, so `run`'s bounds are not reported
/// again (at the call and at its `.await`), pointing into this file. With a single impl,
/// rustc would pick it by its header and report its bound at every use.
#[diagnostic::on_unimplemented(
    message = "#[distributed_lock] returns lock failures as `Err(..)`, but `{Self}` has no \
               `From<LockError>`",
    label = "`{Self}` cannot hold a `LockError`",
    note = "add `impl From<lock_runtime::LockError> for {Self}` (a variant that wraps it), \
            or return `Result<T, lock_runtime::LockError>`"
)]
pub trait FromLockError<M> {
    /// [`Failure<Self>`].
    type Failure;
    /// The value the expansion passes to `run`.
    const FAILURE: Self::Failure;
}

/// The marker of [`FromLockError`]'s impl for error types with `From<LockError>`.
#[derive(Debug)]
pub enum Converts {}

/// The marker of [`FromLockError`]'s impl that never applies (its bound has no impls).
#[derive(Debug)]
pub enum Unconvertible {}

#[diagnostic::do_not_recommend]
impl<E: From<LockError>> FromLockError<Converts> for E {
    type Failure = Failure<E>;
    const FAILURE: Failure<E> = Failure(PhantomData);
}

#[diagnostic::do_not_recommend]
impl<E: sealed::Never> FromLockError<Unconvertible> for E {
    type Failure = ();
    const FAILURE: () = ();
}

/// Proof that `E`, an annotated function's error type, holds a lock failure: the
/// [`FailureType`] whose `Error` the `run` functions return. Zero-sized.
#[derive(Debug)]
pub struct Failure<E>(PhantomData<fn() -> E>);

impl<E> Failure<E> {
    /// A proof whose `E` rustc infers from the body, checked by `run`'s bound: for an error
    /// type the expansion cannot name (`impl Trait`).
    pub const fn inferred() -> Self {
        Failure(PhantomData)
    }
}

/// The error type a `run` function returns, named by its [`Failure`] proof.
pub trait FailureType {
    /// The annotated function's error type.
    type Error: From<LockError>;
}

impl<E: From<LockError>> FailureType for Failure<E> {
    type Error = E;
}

/// Names the error type of an annotated function's return type (`Result<T, E>` or an
/// alias of one), for the [`FromLockError`] check.
#[diagnostic::on_unimplemented(
    message = "#[distributed_lock] needs a function that returns `Result<T, E>`, not `{Self}`",
    label = "not a `Result`",
    note = "return `Result<T, E>` with `E: From<LockError>`, e.g. `Result<T, LockError>`"
)]
pub trait Outcome {
    /// `E` of `Result<T, E>`.
    type Error;
}

impl<T, E> Outcome for Result<T, E> {
    type Error = E;
}

/// Returns `body` unchanged, with its output type fixed to `R` (the function's return type),
/// so that rustc checks the body's `return`s and tail against it and reports a mismatch
/// at the user's expression rather than at the attribute.
pub fn body<R, F: Future<Output = R>>(body: F) -> F {
    body
}

/// Runs `body` under the lock `key`.
pub async fn run<C, F, T>(
    key: Result<String, LockError>,
    _failure: C,
    options: Options,
    body: F,
) -> Result<T, C::Error>
where
    C: FailureType,
    F: Future<Output = Result<T, C::Error>>,
{
    let key = key?;
    let lock = build(Lock::new(key.as_str()), options, &key)?;
    lock.run(body).await
}

/// Runs `body` holding one of the `permits` of the semaphore `key` (`permits = N`).
pub async fn run_semaphore<C, F, T>(
    key: Result<String, LockError>,
    _failure: C,
    permits: u32,
    options: Options,
    body: F,
) -> Result<T, C::Error>
where
    C: FailureType,
    F: Future<Output = Result<T, C::Error>>,
{
    let key = key?;
    let semaphore = build(Semaphore::new(key.as_str(), permits), options, &key)?;
    semaphore.run(body).await
}

/// Runs `body` under the locks on all of `keys` (`key = [..]`): the first key that failed
/// to render is the error, before any Redis traffic.
pub async fn run_multi<K, C, F, T>(
    keys: K,
    _failure: C,
    options: Options,
    body: F,
) -> Result<T, C::Error>
where
    K: IntoIterator<Item = Result<String, LockError>>,
    C: FailureType,
    F: Future<Output = Result<T, C::Error>>,
{
    // Each key with its template, the class the lock-order check knows it by.
    let templates = options
        .kind
        .templates
        .iter()
        .copied()
        .chain(std::iter::repeat(""));
    let keys: Vec<(String, &'static str)> = (keys.into_iter().zip(templates))
        .map(|(key, template)| key.map(|key| (key, template)))
        .collect::<Result<_, _>>()?;
    let mut names = String::new();
    for (at, (key, _)) in keys.iter().enumerate() {
        if at > 0 {
            names.push_str(", ");
        }
        names.push_str(key);
    }
    let locks = build(MultiLock::classed(keys), options, &names)?;
    locks.run(body).await
}

/// Runs `body` holding a reader's share of the read-write lock `key` (`mode = "read"`).
pub async fn run_read<C, F, T>(
    key: Result<String, LockError>,
    _failure: C,
    options: Options,
    body: F,
) -> Result<T, C::Error>
where
    C: FailureType,
    F: Future<Output = Result<T, C::Error>>,
{
    let key = key?;
    let rwlock = build(RwLock::new(key.as_str()), options, &key)?;
    rwlock.run_read(body).await
}

/// Runs `body` holding the read-write lock `key` for writing (`mode = "write"`).
pub async fn run_write<C, F, T>(
    key: Result<String, LockError>,
    _failure: C,
    options: Options,
    body: F,
) -> Result<T, C::Error>
where
    C: FailureType,
    F: Future<Output = Result<T, C::Error>>,
{
    let key = key?;
    let rwlock = build(RwLock::new(key.as_str()), options, &key)?;
    rwlock.run_write(body).await
}
