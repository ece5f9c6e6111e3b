//! Rebuilds the crate when a ledger migration changes, because
//! `sqlx::migrate!()` embeds `migrations/` at compile time and cargo would not
//! otherwise notice a new or edited SQL file.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations/postgres");
}
