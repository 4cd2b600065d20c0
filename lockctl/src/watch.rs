//! `lockctl watch KEY`: the key's holders, their ttls and its waiters, read again every
//! `--interval`, for at most `--count` rounds or until Ctrl-C.

use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use serde_json::Value;

use crate::output::{Exit, Output};

/// The shortest and longest `--interval`.
const INTERVALS: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(3600));

/// Prints `key`'s state `count` times, `interval` apart (stopping early at Ctrl-C): each
/// round a header line and the state, or with `--json` one object with its `round`.
/// Ends as the last round found the key: unknown, or done.
pub(crate) async fn watch(
    client: &LockClient,
    key: &str,
    (interval, count): (Duration, u64),
    out: Output,
) -> Result<Exit, LockError> {
    let mut exit = Exit::Done;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    for round in 1..=count {
        let state = client.inspect(key).await?;
        if !out.json {
            println!("--- {key}  round {round} of {count}");
        }
        exit = if state.is_empty() {
            out.unknown(key)
        } else {
            out.say(&state, || with_round(crate::json::state(&state), round));
            Exit::Done
        };
        if round == count {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stop => break,
        }
    }
    Ok(exit)
}

/// `object` with its round's number.
fn with_round(mut object: Value, round: u64) -> Value {
    if let Value::Object(fields) = &mut object {
        fields.insert("round".to_owned(), Value::from(round));
    }
    object
}

/// `--interval`: a whole number of `ms`, `s` or `m`, from 10ms to 1h.
pub(crate) fn parse_interval(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 500ms, 1s or 2m"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}`: a whole number and a unit (ms, s, m)"))?;
    let interval = match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.saturating_mul(60)),
        _ => return Err(format!("`{text}`: the unit is ms, s or m")),
    };
    let (shortest, longest) = INTERVALS;
    if interval < shortest || interval > longest {
        return Err(format!("`{text}`: from 10ms to 60m"));
    }
    Ok(interval)
}
