//! Where a metadata request goes: the MDT of its inode or parent directory, and in a
//! striped directory the shard its name hashes to.

use crate::*;
use nacre_types::dirstripe::DirStripe;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use std::sync::Arc;

impl Client {
    /// Sends an operation to the MDT that holds it: the parent directory's (its shard's, in
    /// a striped directory) for name operations, the inode's otherwise (a FID names its MDT).
    pub(crate) fn md(&self, mut op: MdsOp) -> Result<MdsReply> {
        self.to_shards(&mut op)?;
        let index = op.key_fid().map_or(0, Fid::mdt_index);
        self.mdc(index)?.call(op)
    }

    /// The stripe layout of directory `dir` (None: not striped), cached.
    pub fn dir_stripe(&self, dir: Fid) -> Result<Option<Arc<DirStripe>>> {
        if let Some(s) = self.stripes.read().get(&dir) {
            return Ok(s.clone());
        }
        let op = MdsOp::GetDirStripe { fid: dir };
        let stripe = match self.mdc(dir.mdt_index())?.call(op)? {
            MdsReply::DirStripe(s) => s.map(Arc::new),
            _ => return Err(Status::Proto.into()),
        };
        let mut map = self.stripes.write();
        if map.len() >= STRIPE_CACHE_ENTRIES_MAX {
            map.clear();
        }
        map.insert(dir, stripe.clone());
        Ok(stripe)
    }

    /// The directory that holds `name` of `dir`: its shard if `dir` is striped.
    pub(crate) fn shard_of(&self, dir: Fid, name: &[u8]) -> Result<Fid> {
        if name == b"." || name == b".." {
            return Ok(dir);
        }
        Ok(match self.dir_stripe(dir)? {
            Some(s) => s.shard_for(name),
            None => dir,
        })
    }

    /// Points a name operation at the shard that holds the name.
    pub(crate) fn to_shards(&self, op: &mut MdsOp) -> Result<()> {
        match op {
            MdsOp::Lookup { parent, name }
            | MdsOp::Create { parent, name, .. }
            | MdsOp::Mkdir { parent, name, .. }
            | MdsOp::MkdirOn { parent, name, .. }
            | MdsOp::MkdirStriped { parent, name, .. }
            | MdsOp::Symlink { parent, name, .. }
            | MdsOp::Link { parent, name, .. }
            | MdsOp::Unlink { parent, name }
            | MdsOp::Rmdir { parent, name } => *parent = self.shard_of(*parent, name)?,
            MdsOp::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                ..
            } => {
                *src_parent = self.shard_of(*src_parent, src_name)?;
                *dst_parent = self.shard_of(*dst_parent, dst_name)?;
            }
            _ => {}
        }
        Ok(())
    }
}
