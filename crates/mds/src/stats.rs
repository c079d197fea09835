//! MDT statistics (`mdt.*.md_stats`).

/// Operation names, indexed by the MDS opcode's low byte - 1 (Lustre's md_stats names where
/// Lustre has them).
pub const MD_OPS: &[&str] = &[
    "getattr",
    "lookup",
    "create",
    "mkdir",
    "symlink",
    "link",
    "unlink",
    "rmdir",
    "rename",
    "setattr",
    "readlink",
    "readdir",
    "open",
    "close",
    "getxattr",
    "setxattr",
    "listxattr",
    "removexattr",
    "setlayout",
    "getlayout",
    "statfs",
    "sync",
    "scan_inodes",
    "scan_dirents",
    "mkdir_remote",
    "alloc_fid",
    "update",
    "mkdir_striped",
    "get_dir_stripe",
    "set_dir_default",
    "get_dir_default",
    "migrate",
    "rename_lock",
    "ping",
    "disconnect",
    "reopen",
    "connect",
    "replay",
    "replay_done",
    "ldlm_poll",
    "ldlm_cancel",
    "ldlm_replay",
    "readdirplus",
    "flock",
    "flock_test",
    "changelog_register",
    "changelog_deregister",
    "changelog_clear",
    "changelog_read",
    "changelog_users",
    "fid2path",
    "relayout_begin",
    "relayout_fence",
    "relayout_swap",
    "relayout_abort",
    "stat_many",
    "scan_stats",
    "destroy_pending",
    "quota_usage",
    "quota_check",
    "layout_intent",
    "dom_read",
    "dom_write",
    "dom_append",
    "grant_fids",
    "create_batch",
    "delegate_dir",
    "unlink_batch",
    "access_batch",
];

#[cfg(test)]
mod tests {
    use nacre_wire::mds::MdsOp;

    #[test]
    fn names_follow_opcodes() {
        assert_eq!(
            super::MD_OPS[(MdsOp::StatFs.opcode() & 0xff) as usize - 1],
            "statfs"
        );
        assert_eq!(
            super::MD_OPS[(MdsOp::Sync.opcode() & 0xff) as usize - 1],
            "sync"
        );
        // The last opcode has its name too (migrate's, then stat_many's to quota_check's,
        // were missing: their stats were lost).
        let last = MdsOp::AccessBatch { items: Vec::new() };
        assert_eq!(super::MD_OPS.len(), (last.opcode() & 0xff) as usize);
        assert_eq!(super::MD_OPS[super::MD_OPS.len() - 1], "access_batch");
        let check = MdsOp::QuotaCheck { repair: false };
        assert_eq!(
            super::MD_OPS[(check.opcode() & 0xff) as usize - 1],
            "quota_check"
        );
        let read = MdsOp::ChangelogRead {
            user: 1,
            from: 0,
            count: 1,
        };
        assert_eq!(
            super::MD_OPS[(read.opcode() & 0xff) as usize - 1],
            "changelog_read"
        );
    }
}
