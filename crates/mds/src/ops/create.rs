//! Create: a regular file (with its layout), device node, fifo or socket.

use crate::mdt::{check_name, Tx};
use nacre_mdstore::records::InodeRecord;
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Attr, Cred, Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// Arguments of a create.
pub struct CreateArgs<'a> {
    /// Directory.
    pub parent: Fid,
    /// Name.
    pub name: &'a [u8],
    /// Kind.
    pub kind: FileKind,
    /// Permission bits.
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number.
    pub rdev: u32,
    /// O_EXCL.
    pub exclusive: bool,
    /// Register an opener.
    pub open: bool,
    /// The access the opener wants (a writer if it asks to write).
    pub access: u8,
}

/// Builds a new inode under `parent`, applying set-group-id inheritance.
pub fn new_inode(
    tx: &mut Tx<'_>,
    parent: &InodeRecord,
    kind: FileKind,
    perm: u32,
    uid: u32,
    gid: u32,
) -> InodeRecord {
    let fid = tx.new_fid();
    inode_with_fid(tx, parent, kind, perm, uid, gid, fid)
}

/// [`new_inode`] with a FID allocated elsewhere (by the MDT that will hold the inode, for a
/// remote directory).
pub fn inode_with_fid(
    tx: &Tx<'_>,
    parent: &InodeRecord,
    kind: FileKind,
    perm: u32,
    uid: u32,
    gid: u32,
    fid: Fid,
) -> InodeRecord {
    let sgid_parent = parent.attr.perm & libc::S_ISGID != 0;
    let gid = if sgid_parent { parent.attr.gid } else { gid };
    let mut perm = perm & 0o7777;
    if sgid_parent && kind == FileKind::Directory {
        perm |= libc::S_ISGID;
    }
    InodeRecord {
        attr: Attr {
            fid,
            kind,
            perm,
            uid,
            gid,
            nlink: if kind == FileKind::Directory { 2 } else { 1 },
            size: if kind == FileKind::Directory { 4096 } else { 0 },
            blocks: 0,
            atime: tx.now,
            mtime: tx.now,
            ctime: tx.now,
            rdev: 0,
            // A parent that passes its project on gives it, and to a directory the
            // inheritance too (Lustre's PROJINHERIT).
            project: if parent.attr.proj_inherit {
                parent.attr.project
            } else {
                0
            },
            proj_inherit: parent.attr.proj_inherit && kind == FileKind::Directory,
        },
        layout: None,
        dir_default: None,
        symlink: None,
        parent: None,
        orphan: false,
    }
}

/// Set-group-id (`S_ISGID`).
const SGID: u32 = 0o2000;

/// `Ok` if `ok`, else `denied` (the permission checks' way of saying no; perm.rs).
pub(crate) fn allow(ok: bool, denied: Status) -> Result<(), Status> {
    if ok {
        Ok(())
    } else {
        Err(denied)
    }
}

/// A new inode's owner and group as the caller asks them: its own uid, and a group it is in
/// (a set-group-id directory gives its own group whatever is asked).
pub(crate) fn claims(cred: &Cred, dir: &Attr, uid: u32, gid: u32) -> Result<(), Status> {
    let gid_ok = cred.in_group(gid) || dir.perm & SGID != 0;
    allow(uid == cred.uid && gid_ok, Status::Perm)
}

/// Creates the file, or with `exclusive == false` returns the existing one.
pub fn run(tx: &mut Tx<'_>, args: CreateArgs<'_>) -> Result<MdsReply, Status> {
    check_name(args.name)?;
    if args.kind == FileKind::Directory || args.kind == FileKind::Symlink {
        return Err(Status::Inval);
    }
    let mut parent = tx.dir(args.parent)?;
    if let Some(existing) = tx.lookup(args.parent, args.name)? {
        if args.exclusive {
            return Err(Status::Exist);
        }
        let rec = tx.inode(existing.fid)?;
        if rec.attr.kind == FileKind::Directory {
            return Err(Status::IsDir);
        }
        // Only a regular file is opened in place of a create: a symlink, device, fifo or
        // socket made under the name since the caller looked it up is there already (the
        // kernel could not open it from a create's reply: it would fail with EIO).
        if rec.attr.kind != FileKind::Regular || args.kind != FileKind::Regular {
            return Err(Status::Exist);
        }
        // Checked again here, under the transaction: the name may name another file than
        // when the permission check ran.
        let a = &rec.attr;
        let may = nacre_types::cred::permits(&tx.cred, a.perm, a.uid, a.gid, false, args.access);
        if args.open && !tx.cred.is_root() && !may {
            return Err(Status::Access);
        }
        let reply = super::exact_entry(tx.mdt, super::entry(&rec));
        if args.open {
            let writer = args.access & nacre_types::cred::MAY_WRITE != 0;
            tx.mdt.add_open(&tx.client, rec.attr.fid, args.access);
            tx.mdt.sizes.opened(rec.attr.fid, &tx.client, writer);
        }
        return Ok(reply);
    }
    // What the permission check saw may have gone since (a name unlinked): what a new inode
    // needs is checked again where it is made.
    if !tx.cred.is_root() {
        if matches!(args.kind, FileKind::CharDevice | FileKind::BlockDevice) {
            return Err(Status::Perm);
        }
        claims(&tx.cred, &parent.attr, args.uid, args.gid)?;
    }
    let mut rec = new_inode(tx, &parent, args.kind, args.perm, args.uid, args.gid);
    rec.attr.rdev = args.rdev;
    if args.kind == FileKind::Regular {
        rec.layout = Some(tx.new_layout(&parent, &LayoutSpec::plain(StripeSpec::default()), 0)?);
    }
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_inode(&rec);
    tx.put_dirent(args.parent, args.name, rec.attr.fid, args.kind);
    tx.count_inodes(&rec.attr, 1)?;
    // A new file is exactly empty; a replayed one is not: its objects may hold what was
    // written to it before the MDT lost its creation.
    if args.kind == FileKind::Regular && tx.replay.is_none() && tx.forced_transno.is_none() {
        tx.mdt.sizes.created(rec.attr.fid);
    }
    let reply = super::exact_entry(tx.mdt, super::entry(&rec));
    if args.open {
        let writer = args.access & nacre_types::cred::MAY_WRITE != 0;
        tx.mdt.add_open(&tx.client, rec.attr.fid, args.access);
        tx.mdt.sizes.opened(rec.attr.fid, &tx.client, writer);
    }
    Ok(reply)
}
