//! The daily gift: 5 users click "claim my gift" 20 times each, all at once; each user gets
//! exactly one gift.
//!
//! Run it (it starts a Redis if none runs):
//!
//! ```text
//! cargo run -p lock-examples --example dedup
//! cargo run -p lock-examples --example dedup -- --no-lock     # pays out several gifts
//! ```
//!
//! Options: `--users N` (5), `--claims N` per user (20), `--no-lock`. Redis: `REDIS_URL`,
//! else a server on 127.0.0.1:6379, else a throwaway one.
//!
//! A claim checks whether the user's gift key for today exists, spends 50 ms issuing the
//! gift, then writes the key and credits 100 coins (see `examples/src/dedup.rs`). It runs
//! under `#[distributed_lock(key = "sign-in:<user.id>", ttl = "5s", wait = "0s")]`: a claim
//! that arrives while another claim of the same user runs is refused at once (`Busy`, what
//! a web service answers with 429), and a claim after it finds the gift already claimed.
//! The claims of each user start spread over 200 ms, so both kinds show up.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use lock_examples::cli::Words;
use lock_examples::dedup::{self, GIFT_COINS, User};
use lock_examples::servers::{Mode, Servers};
use lock_examples::store::Store;

/// The claims of one user start evenly spread over this long.
const SPREAD: Duration = Duration::from_millis(200);

const NAMES: [&str; 10] = [
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
];

struct Args {
    users: usize,
    claims: usize,
    locked: bool,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            users: 5,
            claims: 20,
            locked: true,
        };
        let mut words = Words::from_env();
        while let Some(word) = words.next_flag() {
            match word.as_str() {
                "--users" => args.users = words.value("--users")?,
                "--claims" => args.claims = words.value("--claims")?,
                "--no-lock" => args.locked = false,
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; use --users N, --claims N, --no-lock"
                    ));
                }
            }
        }
        if !(1..=NAMES.len()).contains(&args.users) || !(1..=1000).contains(&args.claims) {
            return Err(format!(
                "use 1..={} users and 1..=1000 claims per user",
                NAMES.len()
            ));
        }
        Ok(args)
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    let args = Args::parse()?;
    let servers = Servers::for_mode(Mode::Single)?;
    lock_runtime::init(servers.config())?;
    let store = Store::connect(&servers).await?;
    let users: Vec<User> = NAMES[..args.users]
        .iter()
        .map(|name| User::new(*name))
        .collect();
    for user in &users {
        dedup::reset_user(&store, user).await?;
    }
    println!(
        "daily gift: {} users x {} concurrent claims, lock {} (redis {}{})",
        args.users,
        args.claims,
        if args.locked { "on" } else { "OFF" },
        servers.urls.join(", "),
        if servers.started_here() {
            ", started for this run"
        } else {
            ""
        },
    );

    let started = Instant::now();
    let tallies = dedup::run_claims(&store, &users, args.claims, args.locked, SPREAD).await;
    println!("all claims answered after {:.0?}", started.elapsed());

    let mut exact = true;
    for (user, tally) in users.iter().zip(&tallies) {
        let coins = dedup::wallet(&store, user).await?;
        println!(
            "  {:<6} gifts {:>2}   busy {:>2}   already claimed {:>2}   failed {}   wallet {:>4} coins{}",
            user.id,
            tally.gifts,
            tally.busy,
            tally.already_claimed,
            tally.failed,
            coins,
            match &tally.first_error {
                Some(err) => format!("   ({err})"),
                None => String::new(),
            }
        );
        exact &= tally.gifts == 1 && tally.failed == 0 && coins == GIFT_COINS;
    }
    if exact {
        println!(
            "every user got exactly one gift: concurrent claims were busy, later ones found it claimed"
        );
        Ok(ExitCode::SUCCESS)
    } else if !args.locked {
        println!(
            "without the lock some users got several gifts: their claims all found no gift yet"
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("the invariant broke: every user must get exactly one gift");
        Ok(ExitCode::FAILURE)
    }
}
