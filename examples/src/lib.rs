//! Shared pieces of the examples: throwaway servers, the data store, and the workloads
//! (so that the integration tests run exactly the code the examples show). `web_shop` needs
//! the feature `web`, `fenced_sqlite` the feature `sqlite`.

pub mod cli;
pub mod dedup;
#[cfg(feature = "sqlite")]
pub mod fenced_sqlite;
pub mod flash_sale;
pub mod id_generator;
pub mod scheduled_job;
pub mod servers;
pub mod store;
#[cfg(feature = "web")]
pub mod web_shop;
