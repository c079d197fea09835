//! The store layer of an MDT (docs/mds.md, "Layers"): the only user of the KV store
//! (`nacre_kv`) on an MDT, and it knows no operation.
//!
//! * `records`: the schema — every table an MDT keeps, its keys, and each stored record with
//!   its version and decoders (docs/formats.md: a newer version is refused by name, never
//!   taken for damage);
//! * `store`: `Store` (reads, the allocation state, durability: journal syncs and waits)
//!   and `store::Tx` (the write lock, the batch of a change, the allocation of FIDs and OST
//!   objects, inode counts, saved replies and transaction numbers).
//!
//! nacre-mds builds on it: `Mdt` holds a `Store`, and its `mdt::Tx` wraps `store::Tx` with
//! what needs the MDT (locks, sizes, destroys, quotas).

pub mod records;
pub mod store;
