//! Changelogs (Lustre's): once a consumer registers, every change to this MDT's namespace
//! adds a numbered record **in the same transaction as the change**, so a change and its
//! record are durable together or lost together. A resent request is answered from its saved
//! reply (no second record); a replayed one was lost with the crash, record and all, and
//! writes it once as it runs again. Readers see only durable records, in number order.
//!
//! Registering, clearing and deregistering are durable before their reply (the command
//! that asked may be gone before it could replay them).
//!
//! Records are kept until every registered consumer cleared them. Limits, so a forgotten
//! consumer cannot fill the MDT: a consumer more than `changelog_records_max` records
//! behind the newest is deregistered (and its records freed) by the change that crosses the
//! line; one that has not read or cleared for `changelog_idle_ms_max` while records wait for
//! it is deregistered by the MDT's maintenance pass. Both are logged and counted
//! (`mdt.*.changelog_users`).
//!
//! Tables: `changelog`: number (8, big-endian) → `[1] postcard(ChangelogRecord)`;
//! `changelog_users`: id (4, big-endian) → `[1] postcard(UserRecord)`; `meta`
//! `changelog_next` (the number the next record gets) and `changelog_first` (everything
//! below was freed).
//!
//! This file serves the consumers (register, clear, deregister, read, purge, maintenance);
//! the changelog's state is changelog_state.rs, the records changes add changelog_writer.rs.

use crate::changelog_state::{users_of, User, UserRecord};
use crate::changelog_writer::put_user;
use crate::mdt::{Mdt, Tx};
use nacre_mdstore::records::encode_record;
use nacre_types::Status;
use nacre_wire::mds::changelog::*;
use nacre_wire::mds::MdsReply;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub use crate::changelog_state::{
    decode_user, CHANGELOG_IDLE_MS_MAX_DEFAULT, CHANGELOG_RECORDS_MAX_DEFAULT,
};
pub use nacre_mdstore::records::{CHANGELOG, CHANGELOG_USERS};

/// Records freed per transaction.
const PURGE_CHUNK_RECORDS: u64 = 8192;

/// `ChangelogRegister`: a new consumer, starting after the newest record.
pub fn register(tx: &mut Tx<'_>, name: &str) -> Result<MdsReply, Status> {
    if name.len() > CHANGELOG_USER_NAME_BYTES_MAX || name.contains(char::is_control) {
        return Err(Status::Inval);
    }
    let cl = &tx.mdt.changelog;
    let mut st = cl.state.lock();
    if st.users.len() >= CHANGELOG_USERS_MAX {
        return Err(Status::NoSpc);
    }
    let id = st.users.keys().next_back().map_or(1, |l| l + 1);
    let user = User {
        name: name.to_string(),
        cleared: st.next - 1,
        active: Instant::now(),
    };
    put_user(tx, id, &user);
    tx.durable_before_reply = true;
    st.users.insert(id, user);
    cl.enabled.store(true, Ordering::Release);
    tracing::info!(
        "{}: changelog consumer cl{id} ({name}) registered at record {}",
        tx.mdt.label.name(),
        st.next
    );
    Ok(MdsReply::ChangelogUser(id))
}

/// `ChangelogDeregister`: the consumer goes (its records are freed after the commit).
pub fn deregister(tx: &mut Tx<'_>, id: u32) -> Result<MdsReply, Status> {
    let cl = &tx.mdt.changelog;
    let mut st = cl.state.lock();
    if st.users.remove(&id).is_none() {
        return Err(Status::NoEnt);
    }
    tx.del_changelog_user(id);
    tx.durable_before_reply = true;
    cl.enabled.store(!st.users.is_empty(), Ordering::Release);
    tracing::info!(
        "{}: changelog consumer cl{id} deregistered",
        tx.mdt.label.name()
    );
    Ok(MdsReply::Done)
}

/// `ChangelogClear`: consumer `id` is done with every record up to `upto` (0: all so far).
pub fn clear(tx: &mut Tx<'_>, id: u32, upto: u64) -> Result<MdsReply, Status> {
    let cl = &tx.mdt.changelog;
    let mut st = cl.state.lock();
    let newest = st.next - 1;
    let Some(user) = st.users.get_mut(&id) else {
        return Err(Status::NoEnt);
    };
    let upto = if upto == 0 { newest } else { upto };
    if upto > newest {
        return Err(Status::Inval);
    }
    user.active = Instant::now();
    if upto > user.cleared {
        user.cleared = upto;
        let User { name, cleared, .. } = user;
        let rec = UserRecord {
            name: name.clone(),
            cleared: *cleared,
        };
        tx.put_changelog_user(id, encode_record(&rec));
        tx.durable_before_reply = true;
    }
    Ok(MdsReply::Done)
}

/// `ChangelogRead`: up to `count` durable records from `from` (see
/// [`MdsOp::ChangelogRead`](nacre_wire::mds::MdsOp::ChangelogRead)).
pub fn read(mdt: &Mdt, user: u32, from: u64, count: u32) -> Result<MdsReply, Status> {
    let count = count.clamp(1, CHANGELOG_READ_RECORDS_MAX) as usize;
    // Every record numbered below `next` was committed by a change that held the write
    // lock while it numbered and committed it; wait until they are durable.
    let newest = {
        let _tx = mdt.begin();
        mdt.changelog.state.lock().next - 1
    };
    mdt.store().sync_all()?;
    let from = {
        let mut st = mdt.changelog.state.lock();
        let first = st.first;
        match st.users.get_mut(&user) {
            Some(u) => {
                u.active = Instant::now();
                if from == 0 {
                    u.cleared + 1
                } else {
                    from
                }
            }
            None if user != 0 => return Err(Status::NoEnt),
            None if from == 0 => first,
            None => from,
        }
    };
    let page = mdt.store().changelog_page(from, count)?;
    let mut records = Vec::with_capacity(page.len());
    let mut bytes = 0;
    let mut full = false;
    for (k, v) in page {
        let Ok(index) = <[u8; 8]>::try_from(k.as_slice()).map(u64::from_be_bytes) else {
            tracing::warn!("{}: bad changelog key skipped", mdt.label.name());
            continue;
        };
        if index > newest {
            break;
        }
        if bytes + v.len() > CHANGELOG_READ_BYTES_MAX {
            full = true;
            break;
        }
        bytes += v.len();
        let mut rec: ChangelogRecord = mdt.store().decode(&v)?;
        rec.index = index;
        records.push(rec);
    }
    let next = match records.last() {
        Some(r) if full || records.len() == count => r.index + 1,
        _ => from.max(newest + 1),
    };
    Ok(MdsReply::Changelog { records, next })
}

/// `ChangelogUsers`.
pub fn users(mdt: &Mdt) -> MdsReply {
    let st = mdt.changelog.state.lock();
    MdsReply::ChangelogUsers {
        users: users_of(&st),
        first: st.first,
        next: st.next,
    }
}

/// Frees the records every consumer cleared, a chunk per transaction (called after a clear
/// or deregistration commits, and by the maintenance pass).
pub fn purge(mdt: &Mdt) -> Result<(), Status> {
    loop {
        let (first, end) = {
            let st = mdt.changelog.state.lock();
            let keep_from = st
                .users
                .values()
                .map(|u| u.cleared + 1)
                .min()
                .unwrap_or(st.next);
            (st.first, keep_from.min(st.first + PURGE_CHUNK_RECORDS))
        };
        if end <= first {
            return Ok(());
        }
        let mut w = mdt.store().writes();
        w.purge_changelog(first, end);
        w.commit()?;
        let mut st = mdt.changelog.state.lock();
        st.first = st.first.max(end);
        mdt.changelog
            .freed
            .fetch_add(end - first, Ordering::Relaxed);
    }
}

/// The maintenance pass (every few seconds): deregisters consumers idle past
/// `changelog_idle_ms_max` with records waiting for them, then frees what is cleared.
pub fn maintain(mdt: &Mdt) -> Result<(), Status> {
    let idle_max = mdt.changelog.idle_ms_max.load(Ordering::Relaxed);
    let idle: Vec<u32> = {
        let st = mdt.changelog.state.lock();
        st.users
            .iter()
            .filter(|(_, u)| {
                u.cleared + 1 < st.next && u.active.elapsed().as_millis() as u64 > idle_max
            })
            .map(|(id, _)| *id)
            .collect()
    };
    if !idle.is_empty() {
        let mut tx = mdt.begin();
        for id in idle {
            tracing::warn!(
                "{}: changelog consumer cl{id} idle over {idle_max} ms with records waiting: \
                 deregistered, its records are freed",
                mdt.label.name()
            );
            if deregister(&mut tx, id).is_ok() {
                mdt.changelog.dropped_users.fetch_add(1, Ordering::Relaxed);
            }
        }
        tx.commit()?;
    }
    purge(mdt)
}
