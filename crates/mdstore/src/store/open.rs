//! Opening an MDT's store: the allocation state and the tables the MDT keeps in memory, read
//! at start, and the format upgrades an MDT written by an older version gets once (the link
//! and orphan indexes, the inode counts, the root directory).

use super::tx::{charge, load};
use super::{kv_err, read_u64, scan_each, AllocState, Store};
use crate::records::{
    decode_record, encode_inode, link_key, parse_destroy_key, DirentRecord, InodeRecord,
    IntentRecord, RelayoutRecord, CLIENTS, DESTROY, DIRENTS, FROZEN, INODES, INTENTS, LINKS, META,
    ORPHANS, OWNERS, RELAYOUTS, REPLIES,
};
use nacre_kv::{Batch, KvStore};
use nacre_types::{Attr, Fid, FileKind, ObjectId, Owner, Status, TimeSpec};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// What the store read at start for the state the MDT keeps above it.
pub struct Loaded {
    /// The clients in the `clients` table (a restart waits for their replays).
    pub clients: HashSet<[u8; 16]>,
    /// Cross-MDT operations coordinated here and not yet applied remotely, by FID.
    pub intents: HashMap<Fid, IntentRecord>,
    /// Inodes held by a directory migration (the `frozen` table).
    pub frozen: HashSet<Fid>,
    /// Objects whose destruction is committed but not yet done on the OSTs.
    pub destroys: VecDeque<(u32, ObjectId)>,
    /// (migrations in progress, files whose fence window is open).
    pub relayouts: (u64, HashSet<Fid>),
}

impl Store {
    /// Opens the store of MDT `index` (named `name` in log lines) on `kv`: reads its
    /// allocation state and what the MDT keeps in memory, building the link index and
    /// the inode counts first if the MDT has none yet.
    pub fn open(kv: Arc<dyn KvStore>, index: u32, name: &str) -> Result<(Store, Loaded), Status> {
        let fid_limit = read_u64(&*kv, b"fid_limit")?.unwrap_or(0);
        let ost_next_at_start = load_ost_next(&*kv)?;
        let inodes_used = read_u64(&*kv, b"inodes_used")?.unwrap_or(0);
        let inode_counts = load(&*kv, name)?;
        let dom_bytes = super::dom_quota::load(&*kv, name)?;
        let saved_replies = load_saved_replies(&*kv)?;
        let last_transno = read_u64(&*kv, b"last_transno")?.unwrap_or(0);
        let clients = load_clients(&*kv)?;
        let grants = super::fid_grants::load(&*kv, index)?;
        let intents = load_intents(&*kv, name)?;
        let frozen = load_frozen(&*kv)?;
        build_link_index(&*kv, name)?;
        let relayouts = load_relayouts(&*kv, name)?;
        let destroys = load_destroys(&*kv)?;
        let owners_pending = match kv.scan(OWNERS, &[], None, 1) {
            Ok(page) => page.len() as u64,
            // Not known: look on the first pass.
            Err(_) => 1,
        };
        let loaded = Loaded {
            clients: clients.clone(),
            intents,
            frozen,
            destroys,
            relayouts,
        };
        let store = Store {
            kv,
            index,
            name: name.to_string(),
            alloc: Mutex::new(AllocState {
                next_fid: fid_limit,
                fid_limit,
                next_object: HashMap::new(),
                inodes_used,
                quota: inode_counts,
                dom_bytes,
                saved_replies,
                last_transno,
                clients,
                grants,
            }),
            fid_limit_at_start: fid_limit,
            ost_next_at_start,
            owners_pending: AtomicU64::new(owners_pending),
            written_transno: AtomicU64::new(last_transno),
            last_committed_transno: AtomicU64::new(last_transno),
        };
        Ok((store, loaded))
    }

    /// Creates the root directory on MDT0's first start.
    pub fn ensure_root(&self) -> Result<(), Status> {
        if self.index != 0
            || self
                .kv
                .get(INODES, &Fid::ROOT.to_key())
                .map_err(kv_err)?
                .is_some()
        {
            return Ok(());
        }
        let now = TimeSpec::now();
        let root = InodeRecord {
            attr: Attr {
                fid: Fid::ROOT,
                kind: FileKind::Directory,
                perm: 0o755,
                uid: 0,
                gid: 0,
                nlink: 2,
                size: 4096,
                blocks: 8,
                atime: now,
                mtime: now,
                ctime: now,
                rdev: 0,
                project: 0,
                proj_inherit: false,
            },
            layout: None,
            dir_default: None,
            symlink: None,
            parent: Some(Fid::ROOT),
            orphan: false,
        };
        let mut b = Batch::new();
        b.put(INODES, Fid::ROOT.to_key().to_vec(), encode_inode(&root, 0));
        // The root is an inode like any other in `df -i`.
        let mut alloc = self.alloc.lock().expect("write lock");
        alloc.inodes_used += 1;
        b.put(
            META,
            b"inodes_used".to_vec(),
            alloc.inodes_used.to_be_bytes().to_vec(),
        );
        charge(&mut alloc.quota, &mut b, Owner::of(&root.attr), 1);
        drop(alloc);
        let t = self.kv.commit(b).map_err(kv_err)?;
        self.kv.wait_durable(t).map_err(kv_err)
    }

    /// The inodes marked orphan (unlinked while open), from the `orphans` index. An MDT
    /// formatted before the index existed is scanned once to build it.
    pub fn orphans(&self) -> Result<Vec<Fid>, Status> {
        if read_u64(&*self.kv, b"orphan_index")?.is_none() {
            let found = self.scan_orphans()?;
            let mut b = Batch::new();
            for fid in &found {
                b.put(ORPHANS, fid.to_key().to_vec(), Vec::new());
            }
            b.put(META, b"orphan_index".to_vec(), 1u64.to_be_bytes().to_vec());
            let t = self.kv.commit(b).map_err(kv_err)?;
            self.kv.wait_durable(t).map_err(kv_err)?;
            return Ok(found);
        }
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .kv
                .scan(ORPHANS, &[], after.as_deref(), 1024)
                .map_err(kv_err)?;
            let Some(last) = page.last() else { break };
            after = Some(last.0.clone());
            for (k, _) in &page {
                match Fid::from_key(k) {
                    Some(fid) => out.push(fid),
                    None => tracing::warn!("{}: bad orphan index key", self.name),
                }
            }
        }
        Ok(out)
    }

    /// Every inode marked orphan, by a scan of all inodes.
    fn scan_orphans(&self) -> Result<Vec<Fid>, Status> {
        let mut after: Option<Vec<u8>> = None;
        let mut orphans = Vec::new();
        loop {
            let page = self
                .kv
                .scan(INODES, &[], after.as_deref(), 1024)
                .map_err(kv_err)?;
            let Some(last) = page.last() else { break };
            after = Some(last.0.clone());
            for (_, v) in &page {
                let rec: InodeRecord = self.decode(v)?;
                if rec.orphan {
                    orphans.push(rec.attr.fid);
                }
            }
        }
        Ok(orphans)
    }
}

/// Every OST's object allocation reserved (`ost_next/N` in `META`).
fn load_ost_next(kv: &dyn KvStore) -> Result<HashMap<u32, u64>, Status> {
    let mut out = HashMap::new();
    scan_each(kv, META, b"ost_next/", 1_024, |k, v| {
        let ost = std::str::from_utf8(&k[b"ost_next/".len()..])
            .ok()
            .and_then(|s| s.parse().ok());
        let next = v
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        if let (Some(ost), Some(next)) = (ost, next) {
            out.insert(ost, next);
        }
        Ok(())
    })?;
    Ok(out)
}

fn load_clients(kv: &dyn KvStore) -> Result<HashSet<[u8; 16]>, Status> {
    let mut out = HashSet::new();
    scan_each(kv, CLIENTS, &[], 1024, |k, _| {
        out.insert(k.try_into().map_err(|_| Status::Io)?);
        Ok(())
    })?;
    Ok(out)
}

/// The intents pending (any record that cannot be read, damaged or newer, stops the MDT's
/// start: an intent skipped would leave its operation half done).
fn load_intents(kv: &dyn KvStore, name: &str) -> Result<HashMap<Fid, IntentRecord>, Status> {
    let mut out = HashMap::new();
    scan_each(kv, INTENTS, &[], 1024, |k, v| {
        let intent = decode_record::<IntentRecord>(v).map_err(|e| e.logged(name))?;
        out.insert(Fid::from_key(k).ok_or(Status::Io)?, intent);
        Ok(())
    })?;
    Ok(out)
}

fn load_frozen(kv: &dyn KvStore) -> Result<HashSet<Fid>, Status> {
    let mut out = HashSet::new();
    scan_each(kv, FROZEN, &[], 1024, |k, _| {
        out.insert(Fid::from_key(k).ok_or(Status::Io)?);
        Ok(())
    })?;
    Ok(out)
}

/// Builds the link index (links.rs) from the entries of an MDT formatted before it existed
/// (once, at start; `meta` `link_index` says it is built). A damaged entry is skipped; one
/// of a newer version than this nacre reads stops the build (and the MDT's start): its link
/// would be missing from `fid2path` for ever.
fn build_link_index(kv: &dyn KvStore, name: &str) -> Result<(), Status> {
    if read_u64(kv, b"link_index")?.is_some() {
        return Ok(());
    }
    let mut after: Option<Vec<u8>> = None;
    let mut count = 0u64;
    loop {
        let page = kv
            .scan(DIRENTS, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        let mut b = Batch::new();
        for (k, v) in &page {
            let Some(parent) = k.get(..16).and_then(Fid::from_key) else {
                tracing::warn!("{name}: links: directory entry with a bad key skipped");
                continue;
            };
            let d = match decode_record::<DirentRecord>(v) {
                Ok(d) => d,
                Err(e) if e.is_too_new() => return Err(e.logged(name)),
                Err(e) => {
                    tracing::warn!("{name}: links: {e}: skipped");
                    continue;
                }
            };
            b.put(LINKS, link_key(d.fid, parent, &k[16..]), Vec::new());
            count += 1;
        }
        kv.commit(b).map_err(kv_err)?;
    }
    let mut b = Batch::new();
    b.put(META, b"link_index".to_vec(), 1u64.to_be_bytes().to_vec());
    let t = kv.commit(b).map_err(kv_err)?;
    kv.wait_durable(t).map_err(kv_err)?;
    if count > 0 {
        tracing::info!("links: index of {count} existing entries built");
    }
    Ok(())
}

fn load_destroys(kv: &dyn KvStore) -> Result<VecDeque<(u32, ObjectId)>, Status> {
    let mut out = VecDeque::new();
    scan_each(kv, DESTROY, &[], 4096, |k, _| {
        out.extend(parse_destroy_key(k));
        Ok(())
    })?;
    Ok(out)
}

fn load_saved_replies(kv: &dyn KvStore) -> Result<HashMap<[u8; 16], BTreeSet<u64>>, Status> {
    let mut out: HashMap<[u8; 16], BTreeSet<u64>> = HashMap::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(REPLIES, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for (k, _) in &page {
            if let (Some(c), Some(x)) = (k.get(..16), k.get(16..24)) {
                let client: [u8; 16] = c.try_into().expect("16 bytes");
                out.entry(client)
                    .or_default()
                    .insert(u64::from_be_bytes(x.try_into().expect("8 bytes")));
            }
        }
    }
    Ok(out)
}

/// (migrations in progress, files whose fence window is open), read at start. A damaged
/// record is counted but not read; one of a newer version than this nacre reads stops the
/// MDT's start (its migration's fence would be forgotten).
fn load_relayouts(kv: &dyn KvStore, name: &str) -> Result<(u64, HashSet<Fid>), Status> {
    let mut count = 0;
    let mut fenced = HashSet::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(RELAYOUTS, &[], after.as_deref(), 1024)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for (k, v) in &page {
            count += 1;
            match (Fid::from_key(k), decode_record::<RelayoutRecord>(v)) {
                (_, Err(e)) if e.is_too_new() => return Err(e.logged(name)),
                (Some(fid), Ok(r)) if r.fenced => {
                    fenced.insert(fid);
                }
                _ => {}
            }
        }
    }
    Ok((count, fenced))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{dirent_key, Record, TABLES};
    use nacre_kv::FjallStore;

    /// A store holding one record, `value` at `key` of `table`.
    fn store_with(
        table: &'static str,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> (tempfile::TempDir, Arc<dyn KvStore>) {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallStore::open(&dir.path().join("db"), &TABLES).unwrap();
        let mut b = Batch::new();
        b.put(table, key, value);
        let t = kv.commit(b).unwrap();
        kv.wait_durable(t).unwrap();
        let kv: Arc<dyn KvStore> = Arc::new(kv);
        (dir, kv)
    }

    /// `version`, then bytes no version of any record decodes to the end.
    fn record_of_version(version: u8) -> Vec<u8> {
        let mut v = vec![version];
        v.extend_from_slice(&[0xff; 12]);
        v
    }

    #[test]
    fn passes_over_a_table_stop_at_a_newer_record_and_skip_damaged_ones() {
        let fid = Fid::new(nacre_types::fid::FID_SEQ_NORMAL, 7)
            .to_key()
            .to_vec();
        // The quota count: a newer inode stops it (counted short otherwise).
        let newer = record_of_version(InodeRecord::VERSION + 1);
        let (_dir, kv) = store_with(INODES, fid.clone(), newer);
        assert!(matches!(
            crate::store::tx::count(&*kv, "MDT0000"),
            Err(Status::Io)
        ));
        assert!(
            Store::open(kv, 0, "MDT0000").is_err(),
            "first count at start"
        );
        let (_dir, kv) = store_with(INODES, fid.clone(), vec![InodeRecord::VERSION, 0, 0]);
        assert!(matches!(
            crate::store::tx::count(&*kv, "MDT0000"),
            Ok(c) if c.is_empty()
        ));
        // The link index build at start: a newer entry stops it (and the MDT's start).
        let key = dirent_key(Fid::ROOT, b"f");
        let newer = record_of_version(DirentRecord::VERSION + 1);
        let (_dir, kv) = store_with(DIRENTS, key.clone(), newer);
        assert!(matches!(Store::open(kv, 0, "MDT0000"), Err(Status::Io)));
        let damaged = record_of_version(DirentRecord::VERSION);
        let (_dir, kv) = store_with(DIRENTS, key, damaged);
        assert!(Store::open(kv, 0, "MDT0000").is_ok(), "damage is skipped");
        // The migrations read at start: a newer one stops the start (its fence kept).
        let newer = record_of_version(RelayoutRecord::VERSION + 1);
        let (_dir, kv) = store_with(RELAYOUTS, fid.clone(), newer);
        assert!(matches!(Store::open(kv, 0, "MDT0000"), Err(Status::Io)));
        let damaged = record_of_version(RelayoutRecord::VERSION);
        let (_dir, kv) = store_with(RELAYOUTS, fid, damaged);
        let (_, loaded) = Store::open(kv, 0, "MDT0000").unwrap_or_else(|s| panic!("{s}"));
        assert_eq!(loaded.relayouts.0, 1, "counted, not read");
    }
}
