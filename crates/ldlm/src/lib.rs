//! The distributed lock manager (Lustre's LDLM, in Nacre's terms).
//!
//! A server keeps one [`server::Namespace`] per target. Clients never ask for a lock on its
//! own: a read that can be cached (a lookup, a getattr, the entry a create returns) says in
//! its request which inode bits it would like ([`msg::LOOKUP`], [`msg::UPDATE`],
//! [`msg::LAYOUT`]) and the reply carries the lock granted with it (Lustre's intents). A
//! change takes the bits it changes exclusively on the server: it revokes every other
//! client's overlapping lock through a callback ([`msg::LockRef`] in the answer of the
//! client's parked poll, over its existing connection), waits until they are cancelled or
//! the callback timeout has passed (the late clients are evicted), and only then runs. A
//! client's own changes never revoke its own locks: the kernel applies them to its caches
//! itself.
//!
//! What a namespace locks is its [`kind::Kind`]: inode bits on an MDT, byte extents of
//! objects on an OST ([`kind::Extents`], read or write; an OST grants read locks with
//! reads and revokes them with other clients' writes, punches and destroys). A grant never
//! waits: while a conflicting change is under way, the read is answered without a lock (and
//! so is not cached).
//!
//! [`client::ClientLocks`] is the client's side: which locks it holds, the names it handed
//! the kernel under each, callbacks that arrived before their grant, and the least
//! recently used locks past its bound.

pub mod client;
pub mod flock;
pub mod kind;
pub mod msg;
pub mod server;
