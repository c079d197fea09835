//! One file per metadata operation. Read-only operations take the MDT; modifying ones take a
//! [`crate::mdt::Tx`], add their changes to its batch only after every check has passed, and
//! return the reply to save with them.

pub mod create;
pub mod getattr;
pub mod layout;
pub mod link;
pub mod lookup;
pub mod mkdir;
pub mod open;
pub mod readdir;
pub mod readlink;
pub mod rename;
pub mod rmdir;
pub mod scan;
pub mod setattr;
pub mod symlink;
pub mod unlink;
pub mod xattr;

use crate::records::InodeRecord;
use nacre_wire::mds::MdsReply;

/// The reply describing an inode: attributes plus a regular file's layout.
pub fn entry(rec: &InodeRecord) -> MdsReply {
    MdsReply::Entry {
        attr: rec.attr.clone(),
        layout: rec.layout.clone(),
    }
}
