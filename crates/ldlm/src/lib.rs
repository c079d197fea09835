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
//! Client locks are always shared (protected read); the only exclusive holder is the
//! server's own change, so a grant never waits: while a change of the same bits is under
//! way, the read is answered without a lock (and so is not cached).
//!
//! [`client::ClientLocks`] is the client's side: which locks it holds, the names it handed
//! the kernel under each, callbacks that arrived before their grant, and the least
//! recently used locks past its bound.

pub mod client;
pub mod flock;
pub mod kind;
pub mod msg;
pub mod server;
