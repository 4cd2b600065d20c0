//! Several keys in one attribute: an array of templates, each rendered from the arguments
//! like a single key, locked all or none (`lock_runtime::MultiLock`); the future is `Send`.
#![deny(warnings)]

use lock_runtime::{LockError, current_lock, current_locks, distributed_lock};

#[derive(Debug)]
pub enum BankError {
    Lock(LockError),
    Insufficient,
}

impl From<LockError> for BankError {
    fn from(err: LockError) -> Self {
        BankError::Lock(err)
    }
}

pub struct Account {
    pub id: u64,
}

/// Two keys from two arguments, with every other option.
#[distributed_lock(
    key = ["account:<from>", "account:<to>"],
    ttl = "10s",
    wait = "2s",
    watchdog = true,
    on_lost = "continue",
    fencing = true
)]
pub async fn transfer(from: u64, to: u64, amount: u64) -> Result<u64, BankError> {
    if amount == 0 {
        return Err(BankError::Insufficient);
    }
    let lock = current_lock().ok_or(BankError::Insufficient)?;
    let _ = (lock.key(), lock.fence(), current_locks().len());
    Ok(amount)
}

/// Fields, `self`, a trailing comma, and a one-element array.
pub struct Bank {
    pub region: String,
}

impl Bank {
    #[distributed_lock(key = ["bank:<self.region>", "account:<from.id>", "account:<to.id>",])]
    pub async fn move_between(&self, from: &Account, to: &Account) -> Result<u64, LockError> {
        Ok(from.id + to.id)
    }
}

#[distributed_lock(key = ["ledger"])]
pub async fn close_books() -> Result<(), LockError> {
    Ok(())
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let bank = Bank {
        region: "eu".into(),
    };
    let (a, b) = (Account { id: 1 }, Account { id: 2 });
    // Built, never polled: no Redis is needed.
    assert_send(&transfer(1, 2, 5));
    assert_send(&bank.move_between(&a, &b));
    assert_send(&close_books());
}
