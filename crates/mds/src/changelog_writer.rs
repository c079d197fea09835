//! What every change writes to the changelog (the consumers are served by changelog.rs):
//! the changelog's state on the MDT (`Mdt::changelog`: consumers, numbering, counters),
//! loaded at start, and the numbered record a change adds to its own transaction.

use crate::mdt::{Mdt, Tx};
use crate::records::{decode, encode};
use crate::store::Store;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::changelog::*;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Default of `changelog_records_max`: how far (records) a consumer may fall behind before
/// it is deregistered. A record takes about 100 to 400 bytes on the MDT (names, job id).
pub const CHANGELOG_RECORDS_MAX_DEFAULT: u64 = 20_000_000;
/// Default of `changelog_idle_ms_max`: a week without reading or clearing.
pub const CHANGELOG_IDLE_MS_MAX_DEFAULT: u64 = 7 * 86_400_000;

/// A consumer as stored.
#[derive(Serialize, Deserialize)]
pub(crate) struct UserRecord {
    pub(crate) name: String,
    pub(crate) cleared: u64,
}

pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) cleared: u64,
    pub(crate) active: Instant,
}

pub(crate) struct State {
    pub(crate) users: BTreeMap<u32, User>,
    /// Oldest record kept (lower ones were freed).
    pub(crate) first: u64,
    /// Number of the next record.
    pub(crate) next: u64,
}

/// An MDT's changelog: its consumers and the numbering of its records.
pub struct Changelog {
    pub(crate) state: Mutex<State>,
    /// Some consumer is registered (changes are recorded).
    pub(crate) enabled: AtomicBool,
    /// How far a consumer may fall behind (records) before it is deregistered.
    pub records_max: AtomicU64,
    /// How long a consumer with records waiting may stay idle (ms) before it is
    /// deregistered.
    pub idle_ms_max: AtomicU64,
    written: AtomicU64,
    pub(crate) freed: AtomicU64,
    pub(crate) dropped_users: AtomicU64,
    /// Who started each cross-MDT operation in progress here, by intent key: its record
    /// is written when its local end concludes (after a restart, unknown: root, no job).
    origins: Mutex<std::collections::HashMap<Fid, (u32, u32, String)>>,
    /// Where the copy of the MGS's audit trail stands (admin_records.rs; None: not read
    /// from the store yet).
    pub(crate) admin_cursor: Mutex<Option<(u64, u64)>>,
}

/// Cross-MDT operations whose origin is remembered at most (past it, their records say
/// root and no job).
const ORIGINS_MAX: usize = 65_536;

/// Counters and state shown as `mdt.*.changelog_users`.
#[derive(Clone, Debug, Default)]
pub struct ChangelogStatus {
    /// Oldest record kept.
    pub first: u64,
    /// Number of the next record.
    pub next: u64,
    /// Consumers.
    pub users: Vec<ChangelogUser>,
    /// Records written since the MDT started.
    pub written: u64,
    /// Records freed since the MDT started.
    pub freed: u64,
    /// Consumers deregistered by the limits since the MDT started.
    pub dropped_users: u64,
}

impl Changelog {
    /// Loads the consumers and numbering from the store.
    pub fn load(store: &Store) -> Result<Changelog, Status> {
        let next = store.meta_u64(b"changelog_next")?.unwrap_or(1).max(1);
        let first = store
            .meta_u64(b"changelog_first")?
            .unwrap_or(1)
            .clamp(1, next);
        let mut users = BTreeMap::new();
        for (k, v) in store.changelog_users(CHANGELOG_USERS_MAX * 2)? {
            let Ok(id) = <[u8; 4]>::try_from(k.as_slice()) else {
                tracing::warn!("changelog: bad consumer key skipped");
                continue;
            };
            let rec: UserRecord = decode(&v)?;
            users.insert(
                u32::from_be_bytes(id),
                User {
                    name: rec.name,
                    cleared: rec.cleared,
                    active: Instant::now(),
                },
            );
        }
        Ok(Changelog {
            enabled: AtomicBool::new(!users.is_empty()),
            state: Mutex::new(State { users, first, next }),
            records_max: AtomicU64::new(CHANGELOG_RECORDS_MAX_DEFAULT),
            idle_ms_max: AtomicU64::new(CHANGELOG_IDLE_MS_MAX_DEFAULT),
            written: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            dropped_users: AtomicU64::new(0),
            admin_cursor: Mutex::new(None),
            origins: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// True while some consumer is registered.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// What `mdt.*.changelog_users` shows.
    pub fn status(&self) -> ChangelogStatus {
        let st = self.state.lock();
        ChangelogStatus {
            first: st.first,
            next: st.next,
            users: users_of(&st),
            written: self.written.load(Ordering::Relaxed),
            freed: self.freed.load(Ordering::Relaxed),
            dropped_users: self.dropped_users.load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn users_of(st: &State) -> Vec<ChangelogUser> {
    st.users
        .iter()
        .map(|(id, u)| ChangelogUser {
            id: *id,
            name: u.name.clone(),
            cleared: u.cleared,
            idle_ms: u.active.elapsed().as_millis() as u64,
        })
        .collect()
}

/// Decodes a stored consumer: (name, last record cleared). Damage is an error, never a
/// panic.
pub fn decode_user(bytes: &[u8]) -> Result<(String, u64), Status> {
    decode::<UserRecord>(bytes).map(|u| (u.name, u.cleared))
}

pub(crate) fn put_user(tx: &mut Tx<'_>, id: u32, u: &User) {
    tx.put_changelog_user(
        id,
        encode(&UserRecord {
            name: u.name.clone(),
            cleared: u.cleared,
        }),
    );
}

/// Who made a change: the fields every record of a request carries.
pub struct Origin<'a> {
    /// The caller's uid.
    pub uid: u32,
    /// The caller's gid.
    pub gid: u32,
    /// The caller's job.
    pub jobid: &'a str,
}

impl<'a> Origin<'a> {
    /// The origin of `call`.
    pub fn of(call: &'a MdsCall) -> Origin<'a> {
        Origin {
            uid: call.cred.uid,
            gid: call.cred.gid,
            jobid: nacre_types::jobid::clamp(&call.jobid),
        }
    }
}

/// What a change records (the fields but number, time and origin).
pub struct Change {
    /// Kind.
    pub kind: RecordKind,
    /// Flags.
    pub flags: u32,
    /// Inode.
    pub target: Fid,
    /// Directory of the name.
    pub parent: Fid,
    /// Name.
    pub name: Vec<u8>,
    /// A rename's source.
    pub source: Option<RenameSource>,
    /// An xattr change's attribute.
    pub xattr: Vec<u8>,
}

impl Change {
    /// A change of `kind` to `target`, named `name` in `parent`.
    pub fn new(kind: RecordKind, target: Fid, parent: Fid, name: &[u8]) -> Change {
        Change {
            kind,
            flags: 0,
            target,
            parent,
            name: name.to_vec(),
            source: None,
            xattr: Vec::new(),
        }
    }
}

/// Adds `change`'s record to `tx` if some consumer is registered. Called by a change that
/// succeeded, just before its transaction commits.
pub fn note(tx: &mut Tx<'_>, origin: &Origin<'_>, change: Change) {
    let cl = &tx.mdt.changelog;
    if !cl.enabled() {
        return;
    }
    let mut st = cl.state.lock();
    if st.users.is_empty() {
        return;
    }
    let index = st.next;
    st.next += 1;
    let rec = ChangelogRecord {
        index,
        kind: change.kind,
        flags: change.flags,
        time: tx.now,
        target: change.target,
        parent: change.parent,
        name: change.name,
        source: change.source,
        xattr: change.xattr,
        uid: origin.uid,
        gid: origin.gid,
        jobid: origin.jobid.to_string(),
    };
    tx.put_changelog_record(index, &rec, st.next);
    cl.written.fetch_add(1, Ordering::Relaxed);
    // The limit: the consumer furthest behind goes once it is too far behind.
    let max = cl.records_max.load(Ordering::Relaxed).max(1);
    let slowest = st
        .users
        .iter()
        .min_by_key(|(_, u)| u.cleared)
        .map(|(id, u)| (*id, u.cleared));
    if let Some((id, cleared)) = slowest {
        if index.saturating_sub(cleared) > max {
            tracing::warn!(
                "{}: changelog consumer cl{id} is {} records behind (changelog_records_max \
                 {max}): deregistered, its records are freed",
                tx.mdt.label.name(),
                index - cleared
            );
            st.users.remove(&id);
            tx.del_changelog_user(id);
            cl.dropped_users.fetch_add(1, Ordering::Relaxed);
            cl.enabled.store(!st.users.is_empty(), Ordering::Release);
        }
    }
}

/// Remembers who started the cross-MDT operation of intent `key` (its record is written
/// when it concludes: [`note_concluded`]).
pub fn remember_origin(mdt: &Mdt, key: Fid, call: &MdsCall) {
    if !mdt.changelog.enabled() {
        return;
    }
    let o = Origin::of(call);
    let mut origins = mdt.changelog.origins.lock();
    if origins.len() < ORIGINS_MAX {
        origins.insert(key, (o.uid, o.gid, o.jobid.to_string()));
    }
}

/// Records `change`, the local end of the cross-MDT operation of intent `key`, in `tx`.
pub fn note_concluded(tx: &mut Tx<'_>, key: Fid, change: Change) {
    let origin = tx.mdt.changelog.origins.lock().remove(&key);
    let (uid, gid, jobid) = origin.unwrap_or((0, 0, String::new()));
    note(
        tx,
        &Origin {
            uid,
            gid,
            jobid: &jobid,
        },
        change,
    );
}

/// The record a successful modifying `op` makes, noted in `tx` (which holds the change,
/// not yet committed: reads through `tx` still see the namespace as it was before it).
pub fn note_op(tx: &mut Tx<'_>, call: &MdsCall, reply: &MdsReply) {
    if !tx.mdt.changelog.enabled() {
        return;
    }
    let origin = Origin::of(call);
    let entry_fid = match reply {
        MdsReply::Entry { attr, .. } => attr.fid,
        _ => Fid::default(),
    };
    let named = |tx: &Tx<'_>, parent: Fid, name: &[u8]| {
        tx.lookup(parent, name).ok().flatten().map(|d| d.fid)
    };
    // A non-directory whose last name goes (its link count before the change is one).
    let last_link = |tx: &Tx<'_>, fid: Fid| match tx.mdt.inode(fid) {
        Ok(rec) => rec.attr.kind != FileKind::Directory && rec.attr.nlink <= 1,
        // On another MDT: that MDT knows; the record says not.
        Err(_) => false,
    };
    let change = match &call.op {
        MdsOp::Create {
            parent, name, kind, ..
        } => {
            if named(tx, *parent, name).is_some() {
                // An open of what was there: nothing created.
                return;
            }
            let k = match kind {
                FileKind::Regular => RecordKind::Create,
                _ => RecordKind::Mknod,
            };
            Change::new(k, entry_fid, *parent, name)
        }
        MdsOp::Mkdir { parent, name, .. }
        | MdsOp::MkdirOn { parent, name, .. }
        | MdsOp::MkdirStriped { parent, name, .. } => {
            Change::new(RecordKind::Mkdir, entry_fid, *parent, name)
        }
        MdsOp::Symlink { parent, name, .. } => {
            Change::new(RecordKind::SoftLink, entry_fid, *parent, name)
        }
        MdsOp::Link { fid, parent, name } => Change::new(RecordKind::HardLink, *fid, *parent, name),
        MdsOp::Unlink { parent, name } => {
            let Some(fid) = named(tx, *parent, name) else {
                return;
            };
            let mut c = Change::new(RecordKind::Unlink, fid, *parent, name);
            if last_link(tx, fid) {
                c.flags |= FLAG_LAST_LINK;
            }
            c
        }
        MdsOp::Rmdir { parent, name } => {
            let Some(fid) = named(tx, *parent, name) else {
                return;
            };
            Change::new(RecordKind::Rmdir, fid, *parent, name)
        }
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            ..
        } => {
            let Some(moved) = named(tx, *src_parent, src_name) else {
                return;
            };
            let replaced = named(tx, *dst_parent, dst_name).filter(|f| *f != moved);
            let mut c = Change::new(
                RecordKind::Rename,
                replaced.unwrap_or_default(),
                *dst_parent,
                dst_name,
            );
            if let Some(r) = replaced {
                c.flags |= FLAG_OVERWRITE;
                if last_link(tx, r) {
                    c.flags |= FLAG_LAST_LINK;
                }
            }
            c.source = Some(RenameSource {
                fid: moved,
                parent: *src_parent,
                name: src_name.clone(),
            });
            c
        }
        MdsOp::SetAttr { fid, attr } => {
            let kind = match attr.size {
                Some(_) => RecordKind::Trunc,
                None => RecordKind::SetAttr,
            };
            Change::new(kind, *fid, Fid::default(), b"")
        }
        MdsOp::SetXattr { fid, name, .. } | MdsOp::RemoveXattr { fid, name } => {
            let mut c = Change::new(RecordKind::Xattr, *fid, Fid::default(), b"");
            c.xattr = name.clone();
            c
        }
        MdsOp::SetLayout { fid, .. } | MdsOp::RelayoutSwap { fid } => {
            Change::new(RecordKind::Layout, *fid, Fid::default(), b"")
        }
        _ => return,
    };
    note(tx, &origin, change);
}

/// Records the close of a handle open for writing of `fid` by `call` in `tx`.
pub fn note_close(tx: &mut Tx<'_>, call: &MdsCall, fid: Fid, written: bool) {
    let mut c = Change::new(RecordKind::Close, fid, Fid::default(), b"");
    if written {
        c.flags |= FLAG_WRITTEN;
    }
    note(tx, &Origin::of(call), c);
}
