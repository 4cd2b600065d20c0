//! A client's notice channel: an operator's [`force_release`](crate::force_release) of a
//! lock this client holds tells the client at once (`force_release.lua` publishes
//! `!TOKEN WHO` on `~lock/notice/<client id>`, the id its tokens carry, see
//! [`crate::identity`]), and the lease ends with
//! [`LostCause::ForceReleased`](crate::LostCause::ForceReleased) instead of at its next
//! renewal, up to a third of its ttl later.
//!
//! The client listens once it has renewed a lease: holds shorter than a third of their ttl
//! (the common case) cost no subscription, and one that is taken away before its first
//! renewal finds out at that renewal. The listener is one more waiter on the client's
//! release subscriptions, on a channel of its own. In a cluster the channel would be a
//! sharded one, which the release's script cannot reach from the key's slot: there the
//! holder finds out at its next renewal.

use std::time::Duration;

use crate::identity::TokenMaker;
use crate::renewal::watchdog::Watchdog;
use crate::scripts::AUX_PREFIX;
use crate::wakeups::{Registrar, WaitTicket};

/// The listener's name among the channel's waiters.
const LISTENER: &str = "~notice";

/// How long the listener parks between looks (a notice wakes it at once).
const PARK: Duration = Duration::from_secs(60);

/// How long the listener waits before it asks for the subscription again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// The channel the client whose tokens `tokens` makes hears of its locks taken away on:
/// `~lock/notice/<client id>`.
pub(crate) fn channel(tokens: &TokenMaker) -> String {
    format!("{AUX_PREFIX}notice/{}", tokens.client_id())
}

/// Starts the listener of `channel` on the current runtime (the client's own, which ends
/// with the client): it subscribes once `watchdog` has renewed a lease.
pub(crate) fn listen(registrar: Registrar, channel: String, watchdog: Watchdog) {
    tokio::spawn(async move {
        watchdog.first_renewal().await;
        let Some(ticket) = registrar.register(&channel, LISTENER) else {
            return;
        };
        while listen_once(&ticket, &watchdog).await {}
    });
}

/// One subscription and park; false once the client is gone.
async fn listen_once(ticket: &WaitTicket, watchdog: &Watchdog) -> bool {
    if let Err(err) = ticket.subscribe().await {
        if ticket.is_closed() {
            return false;
        }
        tracing::debug!(error = %err, "the notice channel could not be subscribed; trying again");
        tokio::time::sleep(RETRY).await;
        return true;
    }
    ticket.wait(PARK).await;
    for notice in ticket.take_notices() {
        if let Some((token, by)) = parse(&notice) {
            watchdog.force_released(token, by);
        }
    }
    true
}

/// A notice's token and who released it: `!TOKEN WHO`.
fn parse(notice: &str) -> Option<(&str, &str)> {
    let rest = notice.strip_prefix('!')?;
    Some(rest.split_once(' ').unwrap_or((rest, "an operator")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_script_tells_the_channel_the_client_listens_on() {
        let lua = include_str!("../lua/force_release.lua");
        assert!(lua.contains(&format!("'{AUX_PREFIX}notice/'")));
        let tokens = TokenMaker::new(None);
        let site = crate::call_site::CallSite::at("a.rs", 1);
        let token = tokens.token(std::time::Duration::from_secs(1), &site);
        let id = token["lr-".len()..].split('.').next().unwrap_or("");
        assert_eq!(channel(&tokens), format!("{AUX_PREFIX}notice/{id}"));
    }

    #[test]
    fn a_notice_names_the_token_and_who_released_it() {
        assert_eq!(
            parse("!lr-1.2/3/4/5@h/s/f host-b pid 9 lockctl"),
            Some(("lr-1.2/3/4/5@h/s/f", "host-b pid 9 lockctl"))
        );
        assert_eq!(parse("!lr-x"), Some(("lr-x", "an operator")));
        assert_eq!(parse("=lr-x key"), None);
    }
}
