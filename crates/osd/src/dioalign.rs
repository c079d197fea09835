//! Whether an OST's file system takes Nacre's direct I/O: its own alignment for O_DIRECT,
//! read with `statx(STATX_DIOALIGN)` (Linux 6.1+) from a file the store creates for the
//! purpose, against the alignment Nacre's buffers and offsets keep
//! ([`DIRECT_IO_ALIGN_BYTES`]).
//!
//! The alignment is the file system's (its logical block size: 512 bytes or 4 KiB on ext4
//! and XFS as usually formatted), never the memory page size, which may be 64 KiB on
//! aarch64 (nacre_types::page). A file system that asks for more than Nacre keeps (a
//! device of 8 KiB or 64 KiB logical blocks), or says it has no direct I/O at all, has its
//! store run buffered — slower, never an EINVAL on a write. A kernel or file system that does
//! not answer `STATX_DIOALIGN` keeps the 4 KiB direct path, which every block size up to
//! 4 KiB accepts (what Nacre did before it asked).

use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use std::path::Path;

/// What an OST's file system says of direct I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DioAlign {
    /// The alignments it asks for, in bytes: of the buffer in memory and of the file offset
    /// and length.
    Known {
        /// Memory alignment of the buffer.
        mem_bytes: u32,
        /// Alignment of the file offset and length.
        offset_bytes: u32,
    },
    /// It has no direct I/O (STATX_DIOALIGN answered with zeros).
    Unsupported,
    /// It did not say (a kernel before 6.1, or a file system that does not report it).
    Unknown,
}

impl DioAlign {
    /// True if Nacre's direct I/O (buffers and offsets aligned to
    /// [`DIRECT_IO_ALIGN_BYTES`], lengths in whole multiples of it) meets this alignment.
    pub fn fits(self) -> bool {
        match self {
            DioAlign::Known {
                mem_bytes,
                offset_bytes,
            } => [mem_bytes, offset_bytes].into_iter().all(|a| {
                a > 0
                    && a.is_power_of_two()
                    && (a as usize) <= DIRECT_IO_ALIGN_BYTES
                    && DIRECT_IO_ALIGN_BYTES.is_multiple_of(a as usize)
            }),
            DioAlign::Unsupported => false,
            DioAlign::Unknown => true,
        }
    }
}

impl std::fmt::Display for DioAlign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DioAlign::Known {
                mem_bytes,
                offset_bytes,
            } => write!(f, "memory {mem_bytes} B, offsets {offset_bytes} B"),
            DioAlign::Unsupported => f.write_str("no direct I/O"),
            DioAlign::Unknown => f.write_str("not reported"),
        }
    }
}

/// Name of the file [`probe`] makes (and removes) in the directory it asks about.
pub const PROBE_FILE_NAME: &str = ".dioalign";

/// The direct-I/O alignment of the file system under `dir`: `statx(STATX_DIOALIGN)` of a
/// regular file made there for the question ([`PROBE_FILE_NAME`]) and removed after (a
/// directory's answer is not its files'). `dir` is the store's own: no one else names it.
pub fn probe(dir: &Path) -> std::io::Result<DioAlign> {
    use rustix::fs::{AtFlags, StatxFlags};
    let path = dir.join(PROBE_FILE_NAME);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let asked = rustix::fs::statx(&file, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN);
    drop(file);
    std::fs::remove_file(&path)?;
    let st = match asked {
        Ok(st) => st,
        Err(rustix::io::Errno::NOSYS) => return Ok(DioAlign::Unknown),
        Err(e) => return Err(e.into()),
    };
    if !StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::DIOALIGN) {
        return Ok(DioAlign::Unknown);
    }
    Ok(match (st.stx_dio_mem_align, st.stx_dio_offset_align) {
        (0, _) | (_, 0) => DioAlign::Unsupported,
        (mem_bytes, offset_bytes) => DioAlign::Known {
            mem_bytes,
            offset_bytes,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(mem_bytes: u32, offset_bytes: u32) -> DioAlign {
        DioAlign::Known {
            mem_bytes,
            offset_bytes,
        }
    }

    #[test]
    fn block_sizes_up_to_nacres_alignment_take_direct_io() {
        for (mem, off) in [(4, 512), (512, 512), (512, 4096), (4096, 4096), (1, 1)] {
            assert!(known(mem, off).fits(), "{mem}/{off}");
        }
        assert!(DioAlign::Unknown.fits());
    }

    #[test]
    fn larger_blocks_or_no_direct_io_run_buffered() {
        for (mem, off) in [(512, 8192), (8192, 512), (65536, 65536), (512, 3000)] {
            assert!(!known(mem, off).fits(), "{mem}/{off}");
        }
        assert!(!DioAlign::Unsupported.fits());
    }

    /// The probe reads the real file system the tests run on: whatever it says, a store
    /// there runs direct only if its alignment fits, and an answer of sizes is consistent
    /// with a direct write at Nacre's alignment really working.
    #[test]
    fn the_probe_reads_the_file_systems_answer() {
        let dir = tempfile::tempdir().unwrap();
        let a = probe(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "probe file left"
        );
        if let DioAlign::Known { offset_bytes, .. } = a {
            assert!(offset_bytes.is_power_of_two(), "{a}");
        }
        if a.fits() && a != DioAlign::Unknown {
            use std::os::unix::fs::{FileExt, OpenOptionsExt};
            let f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(dir.path().join("direct"))
                .unwrap();
            let buf = nacre_types::AlignedBuf::zeroed(DIRECT_IO_ALIGN_BYTES);
            f.write_all_at(&buf, DIRECT_IO_ALIGN_BYTES as u64).unwrap();
        }
    }
}
