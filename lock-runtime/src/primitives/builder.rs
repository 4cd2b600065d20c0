//! The setters every builder shares (a [`Lock`](crate::Lock), an
//! [`RwLock`](crate::RwLock), a [`Semaphore`](crate::Semaphore), a
//! [`MultiLock`](crate::MultiLock), a [`LockLayer`](crate::layer::LockLayer)): written once,
//! each with the docs of its primitive.
//!
//! A builder that takes them has the fields `options: LockOptions`, `explicit: Explicit`
//! (which of `ttl` and `wait` were given, so that the client's defaults fill in the rest)
//! and `client: Option<LockClient>`, and is `Clone`.

/// Writes the shared setters into an `impl` block; each takes its doc text. `watchdog`
/// and `fencing` are for the builders that have them.
macro_rules! shared_setters {
    (
        ttl: $ttl:expr,
        wait: $wait:expr,
        $(watchdog: $watchdog:expr,)?
        on_lost: $on_lost:expr,
        $(fencing: $fencing:expr,)?
        with_options: $with_options:expr,
        client: $client:expr $(,)?
    ) => {
        #[doc = $ttl]
        pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
            self.options.ttl = ttl;
            self.explicit.ttl = true;
            self
        }

        #[doc = $wait]
        pub fn wait(mut self, wait: std::time::Duration) -> Self {
            self.options.wait = wait;
            self.explicit.wait = true;
            self
        }

        $(
            #[doc = $watchdog]
            pub fn watchdog(mut self, watchdog: bool) -> Self {
                self.options.watchdog = watchdog;
                self
            }
        )?

        #[doc = $on_lost]
        pub fn on_lost(mut self, on_lost: $crate::options::OnLost) -> Self {
            self.options.on_lost = on_lost;
            self
        }

        $(
            #[doc = $fencing]
            pub fn fencing(mut self, fencing: bool) -> Self {
                self.options.fencing = fencing;
                self
            }
        )?

        #[doc = $with_options]
        pub fn with_options(mut self, options: $crate::options::LockOptions) -> Self {
            self.explicit = $crate::options::Explicit::of(&options);
            self.options = options;
            self
        }

        /// Replaces all options, with which of `ttl` and `wait` count as given.
        #[allow(dead_code)]
        pub(crate) fn with_explicit_options(
            mut self,
            options: $crate::options::LockOptions,
            explicit: $crate::options::Explicit,
        ) -> Self {
            self.options = options;
            self.explicit = explicit;
            self
        }

        #[doc = $client]
        pub fn client(mut self, client: &$crate::client::LockClient) -> Self {
            self.client = Some(client.clone());
            self
        }

        /// The client the locks go through (this builder's, or the global one), and this
        /// builder with the client's default ttl and wait in place of those not given.
        #[allow(dead_code)]
        fn with_client(
            &self,
        ) -> Result<
            ($crate::client::LockClient, std::borrow::Cow<'_, Self>),
            $crate::error::LockError,
        > {
            let client = match &self.client {
                Some(client) => client.clone(),
                None => $crate::client::client()?.clone(),
            };
            let this = match self.explicit.resolve(&self.options, client.lock_defaults()) {
                Some(options) => std::borrow::Cow::Owned(
                    self.clone()
                        .with_explicit_options(options, $crate::options::Explicit::ALL),
                ),
                None => std::borrow::Cow::Borrowed(self),
            };
            Ok((client, this))
        }
    };
}

/// The getters of a builder on one key (with the field `key: String`).
macro_rules! key_getters {
    () => {
        /// The key as given (without the client's prefix).
        pub fn key(&self) -> &str {
            &self.key
        }

        /// The options in force.
        pub fn options(&self) -> &$crate::options::LockOptions {
            &self.options
        }
    };
}

pub(crate) use key_getters;

pub(crate) use shared_setters;
