//! The scripts as one Redis Functions library: the shared helpers defined once at the
//! library's top level, each script a function whose body is its own part. Servers with
//! Functions (Redis 7 and later) run a script by `FCALL`, so a call no longer defines the
//! helpers before its work; the same files make each script's `EVALSHA` text for servers
//! without them.

use once_cell::sync::Lazy;
use redis::{Cmd, Script};

use super::catalog::{ALL, LuaScript, SHARED};

/// What stands for the library's name in its text until the text's hash is known.
const NAME_MARK: &str = "__LOCK_LIBRARY__";

/// Which functions may run on a server out of memory (`allow-oom`), as their `EVALSHA` form
/// did: Redis refuses a flagged function under OOM before it runs, where a script without
/// flags ran and only its commands that may grow memory were refused (`SET`, `ZADD`; not
/// `DEL`, `PEXPIRE`). The ones that give memory back (release, leave, an operator's
/// release, a reader's release), the ones whose `PEXPIRE` keeps a holder's lease (the
/// renewal of one lease, a local pass's retake, a writer's wait for its readers), and the
/// operator's read of a key (`inspect`, wanted most when the server is in trouble).
const MAY_RUN_OUT_OF_MEMORY: [&str; 8] = [
    "release",
    "leave",
    "force_release",
    "renew",
    "retake",
    "read_release",
    "write_ready",
    "inspect",
];

/// The library: its name and its text.
pub(crate) struct Library {
    /// `lock_runtime_` and a short hash of the text: two versions of the client on one
    /// server use two libraries side by side.
    pub(crate) name: String,
    /// What `FUNCTION LOAD` takes.
    pub(crate) text: String,
}

impl Library {
    fn build(scripts: &[&LuaScript]) -> Self {
        let mut body = String::new();
        for part in SHARED {
            body.push_str(part);
            body.push('\n');
        }
        for script in scripts {
            let flags = if MAY_RUN_OUT_OF_MEMORY.contains(&script.name) {
                "'allow-cross-slot-keys', 'allow-oom'"
            } else {
                "'allow-cross-slot-keys'"
            };
            body.push_str(&format!(
                "redis.register_function{{function_name = '{NAME_MARK}_{}', flags = {{{flags}}}, \
                 callback = function(KEYS, ARGV)\n{}\n{}\nend}}\n",
                script.name, script.head, script.own
            ));
        }
        let hash = Script::new(&body).get_hash().to_owned();
        let name = format!("lock_runtime_{}", &hash[..10]);
        let text = format!("#!lua name={name}\n{}", body.replace(NAME_MARK, &name));
        Library { name, text }
    }

    /// `FUNCTION LIST LIBRARYNAME` of the library: an empty list where the server lacks it.
    pub(crate) fn list_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LIST").arg("LIBRARYNAME").arg(&self.name);
        cmd
    }

    /// `FUNCTION LOAD REPLACE` of the library: the same text again replaces nothing that
    /// differs, so a load racing another client's is no error. In a cluster it goes to
    /// every primary.
    pub(crate) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&self.text);
        cmd
    }
}

/// The library of every script in `scripts.rs`.
pub(crate) static LIBRARY: Lazy<Library> = Lazy::new(|| Library::build(&ALL));

/// Whether `err` says the server has no such function (a fresh server, a restart without
/// persistence, `FUNCTION FLUSH`, another version's library): load the library.
pub(crate) fn is_function_missing(err: &redis::RedisError) -> bool {
    call_error(err, |detail| detail.starts_with("Function not found"))
}

/// Whether `err` says the server does not know `FCALL` or `FUNCTION` (before Redis 7, or
/// renamed away), or that this user may not run them (an ACL that grants `EVALSHA` but not
/// `FCALL` or `FUNCTION LOAD`): call the scripts by `EVALSHA` there.
pub(crate) fn is_functions_unknown(err: &redis::RedisError) -> bool {
    call_error(err, |detail| {
        let detail = detail.to_ascii_lowercase();
        let names_functions = detail.contains("'fcall'") || detail.contains("'function");
        names_functions
            && (detail.starts_with("unknown command") || detail.contains("no permissions to run"))
    })
}

/// Whether the server's error for the call itself (a command's, or in a pipeline the first
/// command's: the call, before its `WAIT` or `WAITAOF`) says `what`.
fn call_error(err: &redis::RedisError, what: impl Fn(&str) -> bool) -> bool {
    if let Some(detail) = err.detail() {
        return what(detail);
    }
    err.clone().into_server_errors().is_some_and(|errors| {
        errors
            .iter()
            .find(|(index, _)| *index == 0)
            .and_then(|(_, error)| error.details())
            .is_some_and(&what)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_one_function_named_after_the_library() {
        let library = &*LIBRARY;
        assert!(
            library
                .text
                .starts_with(&format!("#!lua name={}\n", library.name))
        );
        assert_eq!(
            library.text.matches("redis.register_function").count(),
            ALL.len()
        );
        for script in ALL {
            let function = script.function(&library.name);
            assert!(function.starts_with(&library.name), "{function}");
            assert!(
                library.text.contains(&format!("'{function}'")),
                "{function} is not registered"
            );
            assert!(
                function
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            );
        }
        assert!(!library.text.contains(NAME_MARK));
    }
}
