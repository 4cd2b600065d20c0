//! Shared pieces of the examples: throwaway servers, the data store, and the workloads
//! (so that the integration tests run exactly the code the examples show).

pub mod cli;
pub mod dedup;
pub mod fenced_sqlite;
pub mod flash_sale;
pub mod id_generator;
pub mod scheduled_job;
pub mod servers;
pub mod store;
pub mod web_shop;
