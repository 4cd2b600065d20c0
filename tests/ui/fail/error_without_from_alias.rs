use lock_runtime::distributed_lock;

#[derive(Debug)]
struct ShopError;

type ShopResult<T> = Result<T, ShopError>;

// Through an alias the error type is not written out: the error is at the return type.
#[distributed_lock(key = "stock:<id>")]
async fn buy(id: u64) -> ShopResult<u64> {
    Ok(id)
}

// A type parameter without the bound.
#[distributed_lock(key = "stock:<id>")]
async fn sell<E>(id: u64) -> Result<u64, E> {
    Ok(id)
}

fn main() {}
