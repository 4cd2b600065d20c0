//! Compile-time behaviour of `#[distributed_lock]`: every supported function shape
//! compiles (and its future is `Send`), and every error the attribute can see is a
//! compile error with the message snapshotted in `tests/ui/fail/*.stderr`.
//!
//! Refresh the snapshots after a deliberate message change with
//! `TRYBUILD=overwrite cargo test -p lock-tests --test ui`.

#[test]
fn pass() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
}

#[test]
fn compile_fail() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/fail/*.rs");
}
