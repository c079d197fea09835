//! The memory page size, where it matters (issue 43): aarch64 kernels commonly run 64 KiB
//! pages, x86-64 ones 4 KiB. Code that depends on the page size takes it as an argument
//! (so tests run it with 64 KiB on any machine) and gets it from [`page_bytes`], read from
//! the system once.
//!
//! Not the page size, and fixed for ever: the 4 KiB checksum chunk (`crc`), the node API
//! ring's 4 KiB alignment (`nacre_wire::ring`), the MMP block, O_DIRECT's alignment (the
//! file system's, `limits::DIRECT_IO_ALIGN_BYTES`).

use std::sync::OnceLock;

/// The page size assumed where the system does not say (never on Linux).
pub const PAGE_BYTES_FALLBACK: u64 = 4096;

/// This system's memory page size, in bytes (`sysconf(_SC_PAGESIZE)`, read once).
pub fn page_bytes() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        match u64::try_from(n) {
            Ok(n) if n.is_power_of_two() => n,
            _ => PAGE_BYTES_FALLBACK,
        }
    })
}

/// The whole pages of `page` bytes inside `offset..offset + len`: `start..end`, both
/// multiples of `page`, or None if no page lies wholly inside (what the kernel's page
/// cache keeps of a write of that range, which fills those pages and only those).
pub fn whole_pages(offset: u64, len: u64, page: u64) -> Option<(u64, u64)> {
    assert!(
        page.is_power_of_two(),
        "page size {page} is not a power of two"
    );
    let start = offset.div_ceil(page).saturating_mul(page);
    let end = offset.saturating_add(len) / page * page;
    (start < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K4: u64 = 4096;
    const K64: u64 = 65_536;

    #[test]
    fn the_system_page_size_is_a_power_of_two() {
        let p = page_bytes();
        assert!(p.is_power_of_two() && p >= K4, "{p}");
        // Under an emulator told another page size (qemu-aarch64 -p 65536), that one.
        if let Some(want) = std::env::var("NACRE_PAGE_BYTES_EXPECTED")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            // Printed first: under qemu-user with a 64 KiB page, a panic ends the process
            // with SIGSEGV before its message (qemu 7.2), so this line is what tells why.
            eprintln!("page_bytes() = {p}, expected {want}");
            assert_eq!(p, want);
        }
    }

    /// With 64 KiB pages, a 4 KiB-aligned write inside one page fills none of it; one
    /// from a 64 KiB boundary fills its pages: what a 4 KiB rule would get wrong both ways
    /// (a fixed 4096 answers Some for the first, and a narrower range for the third).
    #[test]
    fn whole_pages_follow_the_page_size() {
        assert_eq!(whole_pages(K4, 8 * K4, K4), Some((K4, 9 * K4)));
        assert_eq!(whole_pages(K4, 8 * K4, K64), None);
        assert_eq!(whole_pages(K64, 2 * K64, K64), Some((K64, 3 * K64)));
        assert_eq!(whole_pages(K4, 2 * K64, K64), Some((K64, 2 * K64)));
        assert_eq!(whole_pages(K4, 2 * K64, K4), Some((K4, K4 + 2 * K64)));
        assert_eq!(whole_pages(100, 10, K4), None);
        assert_eq!(whole_pages(u64::MAX - 10, 100, K4), None);
    }

    proptest! {
        /// A larger page's whole pages lie inside a smaller one's: a check made with the
        /// smaller (4 KiB) covers what the kernel keeps with the larger (64 KiB).
        #[test]
        fn larger_pages_are_inside_smaller_ones(offset in 0u64..1 << 30, len in 0u64..1 << 22) {
            if let Some((s, e)) = whole_pages(offset, len, K64) {
                let (s4, e4) = whole_pages(offset, len, K4).expect("a 64 KiB page is 16 of 4 KiB");
                prop_assert!(s4 <= s && e <= e4);
                prop_assert!(s % K64 == 0 && e % K64 == 0 && s >= offset && e <= offset + len);
            }
        }
    }
}
