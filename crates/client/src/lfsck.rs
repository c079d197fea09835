//! The namespace checker (`nacre lfsck --namespace`): reads every MDT's inodes and directory
//! entries and checks them against each other, across MDTs.
//!
//! Findings: an entry naming no inode (dangling) or an inode of another kind; an inode no
//! entry names (orphan; files unlinked while open are expected and not reported; the shards
//! of a striped directory are named by its master); a link count that is not the number of
//! entries naming a file, 2 + subdirectories for a directory, or 1 for the master of a
//! striped directory; a directory whose `..` is not the directory holding its entry (for a
//! shard: its master); a master whose shard is missing (`shard`).
//!
//! It holds one summary per inode and entry in memory (about 100 bytes each).

use nacre_types::{Fid, FileKind};
use nacre_wire::mds::{DirentSummary, InodeSummary};
use serde::Serialize;
use std::collections::HashMap;

/// One inconsistency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `dangling`, `kind`, `orphan`, `nlink`, `parent`.
    pub kind: &'static str,
    /// The inode concerned.
    pub fid: Fid,
    /// What was found.
    pub detail: String,
}

/// What a namespace check found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Inodes checked.
    pub inodes: u64,
    /// Directory entries checked.
    pub dirents: u64,
    /// Inconsistencies.
    pub findings: Vec<Finding>,
}

/// Checks the inodes and entries of every MDT against each other.
pub fn check(inodes: &[InodeSummary], dirents: &[DirentSummary]) -> Report {
    let by_fid: HashMap<Fid, &InodeSummary> = inodes.iter().map(|i| (i.fid, i)).collect();
    let mut names: HashMap<Fid, u32> = HashMap::new();
    let mut subdirs: HashMap<Fid, u32> = HashMap::new();
    let mut holder: HashMap<Fid, Fid> = HashMap::new();
    let mut findings = Vec::new();
    for i in inodes {
        for &shard in &i.shards {
            *names.entry(shard).or_default() += 1;
            holder.insert(shard, i.fid);
            if !by_fid.contains_key(&shard) {
                findings.push(Finding {
                    kind: "shard",
                    fid: i.fid,
                    detail: format!("striped directory's shard {shard} does not exist"),
                });
            }
        }
    }
    for d in dirents {
        *names.entry(d.fid).or_default() += 1;
        holder.insert(d.fid, d.parent);
        if d.kind == FileKind::Directory {
            *subdirs.entry(d.parent).or_default() += 1;
        }
        match by_fid.get(&d.fid) {
            None => findings.push(Finding {
                kind: "dangling",
                fid: d.fid,
                detail: format!(
                    "entry '{}' in {} names no inode",
                    String::from_utf8_lossy(&d.name),
                    d.parent
                ),
            }),
            Some(i) if i.kind != d.kind => findings.push(Finding {
                kind: "kind",
                fid: d.fid,
                detail: format!(
                    "entry '{}' in {} says {:?}, the inode is {:?}",
                    String::from_utf8_lossy(&d.name),
                    d.parent,
                    d.kind,
                    i.kind
                ),
            }),
            Some(_) => {}
        }
    }
    for i in inodes {
        let named = names.get(&i.fid).copied().unwrap_or(0);
        if i.fid == Fid::ROOT {
            // The root has no entry.
        } else if named == 0 && !i.orphan {
            findings.push(Finding {
                kind: "orphan",
                fid: i.fid,
                detail: format!("{:?} inode named by no entry", i.kind),
            });
            continue;
        }
        let want = if !i.shards.is_empty() {
            1
        } else if i.kind == FileKind::Directory {
            2 + subdirs.get(&i.fid).copied().unwrap_or(0)
        } else {
            named
        };
        if i.nlink != want && !i.orphan {
            findings.push(Finding {
                kind: "nlink",
                fid: i.fid,
                detail: format!("link count {} but {want} expected", i.nlink),
            });
        }
        if i.kind == FileKind::Directory && i.fid != Fid::ROOT {
            if let Some(&p) = holder.get(&i.fid) {
                if i.parent != Some(p) {
                    findings.push(Finding {
                        kind: "parent",
                        fid: i.fid,
                        detail: format!("'..' is {:?} but its entry is in {p}", i.parent),
                    });
                }
            }
        }
    }
    Report {
        inodes: inodes.len() as u64,
        dirents: dirents.len() as u64,
        findings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(oid: u32, kind: FileKind, nlink: u32, parent: Option<Fid>) -> InodeSummary {
        InodeSummary {
            fid: Fid::new(nacre_types::fid::FID_SEQ_NORMAL, oid),
            kind,
            nlink,
            parent,
            orphan: false,
            shards: vec![],
        }
    }

    fn entry(parent: Fid, name: &str, fid: Fid, kind: FileKind) -> DirentSummary {
        DirentSummary {
            parent,
            name: name.into(),
            fid,
            kind,
        }
    }

    #[test]
    fn a_consistent_tree_has_no_findings_and_damage_is_named() {
        let root = InodeSummary {
            fid: Fid::ROOT,
            kind: FileKind::Directory,
            nlink: 3,
            parent: Some(Fid::ROOT),
            orphan: false,
            shards: vec![],
        };
        let dir = inode(1, FileKind::Directory, 2, Some(Fid::ROOT));
        let file = inode(2, FileKind::Regular, 2, None);
        let mut inodes = vec![root, dir.clone(), file.clone()];
        let mut dirents = vec![
            entry(Fid::ROOT, "d", dir.fid, FileKind::Directory),
            entry(Fid::ROOT, "f", file.fid, FileKind::Regular),
            entry(dir.fid, "hard", file.fid, FileKind::Regular),
        ];
        let r = check(&inodes, &dirents);
        assert_eq!(r.findings, vec![], "clean");
        assert_eq!((r.inodes, r.dirents), (3, 3));
        // Damage: a dangling entry, an orphan, a wrong link count, a wrong '..'.
        let ghost = Fid::new(nacre_types::fid::FID_SEQ_NORMAL, 99);
        dirents.push(entry(dir.fid, "ghost", ghost, FileKind::Regular));
        inodes.push(inode(3, FileKind::Regular, 1, None));
        dirents.retain(|d| d.name != b"hard");
        inodes[1].parent = Some(file.fid);
        let r = check(&inodes, &dirents);
        let kinds: Vec<(&str, u32)> = r.findings.iter().map(|f| (f.kind, f.fid.oid)).collect();
        assert_eq!(
            kinds,
            vec![("dangling", 99), ("parent", 1), ("nlink", 2), ("orphan", 3)]
        );
    }
}
