//! `mkdir -i N` (a remote directory: its inode on another MDT than its entry) and `mkdir -i -1`
//! placement over the MDTs (round-robin or by free inodes).

use crate::dne::{coordinate, saved_reply};
use crate::mdt::{Mdt, Placement, Tx};
use crate::peers::{mdt_list, peer_call};
use nacre_mdstore::records::IntentRecord;
use nacre_net::Outgoing;
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};

/// Picks the MDT for a new directory of `mkdir -i -1`: free inodes are asked of every MDT
/// at each placement (one small RPC each; no cache yet).
pub fn choose_mdt(mdt: &Mdt) -> Result<u32, Status> {
    let indexes = mdt_list(mdt, 2);
    let rr = || {
        let n = mdt
            .mkdir_rr
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        indexes[n % indexes.len()]
    };
    if mdt.mkdir_placement() == Placement::RoundRobin {
        return Ok(rr());
    }
    let mut free = Vec::with_capacity(indexes.len());
    for &i in &indexes {
        let st = if i == mdt.label.index {
            mdt.statfs()?
        } else {
            match peer_call(mdt, i, MdsOp::StatFs) {
                Ok(MdsReply::StatFs(s)) => s,
                // An MDT that does not answer takes no new directories.
                _ => nacre_types::StatFs::default(),
            }
        };
        free.push(st.files_free);
    }
    let max = *free.iter().max().expect("at least this MDT");
    let min = *free.iter().min().expect("at least this MDT");
    if max == 0 {
        return Err(Status::NoSpc);
    }
    if (max - min) * 100 <= max * crate::osp::QOS_THRESHOLD_PERCENT {
        return Ok(rr());
    }
    Ok(crate::osp::weighted_pick(&indexes, &free, 1)[0])
}

/// What a new directory is asked to be (mkdir's arguments).
pub struct NewDir<'a> {
    /// Parent directory (on this MDT).
    pub parent: Fid,
    /// Name.
    pub name: &'a [u8],
    /// Permission bits.
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Default for its own new subdirectories (inherited from the parent's).
    pub inherit: Option<nacre_types::dirstripe::DirDefault>,
}

/// Reserves a FID on MDT `index` (this one included, through the same request).
pub(crate) fn alloc_on(mdt: &Mdt, index: u32) -> Result<Fid, Status> {
    match peer_call(mdt, index, MdsOp::AllocFid)? {
        MdsReply::Fid(f) if f.mdt_index() == index => Ok(f),
        _ => Err(Status::Proto),
    }
}

/// Coordinator: `mkdir` of a directory whose inode lives on MDT `target`.
pub fn mkdir_remote(mdt: &Mdt, call: &MdsCall, xid: u64, dir: NewDir<'_>, target: u32) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    let fid = match alloc_on(mdt, target) {
        Ok(f) => f,
        Err(s) => return Outgoing::error(s),
    };
    coordinate(
        mdt,
        call,
        xid,
        "mds.mkdir_remote.after_local_commit",
        |tx| mkdir_local(tx, &dir, fid, target, None).map(|(r, i)| (r, vec![i])),
    )
}

/// The local half of a new directory `fid` on MDT `target` (the master of a striped one
/// with `stripe`): the entry here, the parent's link, and the intent creating the inode.
pub(crate) fn mkdir_local(
    tx: &mut Tx<'_>,
    dir: &NewDir<'_>,
    fid: Fid,
    target: u32,
    stripe: Option<nacre_types::dirstripe::DirStripe>,
) -> Result<(MdsReply, IntentRecord), Status> {
    let (parent_fid, name) = (dir.parent, dir.name);
    let mut parent = crate::ops::mkdir::check_new(tx, parent_fid, name)?;
    let mut rec = crate::ops::create::inode_with_fid(
        tx,
        &parent,
        FileKind::Directory,
        dir.perm,
        dir.uid,
        dir.gid,
        fid,
    );
    if stripe.is_some() {
        // A master holds no entries itself; 1 is the "links not counted" convention, so
        // tools do not infer its subdirectory count from it.
        rec.attr.nlink = 1;
    }
    parent.attr.nlink += 1;
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_dirent(parent_fid, name, fid, FileKind::Directory);
    // Files in the new directory get the striping they would get here.
    // (The file system's default lives on MDT0, which the new directory's MDT may not be.)
    let effective = LayoutSpec::for_new_file(
        &LayoutSpec::plain(StripeSpec::default()),
        parent.dir_default.as_ref(),
        tx.fs_default()?.as_ref(),
    );
    let intent = IntentRecord {
        key: fid,
        mdt: target,
        update: RemoteUpdate::CreateDir {
            attr: rec.attr.clone(),
            parent: parent_fid,
            dir_default: (effective != LayoutSpec::plain(StripeSpec::default()))
                .then_some(effective),
            stripe,
            default: dir.inherit,
        },
        parent: parent_fid,
        name: name.to_vec(),
        reply_to: None,
        shards: Vec::new(),
        attr: None,
        migrate_to: None,
    };
    Ok((
        MdsReply::Entry {
            attr: rec.attr,
            layout: None,
            size_exact: false,
        },
        intent,
    ))
}
