//! Credentials: who a request works for (uid, gid, supplementary groups).
//!
//! Every MDS and OSS request carries the caller's [`Cred`], and the MDT checks permissions with
//! it as the kernel does with `default_permissions`, so a client that skips the kernel (the
//! native library) gets the same answers, and a later root squash or uid mapping can be
//! enforced by the servers. The client edge (a FUSE request) sets the caller's credentials as
//! the current thread's ([`set_current`]); threads that never set any send the process's own
//! effective credentials ([`Cred::of_process`]).

use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::OnceLock;

/// Most supplementary groups a request carries (Linux allows 65,536; NFS's AUTH_SYS 16). A
/// caller in more sends the first this many: it can be refused what a later group would allow,
/// never allowed what none allows.
pub const CRED_GROUPS_MAX: usize = 128;

/// Read permission (an `access` bit, as the kernel's MAY_READ).
pub const MAY_READ: u8 = 4;
/// Write permission.
pub const MAY_WRITE: u8 = 2;
/// Execute permission (search, for directories).
pub const MAY_EXEC: u8 = 1;

/// A caller's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cred {
    /// Effective (file system) user id.
    pub uid: u32,
    /// Effective (file system) group id.
    pub gid: u32,
    /// Supplementary groups, at most [`CRED_GROUPS_MAX`].
    pub groups: Vec<u32>,
}

impl Cred {
    /// The superuser (servers calling each other, tests).
    pub fn root() -> Cred {
        Cred {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    /// A caller with `uid`, `gid` and the supplementary `groups` (cut to [`CRED_GROUPS_MAX`]).
    pub fn new(uid: u32, gid: u32, mut groups: Vec<u32>) -> Cred {
        groups.truncate(CRED_GROUPS_MAX);
        Cred { uid, gid, groups }
    }

    /// The superuser: passes every permission check except executing a file with no execute
    /// bit (as CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_CHOWN).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the caller is a member of `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the credentials respect their limits (a decoded request's are checked).
    pub fn is_valid(&self) -> bool {
        self.groups.len() <= CRED_GROUPS_MAX
    }

    /// This process's effective credentials, read once.
    pub fn of_process() -> Cred {
        static PROCESS: OnceLock<Cred> = OnceLock::new();
        PROCESS
            .get_or_init(|| {
                // SAFETY: plain getters without arguments.
                let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
                let mut groups = vec![0 as libc::gid_t; 1024];
                // SAFETY: the buffer holds `groups.len()` entries.
                let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
                groups.truncate(n.max(0) as usize);
                Cred::new(uid, gid, groups)
            })
            .clone()
    }
}

/// Owner, group and project of a file, as its OST objects carry them (for quotas and for
/// finding whose data an object is).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Owner {
    /// User.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Project (0: none).
    pub project: u32,
}

impl Owner {
    /// The owner, group and project of an inode.
    pub fn of(a: &crate::Attr) -> Owner {
        Owner {
            uid: a.uid,
            gid: a.gid,
            project: a.project,
        }
    }

    /// Bytes of [`Owner::to_bytes`].
    pub const BYTES: usize = 12;

    /// Fixed little-endian form (uid, gid, project), as stored beside an object.
    pub fn to_bytes(self) -> [u8; Self::BYTES] {
        let mut b = [0; Self::BYTES];
        b[0..4].copy_from_slice(&self.uid.to_le_bytes());
        b[4..8].copy_from_slice(&self.gid.to_le_bytes());
        b[8..12].copy_from_slice(&self.project.to_le_bytes());
        b
    }

    /// Decodes [`Owner::to_bytes`]; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<Owner> {
        let b: &[u8; Self::BYTES] = b.try_into().ok()?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Owner {
            uid: word(0),
            gid: word(4),
            project: word(8),
        })
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Cred>> = const { RefCell::new(None) };
}

/// Makes `cred` the credentials of the requests this thread sends next (`None`: the process's).
pub fn set_current(cred: Option<Cred>) {
    CURRENT.with(|c| *c.borrow_mut() = cred);
}

/// The credentials of this thread's requests.
pub fn current() -> Cred {
    CURRENT
        .with(|c| c.borrow().clone())
        .unwrap_or_else(Cred::of_process)
}

/// Runs `f` with `cred` as this thread's credentials, then restores the previous ones.
pub fn with<R>(cred: Cred, f: impl FnOnce() -> R) -> R {
    let before = CURRENT.with(|c| c.borrow_mut().replace(cred));
    struct Restore(Option<Cred>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = before);
        }
    }
    let _restore = Restore(before);
    f()
}

/// Whether `cred` may access an inode with permission bits `perm` (`mode & 0o7777`), owner
/// `uid`, group `gid`, for `want` ([`MAY_READ`] | [`MAY_WRITE`] | [`MAY_EXEC`]), as the
/// kernel's `generic_permission` without ACLs: the owner class if the caller owns it, else the
/// group class if it is a member, else other; root passes except for executing a non-directory
/// with no execute bit at all.
pub fn permits(cred: &Cred, perm: u32, uid: u32, gid: u32, is_dir: bool, want: u8) -> bool {
    let want = u32::from(want & 7);
    if cred.is_root() {
        return want & u32::from(MAY_EXEC) == 0 || is_dir || perm & 0o111 != 0;
    }
    let class = if cred.uid == uid {
        (perm >> 6) & 7
    } else if cred.in_group(gid) {
        (perm >> 3) & 7
    } else {
        perm & 7
    };
    class & want == want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_exclusive_as_in_the_kernel() {
        let alice = Cred::new(1000, 1000, vec![50]);
        // Owner class decides for the owner even if group or other would allow.
        assert!(!permits(&alice, 0o077, 1000, 1000, false, MAY_READ));
        // Group through a supplementary group.
        assert!(permits(&alice, 0o040, 0, 50, false, MAY_READ));
        assert!(!permits(&alice, 0o040, 0, 50, false, MAY_WRITE));
        // Other.
        assert!(permits(&alice, 0o006, 0, 0, false, MAY_READ | MAY_WRITE));
        assert!(!permits(&alice, 0o700, 0, 0, true, MAY_EXEC));
        // Root: everything but executing a file no one may execute.
        let root = Cred::root();
        assert!(permits(&root, 0, 1, 1, false, MAY_READ | MAY_WRITE));
        assert!(!permits(&root, 0o644, 1, 1, false, MAY_EXEC));
        assert!(permits(&root, 0o100, 1, 1, false, MAY_EXEC));
        assert!(permits(&root, 0, 1, 1, true, MAY_EXEC));
    }

    #[test]
    fn thread_credentials_are_scoped() {
        let alice = Cred::new(1000, 1000, vec![]);
        let before = current();
        assert_eq!(with(alice.clone(), current), alice);
        assert_eq!(current(), before);
        let many = Cred::new(1, 1, (0..1000).collect());
        assert_eq!(many.groups.len(), CRED_GROUPS_MAX);
        assert!(many.is_valid());
    }

    #[test]
    fn owner_bytes_round_trip() {
        let o = Owner {
            uid: 1,
            gid: u32::MAX,
            project: 7,
        };
        assert_eq!(Owner::from_bytes(&o.to_bytes()), Some(o));
        assert_eq!(Owner::from_bytes(&[0; 11]), None);
    }
}
