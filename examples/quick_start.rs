//! The README's first example, verbatim between the `README:` markers (a test keeps it so):
//! a stock purchase under a per-item lock and a gift claim under a per-user dedup lock.
//!
//! Run it against a Redis on `REDIS_URL` (default `redis://127.0.0.1:6379`):
//!
//! ```text
//! cargo run -p lock-examples --example quick_start
//! ```

// README:start
use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
enum ShopError {
    Lock(LockError),
    SoldOut,
}

impl From<LockError> for ShopError {
    fn from(err: LockError) -> Self {
        ShopError::Lock(err)
    }
}

struct User {
    id: u64,
}

// At most one process at a time per item, across every service sharing the Redis.
#[distributed_lock(key = "stock:<id>", ttl = "10s")]
async fn buy(id: u64, qty: u32) -> Result<u32, ShopError> {
    let stock = read_stock(id).await; // read, check, write: safe under the lock
    if stock < qty {
        return Err(ShopError::SoldOut);
    }
    write_stock(id, stock - qty).await;
    Ok(stock - qty)
}

// A per-user dedup: a concurrent second claim fails at once with LockError::Busy.
#[distributed_lock(key = "sign-in:<user.id>", ttl = "5s", wait = "0s")]
async fn claim_daily_gift(user: &User) -> Result<String, ShopError> {
    Ok(format!("a coupon for user {}", user.id))
}

#[tokio::main]
async fn main() {
    // The first lock connects to REDIS_URL (default redis://127.0.0.1:6379).
    match buy(42, 1).await {
        Ok(left) => println!("bought one; {left} left"),
        Err(ShopError::SoldOut) => println!("sold out"),
        Err(ShopError::Lock(err)) => println!("not now: {err}"),
    }
    match claim_daily_gift(&User { id: 7 }).await {
        Ok(gift) => println!("granted {gift}"),
        Err(err) => println!("no gift: {err:?}"),
    }
}

// Stand-ins for your own storage (a database, another service).
async fn read_stock(_id: u64) -> u32 {
    10
}

async fn write_stock(_id: u64, _stock: u32) {}
// README:end
