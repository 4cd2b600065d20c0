//! Every function shape the attribute supports, with the generated future `Send`.
#![deny(warnings)]

use std::fmt::Display;

use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
pub enum ShopError {
    Lock(LockError),
}

impl From<LockError> for ShopError {
    fn from(err: LockError) -> Self {
        ShopError::Lock(err)
    }
}

pub struct User {
    pub id: u64,
    pub tenant: Tenant,
}

pub struct Tenant {
    pub name: String,
}

pub struct Path<T>(pub T);

/// Free function, literal key, all options.
#[distributed_lock(
    key = "nightly-report",
    ttl = "1m",
    wait = "0s",
    watchdog = false,
    on_lost = "continue",
    fencing = true
)]
pub async fn report() -> Result<(), LockError> {
    Ok(())
}

/// Arguments, nested fields, early return and `?`.
#[distributed_lock(key = "sign-in:<user.tenant.name>:<user.id>", ttl = "5s", wait = "0s")]
pub async fn claim(user: &User, amount: u32) -> Result<u32, ShopError> {
    if amount == 0 {
        return Ok(0);
    }
    let parsed: u32 = "7".parse().map_err(|_| LockError::Busy {
        key: String::new(),
    })?;
    Ok(parsed + amount)
}

/// Destructured arguments, as axum extractors are written.
#[distributed_lock(key = "stock:<id>")]
pub async fn buy(Path(id): Path<u64>, (a, _b): (u8, u8)) -> Result<u64, ShopError> {
    Ok(id + u64::from(a))
}

/// An argument with a non-ASCII name (Rust allows it, so the key may name it).
#[distributed_lock(key = "size:<größe>")]
pub async fn sized(größe: u32) -> Result<u32, LockError> {
    Ok(größe)
}

/// Generic function with a where-clause and a tuple field.
#[distributed_lock(key = "pair:<pair.0>/<label>", ttl = "250ms")]
pub async fn generic<T, L>(pair: (T, T), label: L) -> Result<T, LockError>
where
    T: Display + Send + Sync,
    L: Display + Send,
{
    Ok(pair.1)
}

/// A `Result` alias.
pub type ShopResult<T> = Result<T, ShopError>;

#[distributed_lock(key = "alias:<n>", ttl = "2h")]
pub async fn alias(n: i64) -> ShopResult<i64> {
    Ok(n)
}

pub struct Shop {
    pub region: String,
    pub sold: u64,
}

impl Shop {
    /// `&self` method with a `<self.field>` placeholder.
    #[distributed_lock(key = "shop:<self.region>:<item>")]
    pub async fn stock(&self, item: u64) -> Result<u64, ShopError> {
        Ok(item + self.sold)
    }

    /// `&mut self` method.
    #[distributed_lock(key = "shop:<self.region>")]
    pub async fn sell(&mut self) -> Result<u64, ShopError> {
        self.sold += 1;
        Ok(self.sold)
    }

    /// `self` by value.
    #[distributed_lock(key = "shop:<self.region>:close")]
    pub async fn close(self) -> Result<String, LockError> {
        Ok(self.region)
    }
}

pub trait Job {
    fn run(&self, id: u32) -> impl std::future::Future<Output = Result<u32, LockError>> + Send;
}

pub struct Nightly;

impl Job for Nightly {
    /// A trait-impl method.
    #[distributed_lock(key = "job:<id>")]
    async fn run(&self, id: u32) -> Result<u32, LockError> {
        Ok(id)
    }
}

/// The longest lease the runtime takes (`lock_runtime::MAX_TTL`, 365 days) is accepted;
/// one hour more is `ui/fail/ttl_over_maximum.rs`.
#[distributed_lock(key = "yearly", ttl = "8760h")]
pub async fn yearly() -> Result<(), LockError> {
    Ok(())
}

/// Keyword-named argument.
#[distributed_lock(key = "kind:<type>")]
pub async fn raw_ident(r#type: &str) -> Result<(), LockError> {
    let _ = r#type;
    Ok(())
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let user = User {
        id: 1,
        tenant: Tenant { name: "eu".into() },
    };
    let mut shop = Shop {
        region: "eu".into(),
        sold: 0,
    };
    // Futures are only built, never polled: no Redis is needed to compile and run this.
    assert_send(&report());
    assert_send(&claim(&user, 1));
    assert_send(&buy(Path(1), (1, 2)));
    assert_send(&generic((1, 2), "x"));
    assert_send(&sized(1));
    assert_send(&alias(1));
    assert_send(&shop.stock(1));
    assert_send(&shop.sell());
    assert_send(&Nightly.run(1));
    assert_send(&raw_ident("a"));
    assert_send(&yearly());
    let shop2 = Shop {
        region: "us".into(),
        sold: 0,
    };
    assert_send(&shop2.close());
    assert_send(&hash_tagged(1));
    let state = AppState {
        locks: None,
        shared: None,
    };
    assert_send(&injected(&state, 1));
    assert_send(&state.method(1));
}

/// Braces that name no argument are a cluster hash tag, kept as written.
#[distributed_lock(key = "{app}:job:<id>")]
pub async fn hash_tagged(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// A service's own clients, as `client = ...` takes them.
pub struct AppState {
    pub locks: Option<lock_runtime::LockClient>,
    pub shared: Option<std::sync::Arc<lock_runtime::LockClient>>,
}

#[distributed_lock(key = "order:<id>", client = state.locks.as_ref())]
pub async fn injected(state: &AppState, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

impl AppState {
    #[distributed_lock(key = "order:<id>", client = self.shared.as_deref(), mode = "write")]
    pub async fn method(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}
