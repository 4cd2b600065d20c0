//! What lockctl says: a line of text or, with `--json`, one JSON object per line; and the
//! exit status each outcome ends with.

use std::fmt::Display;
use std::process::ExitCode;

use serde_json::Value;

/// Every exit status and, in short, what it means: the one list that `--help`, the crate
/// docs and the guide's lockctl part are checked against (a test in main.rs), beside
/// [`Exit`], whose codes it lists.
#[cfg(test)]
pub(crate) const EXIT_STATUSES: [(u8, &str); 5] = [
    (0, "done"),
    (1, "Redis failed or the key was refused"),
    (2, "a usage error"),
    (3, "the key is unknown"),
    (4, "--if-holder TOKEN holds no part of the key"),
];

/// How a command ended: its exit status (listed in `--help` and the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: done.
    Done,
    /// 1: Redis failed, or the key was refused (another type, or not one of our locks
    /// without `--force`); the message says why.
    Failed,
    /// 3: the key is unknown: no lock, no hand-over, nobody queued, no reader's share, no
    /// permit, no fence counter (a mistyped key, or the wrong `--prefix`).
    Unknown,
    /// 4: `release --if-holder TOKEN`: TOKEN holds no part of the key; nothing changed.
    NotHolder,
}

impl Exit {
    pub(crate) fn code(self) -> ExitCode {
        ExitCode::from(match self {
            Exit::Done => 0,
            Exit::Failed => 1,
            Exit::Unknown => 3,
            Exit::NotHolder => 4,
        })
    }
}

/// Where a command's lines go: stdout, as text or JSON.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    /// Prints `text`, or with `--json` the object `value` makes.
    pub(crate) fn say(self, text: impl Display, value: impl FnOnce() -> Value) {
        if self.json {
            println!("{}", value());
        } else {
            println!("{text}");
        }
    }

    /// Says that nothing of a lock is at `key`.
    pub(crate) fn unknown(self, key: &str) -> Exit {
        self.say(
            format_args!(
                "{key}  unknown: no lock, no waiter, no reader's share, no permit, no fence \
                 counter (check the key's name and --prefix)"
            ),
            || crate::json::unknown(key),
        );
        Exit::Unknown
    }
}
