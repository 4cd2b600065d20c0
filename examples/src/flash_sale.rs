//! The flash sale: many buyers race for a few items whose stock lives in Redis.
//!
//! Each purchase reads the stock, spends a moment on "payment", then writes the stock
//! back one lower: three separate steps, so two buyers who read the same stock both sell
//! the same item. [`buy`] runs the purchase under `#[distributed_lock]` and sells exactly
//! the stock; [`buy_without_lock`] runs the same code without it and oversells.

use std::fmt;
use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};

use crate::store::Store;

/// How long a purchase spends between reading the stock and writing it back.
pub const PAYMENT_TIME: Duration = Duration::from_millis(5);

/// The Redis key holding the stock of `item`.
pub fn stock_key(item: &str) -> String {
    format!("sale:{item}:stock")
}

/// The Redis key counting the units of `item` sold.
pub fn sold_key(item: &str) -> String {
    format!("sale:{item}:sold")
}

/// What one buyer got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purchase {
    /// Bought one unit; `left` units remained after it.
    Bought {
        /// The stock after this sale.
        left: i64,
    },
    /// Nothing left.
    SoldOut,
}

/// Why a purchase failed.
#[derive(Debug)]
pub enum SaleError {
    /// The lock refused the buyer (waited too long, Redis down, lease lost).
    Lock(LockError),
    /// Reading or writing the stock failed.
    Store(redis::RedisError),
}

impl From<LockError> for SaleError {
    fn from(err: LockError) -> Self {
        SaleError::Lock(err)
    }
}

impl From<redis::RedisError> for SaleError {
    fn from(err: redis::RedisError) -> Self {
        SaleError::Store(err)
    }
}

impl fmt::Display for SaleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SaleError::Lock(err) => write!(f, "lock: {err}"),
            SaleError::Store(err) => write!(f, "stock store: {err}"),
        }
    }
}

impl std::error::Error for SaleError {}

/// Buys one unit of `item`: at most one buyer per item runs this at a time, in every
/// process that shares the Redis.
#[distributed_lock(key = "stock:<item>", ttl = "5s", wait = "60s")]
pub async fn buy(store: &Store, item: &str) -> Result<Purchase, SaleError> {
    purchase(store, item).await
}

/// The same purchase with no lock: concurrent buyers read the same stock and oversell.
pub async fn buy_without_lock(store: &Store, item: &str) -> Result<Purchase, SaleError> {
    purchase(store, item).await
}

/// Read, pay, write back: correct only when no other buyer of `item` runs meanwhile.
async fn purchase(store: &Store, item: &str) -> Result<Purchase, SaleError> {
    let stock = store.get(&stock_key(item)).await?.unwrap_or(0);
    if stock <= 0 {
        return Ok(Purchase::SoldOut);
    }
    tokio::time::sleep(PAYMENT_TIME).await;
    store.set(&stock_key(item), stock - 1).await?;
    store.incr(&sold_key(item)).await?;
    Ok(Purchase::Bought { left: stock - 1 })
}

/// Puts `stock` units of `item` on sale and clears earlier sales.
pub async fn open_sale(store: &Store, item: &str, stock: i64) -> Result<(), redis::RedisError> {
    store.set(&stock_key(item), stock).await?;
    store.del(&[&sold_key(item)]).await
}

/// What the buyers of one process got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Buyers who bought a unit.
    pub bought: u64,
    /// Buyers who found nothing left.
    pub sold_out: u64,
    /// Buyers whose purchase failed.
    pub failed: u64,
}

/// Runs `buyers` concurrent buyers of `item`, each trying once, with or without the lock.
/// `on_purchase` is told of every unit bought (`buyer`, units left).
pub async fn run_buyers(
    store: &Store,
    item: &str,
    buyers: usize,
    locked: bool,
    on_purchase: impl Fn(usize, i64) + Send + Sync + 'static,
) -> Tally {
    let on_purchase = std::sync::Arc::new(on_purchase);
    let mut tasks = tokio::task::JoinSet::new();
    for buyer in 0..buyers {
        let store = store.clone();
        let item = item.to_owned();
        let on_purchase = on_purchase.clone();
        tasks.spawn(async move {
            let result = if locked {
                buy(&store, &item).await
            } else {
                buy_without_lock(&store, &item).await
            };
            if let Ok(Purchase::Bought { left }) = result {
                on_purchase(buyer, left);
            }
            result
        });
    }
    let mut tally = Tally::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(Purchase::Bought { .. })) => tally.bought += 1,
            Ok(Ok(Purchase::SoldOut)) => tally.sold_out += 1,
            Ok(Err(err)) => {
                eprintln!("a purchase failed: {err}");
                tally.failed += 1;
            }
            Err(_) => tally.failed += 1,
        }
    }
    tally
}

/// The end state of a sale, read from Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The stock the sale opened with.
    pub stock: i64,
    /// Units sold (one per successful buyer).
    pub sold: i64,
    /// The stock key at the end.
    pub remaining: i64,
}

impl Outcome {
    /// Reads the end state of the sale of `item` that opened with `stock` units.
    pub async fn read(store: &Store, item: &str, stock: i64) -> Result<Outcome, redis::RedisError> {
        Ok(Outcome {
            stock,
            sold: store.get(&sold_key(item)).await?.unwrap_or(0),
            remaining: store.get(&stock_key(item)).await?.unwrap_or(0),
        })
    }

    /// Units sold beyond the stock.
    pub fn oversold(&self) -> i64 {
        (self.sold - self.stock).max(0)
    }

    /// Exactly the stock sold, nothing left, never below zero.
    pub fn is_exact(&self) -> bool {
        self.sold == self.stock && self.remaining == 0
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stock {}, sold {}, remaining {}, oversold {}",
            self.stock,
            self.sold,
            self.remaining,
            self.oversold()
        )
    }
}
