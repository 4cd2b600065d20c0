//! How an operator reads a [`LockState`]: the text `lockctl inspect` prints (its holders
//! with who they are, the fence, the waiters), with durations in seconds and times in UTC.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::identity::{Identity, Seconds};
use crate::ops::inspect::{Holder, LockState, Waiter};

impl fmt::Display for LockState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "key      {}", self.key)?;
        if let Some(permits) = self.permits {
            writeln!(f, "permits  {} of {permits} held", self.holders.len())?;
        }
        if self.holders.is_empty() {
            match self.handover {
                Some(left) => writeln!(
                    f,
                    "holder   none: hand-over to the first waiter in progress (at most {} more)",
                    Seconds(left)
                )?,
                None => writeln!(f, "holder   none (free)")?,
            }
        }
        for holder in &self.holders {
            writeln!(f, "{holder}")?;
            self.who(holder, f)?;
        }
        match self.fence {
            Some(fence) => writeln!(f, "fence    {fence}")?,
            None => writeln!(f, "fence    none")?,
        }
        write!(f, "waiting  {}", self.queued)?;
        for (place, waiter) in self.waiters.iter().enumerate() {
            write!(f, "\n  {}  {waiter}", place + 1)?;
        }
        if self.queued > self.waiters.len() {
            write!(f, "\n  ... and {} more", self.queued - self.waiters.len())?;
        }
        for (index, master) in self.masters.iter().enumerate() {
            write!(f, "\nmaster {}  ", index + 1)?;
            match master.as_ref().map(LockState::holder) {
                Some(Some(holder)) => write!(f, "{holder}")?,
                Some(None) => f.write_str("free")?,
                None => f.write_str("no answer")?,
            }
        }
        Ok(())
    }
}

impl LockState {
    /// The lines under `holder` that say who it is: its process, since when, its last
    /// renewal and progress, and what it waits for meanwhile; or that it is foreign.
    fn who(&self, holder: &Holder, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(process) = holder.identity().process().cloned() else {
            if holder.identity() == Identity::Foreign {
                writeln!(
                    f,
                    "         by a foreign client (not a token of this crate)"
                )?;
            }
            return Ok(());
        };
        write!(f, "         by {process}  since {}", Utc(process.since))?;
        write!(f, " ({} ago)", Seconds(process.age(self.server_time)))?;
        if let Some(renewed) = holder.since_renewal() {
            write!(f, "  renewed {} ago", Seconds(renewed))?;
        }
        if let Some(progress) = holder.last_progress {
            let ago = (self.server_time.duration_since(progress)).unwrap_or_default();
            write!(f, "  progress {} ago", Seconds(ago))?;
        }
        writeln!(f)?;
        if let Some(waits_for) = &holder.waits_for {
            writeln!(f, "         waits for {waits_for} meanwhile")?;
        }
        Ok(())
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = self.kind.role();
        match self.ttl {
            Some(ttl) => write!(f, "{role:<8} {}  ttl {}", self.token, Seconds(ttl))?,
            None => write!(f, "{role:<8} {}  no expiry", self.token)?,
        }
        Ok(())
    }
}

impl fmt::Display for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  waited {}  since {}",
            self.id,
            Seconds(self.waited),
            Utc(self.arrived)
        )?;
        match self.place_until {
            Some(_) if self.place_left.is_zero() => write!(f, "  place lapsed")?,
            Some(_) => write!(f, "  place {} left", Seconds(self.place_left))?,
            None => write!(f, "  no place deadline")?,
        }
        if let Identity::Process(process) = self.identity() {
            write!(f, "\n     by {process}")?;
        }
        if !self.holds.is_empty() {
            f.write_str("\n     holds ")?;
            for (index, key) in self.holds.iter().enumerate() {
                let comma = if index > 0 { ", " } else { "" };
                write!(f, "{comma}{key}")?;
            }
            f.write_str(" meanwhile")?;
        }
        Ok(())
    }
}

/// A time as RFC 3339 in UTC with milliseconds: `2026-11-24T18:30:01.123Z`.
pub(crate) struct Utc(pub(crate) SystemTime);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = self.0.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, day_secs) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            day_secs / 3600,
            day_secs / 60 % 60,
            day_secs % 60,
            since.subsec_millis()
        )
    }
}

/// The date of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`, for
/// days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}
