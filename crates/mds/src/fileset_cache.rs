//! What filesets remember per MDT (`Mdt::filesets`; the checks are in fileset.rs): resolved
//! fileset roots and the inodes found inside them, each for [`INSIDE_TTL_MS`].

use nacre_types::Fid;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an inode found inside a fileset is taken to be (a directory renamed out of it
/// stays reachable by FID this long).
pub const INSIDE_TTL_MS: u64 = 2_000;
/// Inodes remembered at once.
const REMEMBERED_MAX: usize = 262_144;

/// Resolved fileset roots and inodes found inside, per MDT.
#[derive(Default)]
pub struct Filesets {
    roots: Mutex<HashMap<String, (Instant, Fid)>>,
    inside: Mutex<HashMap<(Fid, Fid), Instant>>,
}

impl Filesets {
    pub(crate) fn fresh_root(&self, path: &str) -> Option<Fid> {
        let ttl = Duration::from_millis(INSIDE_TTL_MS);
        let roots = self.roots.lock().expect("fileset roots");
        roots
            .get(path)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, f)| *f)
    }

    /// Remembers `fid` as the directory fileset `path` names.
    pub(crate) fn remember_root(&self, path: &str, fid: Fid) {
        let mut roots = self.roots.lock().expect("fileset roots");
        if roots.len() >= 1_024 {
            roots.clear();
        }
        roots.insert(path.to_string(), (Instant::now(), fid));
    }

    pub(crate) fn known_inside(&self, root: Fid, fid: Fid) -> bool {
        let ttl = Duration::from_millis(INSIDE_TTL_MS);
        let inside = self.inside.lock().expect("fileset inodes");
        inside
            .get(&(root, fid))
            .is_some_and(|at| at.elapsed() < ttl)
    }

    pub(crate) fn remember(&self, root: Fid, fids: &[Fid]) {
        let mut inside = self.inside.lock().expect("fileset inodes");
        if inside.len() + fids.len() > REMEMBERED_MAX {
            inside.clear();
        }
        let now = Instant::now();
        for f in fids {
            inside.insert((root, *f), now);
        }
    }
}
