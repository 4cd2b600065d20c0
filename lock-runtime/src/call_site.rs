//! Where a lock is taken in the application's code: what the lock-order check reports and
//! what a token names as its holder's function.

use std::fmt;

/// Where a lock is taken in the application's code: a guarded function, or the line that
/// built a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallSite {
    function: Option<&'static str>,
    file: &'static str,
    line: u32,
}

impl CallSite {
    /// A place not known (a builder made without [`CallSite::caller`]).
    pub(crate) const UNKNOWN: CallSite = CallSite::at("<unknown>", 0);

    /// The line that called the `#[track_caller]` function this is called in.
    #[track_caller]
    pub(crate) fn caller() -> Self {
        let location = std::panic::Location::caller();
        CallSite::at(location.file(), location.line())
    }

    /// A line of a file.
    pub(crate) const fn at(file: &'static str, line: u32) -> Self {
        CallSite {
            function: None,
            file,
            line,
        }
    }

    /// A guarded function, by its path, at a line of a file.
    pub(crate) const fn function(function: &'static str, file: &'static str, line: u32) -> Self {
        CallSite {
            function: Some(function),
            file,
            line,
        }
    }
}

impl CallSite {
    /// The guarded function's path, when the attribute named it.
    pub(crate) fn function_path(&self) -> Option<&'static str> {
        self.function
    }

    /// The file and line.
    pub(crate) fn file_line(&self) -> (&'static str, u32) {
        (self.file, self.line)
    }

    /// Whether `other` is this site, told by where its names are stored rather than by
    /// their text: cheap, and never says yes for two sites that differ (two equal names
    /// stored apart only make it say no).
    pub(crate) fn same(&self, other: &CallSite) -> bool {
        let function = match (self.function, other.function) {
            (Some(this), Some(other)) => std::ptr::eq(this, other),
            (this, other) => this.is_none() && other.is_none(),
        };
        function && self.line == other.line && std::ptr::eq(self.file, other.file)
    }
}

impl fmt::Display for CallSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.function {
            Some(function) => write!(f, "{function} ({}:{})", self.file, self.line),
            None => write!(f, "{}:{}", self.file, self.line),
        }
    }
}
