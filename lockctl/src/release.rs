//! `lockctl release KEY`: takes a lock away, as `LockClient::force_release_checked` does:
//! only one of our locks unless `--force`, only from the holder `--if-holder` names, and
//! with `--dry-run` only says what it would take.

use lock_runtime::{
    CheckedRelease, ForcedRelease, Holder, HolderKind, LockClient, LockError, LockState,
    ReleaseCheck,
};

use crate::output::{Exit, Output};

/// What `release` was asked to check and do.
#[derive(Debug)]
pub(crate) struct Release<'a> {
    pub(crate) key: &'a str,
    pub(crate) if_holder: Option<&'a str>,
    pub(crate) dry_run: bool,
    pub(crate) force: bool,
}

impl Release<'_> {
    /// Releases (or with `--dry-run` looks), prints the outcome and says how it ended.
    pub(crate) async fn run(&self, client: &LockClient, out: Output) -> Result<Exit, LockError> {
        if self.dry_run {
            return self.look(client, out).await;
        }
        let mut check = ReleaseCheck::new().foreign(self.force);
        if let Some(token) = self.if_holder {
            check = check.if_holder(token);
        }
        let outcome = client.force_release_checked(self.key, &check).await?;
        // Nothing was there to take: say whether anything of a lock is there.
        let nothing = outcome.released().is_some_and(nothing_done);
        if nothing && client.inspect(self.key).await?.is_empty() {
            return Ok(out.unknown(self.key));
        }
        out.say(&outcome, || crate::json::checked(&outcome, false));
        Ok(match outcome.released() {
            Some(_) => Exit::Done,
            None => Exit::NotHolder,
        })
    }

    /// `--dry-run`: reads the key and says what a release with the same checks would
    /// remove and whom it would wake; changes nothing.
    async fn look(&self, client: &LockClient, out: Output) -> Result<Exit, LockError> {
        let state = client.inspect(self.key).await?;
        if state.is_empty() {
            return Ok(out.unknown(self.key));
        }
        let foreign = state.holders.iter().find(|holder| !holder.is_ours());
        if let Some(foreign) = foreign.filter(|_| !self.force) {
            return Err(not_ours(&state.key, foreign));
        }
        let holds = |token: &str| state.holders.iter().any(|holder| holder.token == token);
        if let Some(token) = self.if_holder.filter(|token| !holds(token)) {
            let outcome = CheckedRelease::NotHolder {
                key: state.key.clone(),
                token: token.to_owned(),
                holders: state.holders.clone(),
            };
            out.say(format_args!("dry run: {outcome}"), || {
                crate::json::checked(&outcome, true)
            });
            return Ok(Exit::NotHolder);
        }
        out.say(would_release(&state), || crate::json::would_release(&state));
        Ok(Exit::Done)
    }
}

/// Whether a release took nothing and woke nobody.
fn nothing_done(release: &ForcedRelease) -> bool {
    !release.removed_any() && release.woken.is_none() && !release.handover_restarted
}

/// `--dry-run`'s line: `dry run: would release KEY: remove holder TOKEN (ttl 9.874s
/// left); wake waiter ID`.
fn would_release(state: &LockState) -> String {
    let mut line = format!("dry run: would release {}: ", state.key);
    if state.holders.is_empty() {
        line.push_str("nobody holds it");
    }
    for (index, holder) in state.holders.iter().enumerate() {
        if index > 0 {
            line.push_str(", ");
        }
        let role = match holder.kind {
            HolderKind::Reader => "reader",
            HolderKind::Permit => "permit",
            _ => "holder",
        };
        line.push_str(&format!("remove {role} {}", holder.token));
        match holder.ttl {
            Some(ttl) => line.push_str(&format!(
                " (ttl {}.{:03}s left)",
                ttl.as_secs(),
                ttl.subsec_millis()
            )),
            None => line.push_str(" (no expiry)"),
        }
    }
    match state.waiters.first() {
        Some(waiter) => line.push_str(&format!("; wake waiter {}", waiter.id)),
        None => line.push_str("; no waiter"),
    }
    line
}

/// The refusal of a key whose holder `foreign` is no token of ours, as the release would
/// refuse it.
fn not_ours(key: &str, foreign: &Holder) -> LockError {
    LockError::InvalidKey {
        key: key.to_owned(),
        reason: format!(
            "the key holds `{}`, not a token of this crate's (`lr-…`): another client's \
             lock, or no lock at all; check the key's name and --prefix, or use --force",
            foreign.token
        ),
    }
}
