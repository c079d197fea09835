//! The changelog's state on the MDT (`Mdt::changelog`: consumers, numbering, counters),
//! loaded at start. What a change writes is changelog_writer.rs; the consumers are served by
//! changelog.rs.

use nacre_mdstore::records::{decode_record, from_postcard, PlainRecord, Record, RecordError};
use nacre_mdstore::store::Store;
use nacre_types::{Fid, Status};
use nacre_wire::mds::changelog::*;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Default of `changelog_records_max`: how far (records) a consumer may fall behind before
/// it is deregistered. A record takes about 100 to 400 bytes on the MDT (names, job id).
pub const CHANGELOG_RECORDS_MAX_DEFAULT: u64 = 20_000_000;
/// Default of `changelog_idle_ms_max`: a week without reading or clearing.
pub const CHANGELOG_IDLE_MS_MAX_DEFAULT: u64 = 7 * 86_400_000;

/// A consumer as stored (`changelog_users`: `[1] postcard(UserRecord)`).
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UserRecord {
    pub(crate) name: String,
    pub(crate) cleared: u64,
}

impl Record for UserRecord {
    const NAME: &'static str = "changelog consumer record";
    const VERSION: u8 = 1;

    fn decode_version(version: u8, body: &[u8]) -> Result<UserRecord, RecordError> {
        match version {
            1 => from_postcard(Self::NAME, body),
            v => Err(RecordError::unknown_version(Self::NAME, v)),
        }
    }
}

impl PlainRecord for UserRecord {}

pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) cleared: u64,
    pub(crate) active: Instant,
}

pub(crate) struct State {
    pub(crate) users: BTreeMap<u32, User>,
    /// Oldest record kept (lower ones were freed).
    pub(crate) first: u64,
    /// Number of the next record.
    pub(crate) next: u64,
}

/// An MDT's changelog: its consumers and the numbering of its records.
pub struct Changelog {
    pub(crate) state: Mutex<State>,
    /// Some consumer is registered (changes are recorded).
    pub(crate) enabled: AtomicBool,
    /// How far a consumer may fall behind (records) before it is deregistered.
    pub records_max: AtomicU64,
    /// How long a consumer with records waiting may stay idle (ms) before it is
    /// deregistered.
    pub idle_ms_max: AtomicU64,
    pub(crate) written: AtomicU64,
    pub(crate) freed: AtomicU64,
    pub(crate) dropped_users: AtomicU64,
    /// Who started each cross-MDT operation in progress here, by intent key: its record
    /// is written when its local end concludes (after a restart, unknown: root, no job).
    pub(crate) origins: Mutex<std::collections::HashMap<Fid, (u32, u32, String)>>,
    /// Where the copy of the MGS's audit trail stands (admin_records.rs; None: not read
    /// from the store yet).
    pub(crate) admin_cursor: Mutex<Option<(u64, u64)>>,
}

/// Cross-MDT operations whose origin is remembered at most (past it, their records say
/// root and no job).
pub(crate) const ORIGINS_MAX: usize = 65_536;

/// Counters and state shown as `mdt.*.changelog_users`.
#[derive(Clone, Debug, Default)]
pub struct ChangelogStatus {
    /// Oldest record kept.
    pub first: u64,
    /// Number of the next record.
    pub next: u64,
    /// Consumers.
    pub users: Vec<ChangelogUser>,
    /// Records written since the MDT started.
    pub written: u64,
    /// Records freed since the MDT started.
    pub freed: u64,
    /// Consumers deregistered by the limits since the MDT started.
    pub dropped_users: u64,
}

impl Changelog {
    /// Loads the consumers and numbering from the store.
    pub fn load(store: &Store) -> Result<Changelog, Status> {
        let next = store.meta_u64(b"changelog_next")?.unwrap_or(1).max(1);
        let first = store
            .meta_u64(b"changelog_first")?
            .unwrap_or(1)
            .clamp(1, next);
        let mut users = BTreeMap::new();
        for (k, v) in store.changelog_users(CHANGELOG_USERS_MAX * 2)? {
            let Ok(id) = <[u8; 4]>::try_from(k.as_slice()) else {
                tracing::warn!("changelog: bad consumer key skipped");
                continue;
            };
            let rec: UserRecord = store.decode(&v)?;
            users.insert(
                u32::from_be_bytes(id),
                User {
                    name: rec.name,
                    cleared: rec.cleared,
                    active: Instant::now(),
                },
            );
        }
        Ok(Changelog {
            enabled: AtomicBool::new(!users.is_empty()),
            state: Mutex::new(State { users, first, next }),
            records_max: AtomicU64::new(CHANGELOG_RECORDS_MAX_DEFAULT),
            idle_ms_max: AtomicU64::new(CHANGELOG_IDLE_MS_MAX_DEFAULT),
            written: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            dropped_users: AtomicU64::new(0),
            admin_cursor: Mutex::new(None),
            origins: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// True while some consumer is registered.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// What `mdt.*.changelog_users` shows.
    pub fn status(&self) -> ChangelogStatus {
        let st = self.state.lock();
        ChangelogStatus {
            first: st.first,
            next: st.next,
            users: users_of(&st),
            written: self.written.load(Ordering::Relaxed),
            freed: self.freed.load(Ordering::Relaxed),
            dropped_users: self.dropped_users.load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn users_of(st: &State) -> Vec<ChangelogUser> {
    st.users
        .iter()
        .map(|(id, u)| ChangelogUser {
            id: *id,
            name: u.name.clone(),
            cleared: u.cleared,
            idle_ms: u.active.elapsed().as_millis() as u64,
        })
        .collect()
}

/// Decodes a stored consumer: (name, last record cleared). Damage, or a newer version, is
/// an error, never a panic.
pub fn decode_user(bytes: &[u8]) -> Result<(String, u64), RecordError> {
    decode_record::<UserRecord>(bytes).map(|u| (u.name, u.cleared))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_mdstore::records::encode_record;

    #[test]
    fn consumers_read_their_stored_sample() {
        // docs/formats.md rule 6: "cl1", cleared up to 300 (a varint: ac 02).
        let stored = [0x01, 0x03, b'c', b'l', b'1', 0xac, 0x02];
        let rec = UserRecord {
            name: "cl1".to_string(),
            cleared: 300,
        };
        assert_eq!(encode_record(&rec), stored);
        assert_eq!(decode_record::<UserRecord>(&stored).unwrap(), rec);
        assert_eq!(decode_user(&stored).unwrap(), ("cl1".to_string(), 300));
        let mut newer = stored;
        newer[0] = 2;
        assert_eq!(
            decode_user(&newer).unwrap_err(),
            RecordError::TooNew {
                what: "changelog consumer record",
                found: 2,
                newest: 1
            }
        );
    }
}
