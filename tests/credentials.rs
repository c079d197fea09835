//! Servers know who is asking: a native client (the Rust library in this test process, over
//! TCP, no kernel in the way) acting for users who may not do what it asks is refused by the
//! MDT itself, exactly where the kernel refuses them on a mount; and OST objects carry their
//! file's owner, following a chown.

use nacre_client::{Client, ClientConfig};
use nacre_testkit::{nacre_ok, on_both_forms, Form, TestFs};
use nacre_types::cred::{self, MAY_READ, MAY_WRITE};
use nacre_types::{Cred, Fid, FileKind, Owner, SetAttr, TimeSpec};
use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn native(fs: &TestFs) -> Arc<Client> {
    Client::mount(
        fs.mgs_nid.parse().expect("MGS NID"),
        &fs.spec.fsname,
        ClientConfig::default(),
    )
    .expect("native client")
}

fn mode(path: &std::path::Path, m: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(m)).unwrap();
}

/// The errno `r` failed with (0 if it succeeded).
fn errno<T>(r: Result<T, nacre_client::ClientError>) -> i32 {
    r.map(|_| 0).unwrap_or_else(|e| e.errno())
}

fn alice() -> Cred {
    Cred::new(1000, 1000, vec![])
}

fn fid_of(c: &Client, parent: Fid, name: &str) -> Fid {
    cred::with(Cred::root(), || c.lookup(parent, name.as_bytes(), false))
        .expect("lookup as root")
        .fid
}

fn the_mdt_refuses_what_the_kernel_would(form: Form) {
    let fs = TestFs::start(form, 2);
    // The tree, made by root through the mount.
    mode(&fs.mnt, 0o755);
    let private = fs.path("private");
    fs::create_dir(&private).unwrap();
    mode(&private, 0o700);
    fs::write(private.join("secret"), b"s").unwrap();
    fs::write(fs.path("ro"), b"read-only data").unwrap();
    mode(&fs.path("ro"), 0o644);
    fs::write(fs.path("shared"), b"").unwrap();
    mode(&fs.path("shared"), 0o666);
    fs::write(fs.path("grp"), b"group data").unwrap();
    chown(fs.path("grp"), Some(0), Some(4242)).unwrap();
    mode(&fs.path("grp"), 0o640);
    let open = fs.path("open");
    fs::create_dir(&open).unwrap();
    mode(&open, 0o777);
    let sticky = fs.path("sticky");
    fs::create_dir(&sticky).unwrap();
    mode(&sticky, 0o1777);
    fs::write(sticky.join("rootfile"), b"r").unwrap();

    let c = native(&fs);
    let root = Fid::ROOT;
    let private_fid = fid_of(&c, root, "private");
    let ro = fid_of(&c, root, "ro");
    let shared = fid_of(&c, root, "shared");
    let grp = fid_of(&c, root, "grp");
    let open_fid = fid_of(&c, root, "open");
    let sticky_fid = fid_of(&c, root, "sticky");
    let (eacces, eperm) = (libc::EACCES, libc::EPERM);

    cred::with(alice(), || {
        // Search and read permission on directories.
        assert_eq!(errno(c.lookup(private_fid, b"secret", false)), eacces);
        assert_eq!(errno(c.readdir(private_fid, None, 16)), eacces);
        // Opens check the access they want.
        assert_eq!(errno(c.open(ro, MAY_WRITE)), eacces);
        assert_eq!(errno(c.open(ro, MAY_READ | MAY_WRITE)), eacces);
        let (_, f) = c.open(ro, MAY_READ).expect("alice may read ro");
        let data = c.read_at(&f, 0, 64, false).unwrap();
        assert_eq!(&data[..], b"read-only data");
        c.close(&f).unwrap();
        // Creating needs write on the directory, and as oneself.
        let create = |dir: Fid, name: &str, uid: u32, gid: u32| {
            c.create(
                dir,
                name.as_bytes(),
                FileKind::Regular,
                0o644,
                uid,
                gid,
                0,
                true,
                false,
                0,
            )
        };
        assert_eq!(errno(create(root, "nope", 1000, 1000)), eacces);
        assert_eq!(errno(c.mkdir(root, b"nope", 0o755, 1000, 1000)), eacces);
        assert_eq!(errno(create(open_fid, "as-root", 0, 0)), eperm);
        assert_eq!(errno(create(open_fid, "foreign-group", 1000, 0)), eperm);
        let (mine, _) = create(open_fid, "mine", 1000, 1000).expect("alice creates in open");
        assert_eq!((mine.uid, mine.gid), (1000, 1000));
        // An existing file opened through a create: its own permissions.
        let reopen = c.create(
            root,
            b"ro",
            FileKind::Regular,
            0o644,
            1000,
            1000,
            0,
            false,
            true,
            MAY_WRITE,
        );
        assert_eq!(errno(reopen), eacces);
        // Sticky directories protect other users' entries.
        assert_eq!(errno(c.unlink(sticky_fid, b"rootfile")), eperm);
        assert_eq!(
            errno(c.rename(sticky_fid, b"rootfile", open_fid, b"stolen", false)),
            eperm
        );
        assert_eq!(errno(c.unlink(root, b"ro")), eacces);
        // Attributes: chmod and chown are the owner's (chown root's alone), truncate needs
        // write permission, explicit times the owner.
        let set = |fid: Fid, s: SetAttr| c.setattr(fid, s);
        let perm = |p: u32| SetAttr {
            perm: Some(p),
            ..SetAttr::default()
        };
        assert_eq!(errno(set(ro, perm(0o666))), eperm);
        assert_eq!(
            errno(set(
                ro,
                SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                }
            )),
            eacces
        );
        let t = TimeSpec { sec: 1, nsec: 0 };
        let explicit = SetAttr {
            mtime: Some(t),
            ..SetAttr::default()
        };
        assert_eq!(errno(set(shared, explicit.clone())), eperm);
        let now = SetAttr {
            mtime: Some(TimeSpec::now()),
            times_now: true,
            ..SetAttr::default()
        };
        set(shared, now).expect("touch of a writable file");
        set(mine.fid, explicit).expect("owner sets explicit times");
        set(mine.fid, perm(0o600)).expect("owner chmods");
        let owner = |uid: Option<u32>, gid: Option<u32>| SetAttr {
            uid,
            gid,
            ..SetAttr::default()
        };
        assert_eq!(errno(set(mine.fid, owner(Some(0), None))), eperm);
        assert_eq!(errno(set(mine.fid, owner(None, Some(4242)))), eperm);
        // Extended attributes: user.* by permission, trusted.* root's alone.
        assert_eq!(errno(c.setxattr(ro, b"user.k", b"v", 0)), eacces);
        assert_eq!(errno(c.setxattr(mine.fid, b"trusted.k", b"v", 0)), eperm);
        c.setxattr(mine.fid, b"user.k", b"v", 0)
            .expect("owner's user xattr");
        // Group permission through a supplementary group only.
        assert_eq!(errno(c.open(grp, MAY_READ)), eacces);
        // Device nodes are root's to make (CAP_MKNOD); fifos and sockets anyone's.
        let node = |name: &str, kind: FileKind, rdev: u32| {
            c.create(
                open_fid,
                name.as_bytes(),
                kind,
                0o666,
                1000,
                1000,
                rdev,
                true,
                false,
                0,
            )
        };
        let makedev = (1 << 8) | 3; // /dev/null's
        assert_eq!(errno(node("cdev", FileKind::CharDevice, makedev)), eperm);
        assert_eq!(errno(node("bdev", FileKind::BlockDevice, makedev)), eperm);
        node("fifo", FileKind::Fifo, 0).expect("alice makes a fifo");
        // A read-only open truncates nothing, through a descriptor or not.
        let (_, f) = c.open(ro, MAY_READ).expect("alice may read ro");
        let through_fd = SetAttr {
            size: Some(0),
            from_open: true,
            ..SetAttr::default()
        };
        assert_eq!(errno(c.setattr(ro, through_fd)), eacces);
        c.close(&f).unwrap();
    });
    cred::with(Cred::new(1000, 1000, vec![4242]), || {
        let (_, f) = c.open(grp, MAY_READ).expect("member of 4242 reads grp");
        assert_eq!(&c.read_at(&f, 0, 64, false).unwrap()[..], b"group data");
        c.close(&f).unwrap();
        let mine = c.lookup(open_fid, b"mine", false).unwrap().fid;
        let a = c
            .setattr(
                mine,
                SetAttr {
                    gid: Some(4242),
                    ..SetAttr::default()
                },
            )
            .expect("owner gives the file to a group it is in");
        assert_eq!(a.gid, 4242);
    });
    // Nothing refused changed anything: read back through the mount.
    assert_eq!(fs::read(fs.path("ro")).unwrap(), b"read-only data");
    assert_eq!(fs::read(sticky.join("rootfile")).unwrap(), b"r");
    assert!(!open.join("as-root").exists() && !fs.path("nope").exists());
    assert!(!open.join("cdev").exists() && !open.join("bdev").exists());
    assert!(open.join("fifo").exists());
    assert_eq!(
        fs::metadata(fs.path("ro")).unwrap().permissions().mode() & 0o7777,
        0o644
    );
    // Root through the same library passes.
    cred::with(Cred::root(), || {
        let secret = c
            .lookup(private_fid, b"secret", false)
            .expect("root looks up");
        let (_, f) = c.open(secret.fid, MAY_READ | MAY_WRITE).unwrap();
        c.close(&f).unwrap();
        c.unlink(sticky_fid, b"rootfile").expect("root removes");
    });
}

/// Waits until `object` of OST `ost` records `want`, asking the OSS over the wire (the MDT
/// sends chowns in the background).
fn wait_owner(c: &Client, ost: u32, object: nacre_types::ObjectId, want: Owner) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = c.object_owner(ost, object).expect("owner");
        if now == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "object {object} on OST{ost} is owned by {now:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ost_objects_carry_their_files_owner(form: Form) {
    let fs = TestFs::start(form, 2);
    let dir = fs.path("wide");
    fs::create_dir(&dir).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", dir.to_str().unwrap()]);
    mode(&dir, 0o777);
    // A user's file, written through the mount as that user: its objects are theirs.
    let (ok, err) = nacre_tests::as_nobody(&format!(
        "head -c 300000 /dev/urandom > {}/data",
        dir.display()
    ));
    assert!(ok, "{err}");
    let c = native(&fs);
    let wide = fid_of(&c, Fid::ROOT, "wide");
    let file = fid_of(&c, wide, "data");
    let layout = match cred::with(Cred::root(), || c.get_layout(file)).unwrap() {
        nacre_wire::mds::LayoutInfo::File(l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(layout.object_count(), 2);
    let nobody = Owner {
        uid: 65534,
        gid: 65534,
        project: 0,
    };
    for o in layout.objects() {
        wait_owner(&c, o.ost, o.object, nobody);
    }
    // chown and chgrp through the mount reach every object.
    chown(dir.join("data"), Some(1234), Some(5678)).unwrap();
    let new = Owner {
        uid: 1234,
        gid: 5678,
        project: 0,
    };
    for o in layout.objects() {
        wait_owner(&c, o.ost, o.object, new);
    }
    // A writer that still believes the old owner does not bring it back.
    let before = fs::read(dir.join("data")).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(dir.join("data"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"tail"))
        .unwrap();
    for o in layout.objects() {
        wait_owner(&c, o.ost, o.object, new);
    }
    let after = fs::read(dir.join("data")).unwrap();
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(&after[before.len()..], b"tail");
}

/// By FID, an inode is reached as through an NFS file handle: an open file's attributes and
/// owner's changes work after its directory was closed to its owner (FUSE node ids are
/// FIDs, the kernel asks by them), while its path is refused.
fn an_open_file_is_reached_by_its_handle_after_its_parent_closes(form: Form) {
    let fs = TestFs::start(form, 1);
    mode(&fs.mnt, 0o755);
    let d = fs.path("d");
    fs::create_dir(&d).unwrap();
    chown(&d, Some(65_534), Some(65_534)).unwrap();
    let script = format!(
        "cd {d}; mkdir sub; printf abc > sub/f; exec 3<sub/f; chmod 000 sub; \
         stat -L -c %s /proc/self/fd/3; chmod 640 /proc/self/fd/3; stat -L -c %a /proc/self/fd/3; \
         cat /proc/self/fd/3; echo; if cat sub/f 2>/dev/null; then echo path-open; fi",
        d = d.display()
    );
    let out = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "sh", "-ec", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text, "3\n640\nabc\n",
        "fstat, fchmod and read by handle; no path open"
    );
}

on_both_forms!(
    the_mdt_refuses_what_the_kernel_would,
    ost_objects_carry_their_files_owner,
    an_open_file_is_reached_by_its_handle_after_its_parent_closes,
);
