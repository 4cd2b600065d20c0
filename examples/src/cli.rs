//! The examples' command lines: flags, some followed by a value.

use std::str::FromStr;

/// The words after the program name, read flag by flag.
pub struct Words(std::iter::Skip<std::env::Args>);

impl Words {
    /// The process's own arguments.
    pub fn from_env() -> Words {
        Words(std::env::args().skip(1))
    }

    /// The next flag, if any.
    pub fn next_flag(&mut self) -> Option<String> {
        self.0.next()
    }

    /// The value that follows `flag`, parsed; the error names the flag and the value.
    pub fn value<T: FromStr>(&mut self, flag: &str) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let value = self
            .0
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        value
            .parse()
            .map_err(|err| format!("{flag} {value:?}: {err}"))
    }
}
