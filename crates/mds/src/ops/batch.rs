//! Creates of many files and directories in one directory with FIDs the client gave them
//! ([`nacre_wire::mds::MdsOp::CreateBatch`]): one transaction, one transno.

use crate::mdt::{check_name, Tx};
use nacre_mdstore::store::tx::ReplayHint;
use nacre_net::fault;
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Attr, FileKind, Layout, Status, TimeSpec};
use nacre_wire::mds::{
    BatchCreate, MdsReply, BATCH_TIME_SKEW_MS_MAX, CREATE_BATCH_DATA_BYTES_MAX,
    CREATE_BATCH_ITEMS_MAX, CREATE_DATA_BYTES_MAX,
};

/// Largest reply a batch gives (a frame's body, less room for its envelope).
pub const REPLY_BYTES_MAX: usize = nacre_types::limits::BODY_BYTES_MAX as usize - 64 * 1024;

/// Makes `items` in `parent`; `replayed`: the FIDs and layouts they had when the batch ran
/// before a restart of the MDT (empty if it is not a replay). Each item is checked as a
/// create (a directory: a mkdir) of the transaction's credentials would be; one that fails
/// is answered its error and changes nothing, the others are made. Items past what fits a
/// reply of [`REPLY_BYTES_MAX`] are left untried, each answered `E2BIG`.
pub fn run(
    tx: &mut Tx<'_>,
    parent: nacre_types::Fid,
    items: &[BatchCreate],
    replayed: &[ReplayHint],
) -> Result<MdsReply, Status> {
    if items.is_empty() || items.len() > CREATE_BATCH_ITEMS_MAX {
        return Err(Status::Inval);
    }
    // Each item reads the store as it was before the batch: a name twice would be made
    // twice (the second entry hiding the first inode).
    if repeats(items.iter().map(|i| &i.name[..])) {
        return Err(Status::Inval);
    }
    let mut dir = tx.dir(parent)?;
    // Answered already by the delegation's holder (or acknowledged before a restart): its
    // files count against the quotas and are never refused for them (delegations.rs).
    let answered = tx.forced_transno.is_some() || delegation_held(tx.mdt, &tx.client, parent);
    // Directories are made only where the MDT's own mkdir would make a plain one here: no
    // default directory striping (a delegation says so: execute.rs `delegable`, and a
    // change of the default by another client waits for it: locks.rs `park_read`).
    let plain_mkdirs = crate::ops::dir_stripe::dir_default(tx.mdt, parent)?.is_none();
    let mut results = Vec::with_capacity(items.len());
    let (mut made, mut subdirs) = (0, 0);
    let (mut reply_bytes, mut item_bytes_max) = (0usize, 0usize);
    for item in items {
        // Widely striped layouts: the rest would not fit the reply. Left untried, each
        // answered `E2BIG`: the client sends them again in its next batch.
        if reply_bytes + item_bytes_max > REPLY_BYTES_MAX {
            results.push(Err(Status::TooBig));
            continue;
        }
        let r = match item.kind {
            FileKind::Regular => create_one(tx, &dir, item, replayed, answered),
            FileKind::Directory if !plain_mkdirs => Err(Status::NotSupp),
            FileKind::Directory if !item.data.is_empty() => Err(Status::Inval),
            FileKind::Directory if dir.attr.nlink + subdirs >= super::mkdir::DIR_NLINK_MAX => {
                Err(Status::MLink)
            }
            FileKind::Directory => create_one(tx, &dir, item, replayed, answered),
            _ => Err(Status::Inval),
        };
        made += usize::from(r.is_ok());
        subdirs += u32::from(r.is_ok() && item.kind == FileKind::Directory);
        let bytes = match &r {
            Ok(made) => nacre_wire::encode_body(made).len(),
            Err(_) => 8,
        };
        item_bytes_max = item_bytes_max.max(bytes);
        reply_bytes += bytes;
        results.push(r);
    }
    if made > 0 {
        let latest = items
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .filter_map(|(i, _)| client_time(tx.now, i.time))
            .max();
        // Each new subdirectory's ".." links it.
        dir.attr.nlink += subdirs;
        date_dir(tx, &mut dir, latest);
    }
    // Everything made, nothing committed: a kill here loses the whole batch, which the
    // client (never answered) sends again.
    fault::point("mds.batch.made");
    Ok(MdsReply::Created(results))
}

fn create_one(
    tx: &mut Tx<'_>,
    dir: &nacre_mdstore::records::InodeRecord,
    item: &BatchCreate,
    replayed: &[ReplayHint],
    answered: bool,
) -> Result<(Attr, Option<Layout>), Status> {
    // The FID is the client's to give: one of its grants, never given before. Taken
    // first: a FID sent is spent, whatever becomes of its item.
    tx.take_granted_fid(item.fid)?;
    check_name(&item.name)?;
    if tx.lookup(dir.attr.fid, &item.name)?.is_some() {
        return Err(Status::Exist);
    }
    if !tx.cred.is_root() {
        super::create::claims(&tx.cred, &dir.attr, item.uid, item.gid)?;
    }
    // A replay names the layout its file had (its objects may hold data written since).
    let hint = replayed.iter().find(|(f, _)| *f == item.fid).cloned();
    match &hint {
        Some(h) => tx.replay = Some(h.clone()),
        None => tx.given_fid = Some(item.fid),
    }
    let made = match item.kind {
        FileKind::Directory => make_dir(tx, dir, item, answered),
        _ => make(tx, dir, item, answered),
    };
    tx.replay = None;
    tx.given_fid = None;
    made
}

/// True if `client` holds (or is giving back) the delegation of `dir`: the creates it
/// sends there were answered under it (crate::delegations).
pub(crate) fn delegation_held(
    mdt: &crate::mdt::Mdt,
    client: &[u8; 16],
    dir: nacre_types::Fid,
) -> bool {
    use std::sync::atomic::Ordering;
    mdt.delegated.load(Ordering::Acquire)
        && mdt
            .ldlm
            .holds_or_cancels(client, &dir, |bits| bits & nacre_ldlm::msg::DELEGATION != 0)
}

/// How many bytes from byte 0 a file made in `dir` by a batch may carry
/// ([`nacre_wire::mds::BatchCreate::data`]): the length of the component on the MDT its
/// layout starts with (from the directory's default over the file system's, as
/// `Tx::new_layout` makes it), at most [`CREATE_DATA_BYTES_MAX`]; 0 where it starts on OSTs
/// or the MDT enforces a block quota on its bytes (a write past a limit could not be
/// refused once answered).
pub(crate) fn data_bytes_max(
    mdt: &crate::mdt::Mdt,
    dir: &nacre_mdstore::records::InodeRecord,
) -> Result<u32, Status> {
    use nacre_types::layout::ComponentKind;
    if mdt.dom_quota.any_limited() {
        return Ok(0);
    }
    let requests = crate::placement::new_file_requests(mdt, dir)?;
    Ok(match requests.first() {
        Some(r) if r.kind == ComponentKind::Mdt && r.start == 0 => {
            r.end.min(CREATE_DATA_BYTES_MAX as u64) as u32
        }
        _ => 0,
    })
}

/// Records that a batch changed `dir`: when its client answered the last change it made
/// (`latest`, as it told its callers; never earlier than the directory's time), or now.
pub(crate) fn date_dir(
    tx: &mut Tx<'_>,
    dir: &mut nacre_mdstore::records::InodeRecord,
    latest: Option<TimeSpec>,
) {
    let before = dir.attr.mtime;
    tx.touch(dir);
    if let Some(t) = latest {
        dir.attr.mtime = t.max(before);
        dir.attr.ctime = dir.attr.mtime;
    }
    tx.put_inode(dir);
}

/// True if one of `keys` comes twice.
pub(crate) fn repeats<'a>(keys: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut seen = std::collections::HashSet::new();
    keys.into_iter().any(|k| !seen.insert(k))
}

/// True unless `op` is a batch of no item or of more than its bounds (items, bytes).
pub(crate) fn within_bounds(op: &nacre_wire::mds::MdsOp) -> bool {
    use nacre_wire::mds::{MdsOp, ACCESS_BATCH_ITEMS_MAX, UNLINK_BATCH_ITEMS_MAX};
    match op {
        MdsOp::CreateBatch { items, .. } => {
            (1..=CREATE_BATCH_ITEMS_MAX).contains(&items.len())
                && items.iter().all(|i| i.data.len() <= CREATE_DATA_BYTES_MAX)
                && items.iter().map(|i| i.data.len()).sum::<usize>() <= CREATE_BATCH_DATA_BYTES_MAX
        }
        MdsOp::UnlinkBatch { items, .. } => (1..=UNLINK_BATCH_ITEMS_MAX).contains(&items.len()),
        MdsOp::AccessBatch { items } => (1..=ACCESS_BATCH_ITEMS_MAX).contains(&items.len()),
        _ => true,
    }
}

/// `time` (a client's) if valid and within [`BATCH_TIME_SKEW_MS_MAX`] of `now`.
pub(crate) fn client_time(now: TimeSpec, time: TimeSpec) -> Option<TimeSpec> {
    let ms = |t: TimeSpec| i128::from(t.sec) * 1000 + i128::from(t.nsec / 1_000_000);
    let skew = (ms(now) - ms(time)).unsigned_abs();
    (time.nsec < 1_000_000_000 && skew <= u128::from(BATCH_TIME_SKEW_MS_MAX)).then_some(time)
}

/// A directory `item` in `dir`, as `ops::mkdir::run` makes one (the caller links it in
/// `dir`'s count).
fn make_dir(
    tx: &mut Tx<'_>,
    dir: &nacre_mdstore::records::InodeRecord,
    item: &BatchCreate,
    answered: bool,
) -> Result<(Attr, Option<Layout>), Status> {
    let mut rec = new_inode(tx, dir, FileKind::Directory, item);
    rec.parent = Some(dir.attr.fid);
    // Its parent's default layout, as `ops::mkdir::run` gives it (the root's is the file
    // system's, followed as it changes).
    if dir.attr.fid != nacre_types::Fid::ROOT {
        rec.dir_default = dir.dir_default.clone();
    }
    count(tx, &rec.attr, answered)?;
    tx.put_inode(&rec);
    tx.put_dirent(dir.attr.fid, &item.name, rec.attr.fid, FileKind::Directory);
    Ok((rec.attr, None))
}

/// The inode of `item` (of `kind`) in `dir`, dated when its client answered it unless its
/// clock is far from ours.
fn new_inode(
    tx: &mut Tx<'_>,
    dir: &nacre_mdstore::records::InodeRecord,
    kind: FileKind,
    item: &BatchCreate,
) -> nacre_mdstore::records::InodeRecord {
    let perm = item.perm & 0o7777;
    let mut rec = super::create::new_inode(tx, dir, kind, perm, item.uid, item.gid);
    if let Some(t) = client_time(tx.now, item.time) {
        (rec.attr.atime, rec.attr.mtime, rec.attr.ctime) = (t, t, t);
    }
    rec
}

/// Counts a new inode against its owners' quotas: never refused if its client answered it
/// already (delegations.rs), else stopped where the quota master refuses the id.
fn count(tx: &mut Tx<'_>, attr: &Attr, answered: bool) -> Result<(), Status> {
    match answered {
        true => tx.count_answered_inode(attr),
        false => tx.count_inodes(attr, 1)?,
    }
    Ok(())
}

fn make(
    tx: &mut Tx<'_>,
    dir: &nacre_mdstore::records::InodeRecord,
    item: &BatchCreate,
    answered: bool,
) -> Result<(Attr, Option<Layout>), Status> {
    let mut rec = new_inode(tx, dir, FileKind::Regular, item);
    // Object ids allocated for nothing if it fails after are only skipped.
    let layout = tx.new_layout(dir, &LayoutSpec::plain(StripeSpec::default()), 0)?;
    // The bytes its creator wrote: only below the component on the MDT the file starts
    // with (the client was told how many may come: `data_bytes_max`), and, sent by a
    // client that answered nothing here, not past a block quota (nothing reserved them).
    let data = &item.data;
    if !data.is_empty() {
        if data.len() as u64 > layout.dom_end().min(CREATE_DATA_BYTES_MAX as u64) {
            return Err(Status::Inval);
        }
        if !answered && tx.mdt.dom_quota.any_limited() {
            return Err(Status::DQuot);
        }
    }
    // Counted (and an id the quota master refused stopped, unless the file was answered
    // already) before anything is written.
    count(tx, &rec.attr, answered)?;
    if !data.is_empty() {
        // As a `DomWrite` by its creator (ops/dom.rs): the size, the blocks, and set-id
        // bits cleared for a writer other than root.
        tx.put_dom(&rec.attr, 0, data);
        let a = &mut rec.attr;
        a.size = data.len() as u64;
        a.blocks = nacre_mdstore::records::dom_charged_bytes(data.len()) / 512;
        if !tx.cred.is_root() && nacre_types::attr::has_setid(a.perm) {
            let in_group = tx.cred.in_group(a.gid);
            a.perm = nacre_types::attr::kill_privs(a.perm, in_group);
        }
    }
    rec.layout = Some(layout.clone());
    tx.put_inode(&rec);
    tx.put_dirent(dir.attr.fid, &item.name, rec.attr.fid, FileKind::Regular);
    if tx.replay.is_none() && tx.forced_transno.is_none() {
        let a = &rec.attr;
        tx.mdt.sizes.created_sized(a.fid, a.size, a.blocks);
    }
    Ok((rec.attr, Some(layout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's time is taken only near the MDT's clock: a forged one far away (or not a
    /// time) gives the MDT's own.
    #[test]
    fn a_clients_time_is_taken_only_near_the_mdts_clock() {
        let now = TimeSpec {
            sec: 1_000_000,
            nsec: 500,
        };
        let at = |sec, nsec| TimeSpec { sec, nsec };
        assert_eq!(client_time(now, at(1_000_059, 0)), Some(at(1_000_059, 0)));
        assert_eq!(client_time(now, at(999_941, 0)), Some(at(999_941, 0)));
        assert_eq!(client_time(now, at(999_939, 0)), None, "61 s before");
        assert_eq!(client_time(now, at(1_000_061, 0)), None, "61 s after");
        assert_eq!(client_time(now, at(1_000_000, 1_000_000_000)), None);
        assert_eq!(client_time(now, at(i64::MIN, 0)), None);
        assert_eq!(client_time(now, at(i64::MAX, 999_999_999)), None);
    }
}
