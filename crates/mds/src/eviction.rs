//! Eviction and the end of exports (export.rs keeps the table): clients evicted when silent,
//! when a lock callback goes unanswered or when their key is revoked, a client's disconnect,
//! and the reopen of its files after a restart.

use crate::export::client_name;
use crate::mdt::Mdt;
use nacre_types::{Fid, Status};
use nacre_wire::mds::ReopenEntry;
use std::collections::HashMap;

/// Evicts `client` now, whatever it last sent (it failed to answer a lock callback in
/// time, `why`): as [`evict_silent`] does, its opens are dropped and its saved replies
/// deleted, and its later requests are answered `ESHUTDOWN`. Its locks are gone already.
pub fn evict_now(mdt: &Mdt, client: &[u8; 16], why: &str) {
    if mdt.osts.is_peer(client) {
        return;
    }
    let Some((_, opens)) = mdt.exports.evict(client, true) else {
        // Unknown here (never sent a request, or evicted already): refuse it anyway.
        mdt.exports.refuse(client);
        return;
    };
    mdt.ldlm.evict(client);
    mdt.flocks.client_gone(client);
    let handles: u32 = opens.values().sum();
    tracing::warn!(
        "{}: evicting client {} ({why}): {handles} open handles dropped",
        mdt.label.name(),
        uuid::Uuid::from_bytes(*client),
    );
    if let Err(e) = release(mdt, client, &opens) {
        tracing::warn!(
            "{}: releasing an evicted client's opens: {e:?}",
            mdt.label.name()
        );
    }
}

/// Evicts the clients of `mdt` whose client key was revoked (`nacre nodemap revoke_key`):
/// their locks go at once, so other clients do not wait for callbacks a client that can no
/// longer connect will never answer. Returns how many were evicted.
pub fn evict_revoked(mdt: &Mdt) -> usize {
    let set = nacre_wire::nodemap::active();
    if set.revoked.is_empty() {
        return 0;
    }
    let tenants = nacre_net::caller::revoked_tenants(&set, nacre_types::fs_slot(&mdt.label.fsname));
    let clients = mdt.exports.owned_by(&tenants);
    for c in &clients {
        evict_now(mdt, c, "its key is revoked");
    }
    clients.len()
}

/// Evicts the clients of `mdt` silent for longer than its timeout: drops their opens (an
/// unlinked file whose last opener was one of them is removed) and deletes their saved
/// replies. Returns how many were evicted.
pub fn evict_silent(mdt: &Mdt) -> Result<usize, Status> {
    let silent = mdt.exports.silent();
    if silent.is_empty() {
        return Ok(0);
    }
    // Peer MDTs call as clients too, but are never evicted (their saved replies carry
    // cross-MDT operations): learn the file system's MDTs before judging.
    if silent.iter().any(|c| !mdt.osts.is_peer(c)) {
        if let Err(e) = mdt.osts.refresh() {
            tracing::debug!("{}: MGS refresh before eviction: {e}", mdt.label.name());
        }
    }
    let mut evicted = 0;
    for client in &silent {
        if mdt.osts.is_peer(client) {
            let _ = mdt.exports.forget(client);
            continue;
        }
        let Some((quiet, opens)) = mdt.exports.evict(client, false) else {
            continue;
        };
        mdt.ldlm.evict(client);
        mdt.flocks.client_gone(client);
        evicted += 1;
        let handles: u32 = opens.values().sum();
        tracing::warn!(
            "{}: evicting client {} (silent {} ms): {handles} open handles dropped",
            mdt.label.name(),
            uuid::Uuid::from_bytes(*client),
            quiet.as_millis()
        );
        release(mdt, client, &opens)?;
    }
    Ok(evicted)
}

/// `client` re-registers the files it holds open (Lustre's open replay, after the MDT
/// restarted): the opens its export lacks are added, for files that still exist. A handle
/// it says was opened for writing is taken back as one only if `cred` (the client's, as
/// its nodemap maps it) may write the file now: a reopen never grants what an open would
/// refuse (one refused comes back as a reader, and a truncate through it is refused).
pub fn reopen(
    mdt: &Mdt,
    client: &[u8; 16],
    cred: &nacre_types::Cred,
    opens: &[ReopenEntry],
) -> Result<(), Status> {
    let mut added = 0;
    let mut demoted = 0;
    for r in mdt.exports.missing_opens(client, opens) {
        match mdt.inode(r.fid) {
            Ok(rec) => {
                let a = &rec.attr;
                let may = |want| {
                    nacre_types::cred::permits(
                        cred,
                        a.perm,
                        a.uid,
                        a.gid,
                        a.kind == nacre_types::FileKind::Directory,
                        want,
                    )
                };
                let (may_read, may_write) = (
                    may(nacre_types::cred::MAY_READ),
                    may(nacre_types::cred::MAY_WRITE),
                );
                if !may_read && !may_write {
                    // An open it could not make now is not taken back (nor can it keep an
                    // unlinked file, or get capabilities for it).
                    demoted += r.handles;
                    continue;
                }
                let writers = if may_write { r.writers } else { 0 };
                demoted += r.writers - writers;
                let read = if may_read {
                    nacre_types::cred::MAY_READ
                } else {
                    0
                };
                for i in 0..r.handles {
                    let write = if i < writers {
                        nacre_types::cred::MAY_WRITE
                    } else {
                        0
                    };
                    mdt.add_open(client, r.fid, read | write);
                    mdt.sizes.reopened(r.fid, client);
                }
                added += r.handles;
            }
            Err(Status::NoEnt) => {}
            Err(e) => return Err(e),
        }
    }
    if added > 0 {
        tracing::info!(
            "{}: client {} reopened {added} handles",
            mdt.label.name(),
            client_name(client)
        );
    }
    if demoted > 0 {
        tracing::warn!(
            "{}: client {} reopened {demoted} handles its credentials may not open so now: \
             reopened for less, or not at all",
            mdt.label.name(),
            client_name(client)
        );
    }
    Ok(())
}

/// `client` disconnects (unmount): its export ends now, with its opens and saved replies.
/// Its uuid is not refused later (a client that comes back is a new export).
pub fn disconnect(mdt: &Mdt, client: &[u8; 16]) -> Result<(), Status> {
    let opens = mdt.exports.forget(client);
    mdt.ldlm.evict(client);
    mdt.flocks.client_gone(client);
    tracing::info!(
        "{}: client {} disconnected ({} open handles dropped)",
        mdt.label.name(),
        client_name(client),
        opens.values().sum::<u32>()
    );
    release(mdt, client, &opens)
}

/// Drops `opens` of `client` (removing orphans whose last opener it was; the files it held
/// open for writing take now as their modification time) and its saved replies, in one
/// commit.
fn release(mdt: &Mdt, client: &[u8; 16], opens: &HashMap<Fid, u32>) -> Result<(), Status> {
    let committed = release_opens(mdt, client, opens);
    // It leaves the writers once the new times are committed (as a close does, route.rs):
    // another client's UPDATE lock, granted only when no other client writes the file,
    // reads them.
    let mut glimpse = false;
    for fid in opens.keys() {
        glimpse |= mdt.sizes.client_gone(*fid, client).unwrap_or(false);
    }
    if glimpse {
        mdt.kick_destroyer();
    }
    committed
}

/// The store's part of [`release`].
fn release_opens(mdt: &Mdt, client: &[u8; 16], opens: &HashMap<Fid, u32>) -> Result<(), Status> {
    let mut tx = mdt.begin();
    for (fid, n) in opens {
        for _ in 0..*n {
            crate::ops::open::close(&mut tx, *fid, false)?;
        }
        // A writer gone: whatever it wrote came before now (as at its close).
        if mdt.sizes.writes(*fid, client) {
            crate::ops::open::touch_written(&mut tx, *fid)?;
        }
    }
    // Its saved replies: nothing will ask for them again; a restart need not wait for it.
    tx.forget_saved_replies(client);
    tx.forget_client(client);
    let destroys = std::mem::take(&mut tx.destroys);
    let ticket = match tx.is_empty() {
        true => None,
        false => Some(tx.commit()?),
    };
    drop(tx);
    match ticket {
        Some(t) => mdt.queue_destroys_when_synced(t, false, destroys),
        None => mdt.queue_destroys(destroys),
    }
    Ok(())
}
