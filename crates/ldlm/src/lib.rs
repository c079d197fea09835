//! The distributed lock manager (Lustre's LDLM, in Nacre's terms). No I/O; docs/locking.md
//! describes the protocol.
//!
//! A server keeps one `server::Namespace` per target. Clients never ask for a lock on its
//! own: a read that can be cached (a lookup, a getattr, the entry a create returns) says in
//! its request which inode bits it would like (`msg::LOOKUP`, `msg::UPDATE`, `msg::LAYOUT`)
//! and the reply carries the lock granted with it (Lustre's intents). A change takes the
//! bits it changes exclusively on the server: it revokes every other client's overlapping
//! lock through a callback (a `msg::LockRef` in the answer of the client's parked poll, over
//! its existing connection), waits until they are cancelled or the callback timeout has
//! passed (the late clients are evicted), and only then runs. A client's own changes never
//! revoke its own locks (the kernel applies them to its caches itself), except `OPEN`,
//! which is called back from its own holder too.
//!
//! What a namespace locks is its `kind::Kind`: inode bits on an MDT, byte extents of
//! objects on an OST (`kind::Extents`, read or write; an OST grants read locks with reads
//! and revokes them with other clients' writes, punches and destroys). A grant never waits:
//! while a conflicting change is under way, the read is answered without a lock (and so is
//! not cached).
//!
//! The modules:
//!
//! * `msg`: the inode bits `LOOKUP`, `UPDATE`, `LAYOUT` and `OPEN`, `LockRef`, `ExtentRef`,
//!   and the lock traffic's own messages, carried inside the MDS and OSS services.
//! * `kind`: what a namespace locks and what conflicts: `InodeBits` on an MDT; `Extents`
//!   (read or write byte extents of objects, grants widened where nothing conflicts) on an
//!   OST.
//! * `server`: a target's `Namespace`, generic over its `Kind`: client locks granted with the
//!   replies that asked for them, the poll timer, lock replay within an MDT's recovery
//!   window.
//! * `server/revoke.rs`: a change's revocation: callbacks through parked polls, the wait for
//!   cancels (or the change parked: `revoke_later`), eviction of the late, prolonging for
//!   holders still at work, `OPEN` called back from its own holder too.
//! * `server/glimpse.rs`: asks write lock holders for an object's size without revoking.
//! * `server/replay.rs`: per-object lock reclaim after an OST restart, refused where someone
//!   else changed the object; locks taken back carry no authority of their own
//!   (`holds_where`).
//! * `client`: `ClientLocks`, the client's side: the locks it holds, the names it handed the
//!   kernel under each, callbacks that arrived before their grant, and the least recently
//!   used locks past its bound.
//! * `flock`: `FlockTable`, byte-range locks of `fcntl` and `flock` by owner: POSIX split
//!   and merge, deadlock detection. The MDT keeps one table; each client keeps a record of its
//!   own locks.

pub mod client;
pub mod flock;
pub mod kind;
pub mod msg;
pub mod server;
