//! The format version of a store whose rows carry none (docs/formats.md, "Every format"):
//! key [`FORMAT_KEY`] of the store's `meta` table, a u32 big-endian, absent meaning 1. The
//! data mover's queue and the policy engine's index keep theirs so. A store of a newer
//! format than its reader's is refused at open, naming both versions ([`FormatError::TooNew`]);
//! one of an older format is converted by its reader, which then sets the key
//! ([`put_format`]) in the same batch as the converted rows.

use crate::{Batch, KvError, KvStore};

/// The `meta` key holding a store's format version (4 bytes, big-endian).
pub const FORMAT_KEY: &[u8] = b"format";

/// Why a store's format is refused.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Written by a newer nacre: left as it is, never read as damage.
    #[error("{store} has format {found}; this nacre reads up to {newest}: upgrade nacre")]
    TooNew {
        /// The store (what and where).
        store: String,
        /// The format it has.
        found: u32,
        /// The newest format this nacre reads of it.
        newest: u32,
    },
    /// The format key holds something else than 4 bytes.
    #[error("{store}: damaged format key ({len} bytes, not 4)")]
    Damaged {
        /// The store (what and where).
        store: String,
        /// Bytes the value has.
        len: usize,
    },
    /// The store could not be read or written.
    #[error("{store}: {source}")]
    Kv {
        /// The store (what and where).
        store: String,
        /// The store's error.
        source: KvError,
    },
}

/// Adds the setting of the format to `version` to `batch` (table `meta`).
pub fn put_format(batch: &mut Batch, meta: &'static str, version: u32) {
    batch.put(meta, FORMAT_KEY.to_vec(), version.to_be_bytes().to_vec());
}

/// The format of store `kv` (`store` names it in errors), as key [`FORMAT_KEY`] of its
/// table `meta` says. A store without the key (every store before formats were kept, and a
/// new one) is format 1, and the key is set to 1 now, durably. A format newer than
/// `newest` is [`FormatError::TooNew`]. The caller converts a store of an older format
/// than its own, then sets it with [`put_format`].
pub fn open_format(
    kv: &dyn KvStore,
    meta: &'static str,
    store: &str,
    newest: u32,
) -> Result<u32, FormatError> {
    let kv_err = |source: KvError| FormatError::Kv {
        store: store.to_string(),
        source,
    };
    let found = match kv.get(meta, FORMAT_KEY).map_err(kv_err)? {
        Some(v) => {
            let b: [u8; 4] = v.as_slice().try_into().map_err(|_| FormatError::Damaged {
                store: store.to_string(),
                len: v.len(),
            })?;
            u32::from_be_bytes(b)
        }
        None => {
            let mut batch = Batch::new();
            put_format(&mut batch, meta, 1);
            let t = kv.commit(batch).map_err(kv_err)?;
            kv.wait_durable(t).map_err(kv_err)?;
            1
        }
    };
    if found > newest {
        return Err(FormatError::TooNew {
            store: store.to_string(),
            found,
            newest,
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FjallStore;

    #[test]
    fn a_store_without_a_format_is_1_and_gets_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallStore::open(dir.path(), &["meta"]).unwrap();
        assert_eq!(kv.get("meta", FORMAT_KEY).unwrap(), None);
        assert_eq!(open_format(&kv, "meta", "test store", 1).unwrap(), 1);
        assert_eq!(kv.get("meta", FORMAT_KEY).unwrap(), Some(vec![0, 0, 0, 1]));
        // A newer one is refused, naming both versions; it is left as it is.
        let mut b = Batch::new();
        put_format(&mut b, "meta", 2);
        kv.commit(b).unwrap();
        let e = open_format(&kv, "meta", "test store", 1).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::TooNew {
                    found: 2,
                    newest: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "test store has format 2; this nacre reads up to 1: upgrade nacre"
        );
        assert_eq!(kv.get("meta", FORMAT_KEY).unwrap(), Some(vec![0, 0, 0, 2]));
        assert_eq!(open_format(&kv, "meta", "test store", 2).unwrap(), 2);
        // Another length is damage.
        let mut b = Batch::new();
        b.put("meta", FORMAT_KEY.to_vec(), vec![1]);
        kv.commit(b).unwrap();
        assert!(matches!(
            open_format(&kv, "meta", "test store", 1),
            Err(FormatError::Damaged { len: 1, .. })
        ));
    }
}
