//! A lock per request without touching the handler: `LockLayer` (feature `tower`) on an
//! axum route, one gift claim per user at a time. The README shows the code between the
//! `README:` markers verbatim (a test keeps it so).
//!
//! Run it against a Redis on `REDIS_URL` (default `redis://127.0.0.1:6379`):
//!
//! ```text
//! cargo run -p lock-examples --features web --example gift_layer
//!
//! curl -i -X POST localhost:3000/gift -H 'x-user-id: 7'   # 200, or 429 while a claim for 7 runs
//! ```

use std::error::Error;

// README:start
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::routing::post;
use lock_runtime::layer::LockLayer;

/// The signed-in user, from a header your authentication layer sets.
fn user_id(req: &Request) -> Option<u64> {
    req.headers().get("x-user-id")?.to_str().ok()?.parse().ok()
}

async fn claim_gift() -> &'static str {
    "a coupon"
}

fn gifts() -> Router {
    // One claim per user at a time: a concurrent duplicate is answered 429 by the layer
    // and never reaches the handler. A request without a user passes unlocked (`None`).
    Router::new().route("/gift", post(claim_gift)).layer(
        LockLayer::new(|req: &Request| Some(format!("sign-in:{}", user_id(req)?)))
            .ttl(Duration::from_secs(5))
            .wait(Duration::ZERO),
    )
}
// README:end

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // The first lock connects to REDIS_URL (default redis://127.0.0.1:6379).
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 3000)).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, gifts()).await?;
    Ok(())
}
