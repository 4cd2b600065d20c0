use lock_runtime::distributed_lock;

#[distributed_lock(key = "stock")]
struct Stock;

fn main() {}
