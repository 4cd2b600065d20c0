// A builder has no setter for an option its primitive does not take: a semaphore's
// permits have no fencing token, and only a `Lock` keeps its key after release.
use std::time::Duration;

use lock_runtime::{MultiLock, RwLock, Semaphore};

fn main() {
    let _ = Semaphore::new("pool", 3).fencing(true);
    let _ = RwLock::new("doc").hold_at_least(Duration::from_secs(1));
    let _ = MultiLock::new(["a", "b"]).hold_at_least(Duration::from_secs(1));
}
