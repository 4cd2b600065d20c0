use lock_runtime::distributed_lock;

#[distributed_lock(key = "stock:<idd>", ttl = "0s", colour = "red")]
fn buy(id: u64) -> u64 {
    id
}

fn main() {}
