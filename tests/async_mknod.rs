//! Regular files made by `mknod` in a directory delegated to the mount (`--async-dirops`,
//! issue 44 item 2): answered by the mount as its creates are (a create without its
//! open), made by the MDT as it would make them; other kinds (a FIFO) go to the MDT.

use super::async_dirops::{
    counter, delegated_dir, hold_sender, names, release_sender, until_counter,
};
use super::async_mkdirs::stat_shown as shown;
use nacre_testkit::{lfsck_clean, Form, Spec, TestFs};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// `mknod(path, mode, 0)`: the errno if it failed.
fn mknod(p: &Path, mode: libc::mode_t) -> Result<(), i32> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    match unsafe { libc::mknod(c.as_ptr(), mode, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// This process's umask (from /proc: reading it with umask(2) would change it for every
/// test thread meanwhile).
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .unwrap();
    u32::from_str_radix(line.trim(), 8).unwrap()
}

/// 30 regular files made by mknod in a delegated directory are answered by the mount and
/// not sent while its sender is held (the counters); the kernel keeps what it answered;
/// once sent, another mount sees each as the mount answered it; a name taken is refused
/// EEXIST; a FIFO goes to the MDT; the namespace checker finds nothing.
#[test]
fn regular_files_made_by_mknod_are_answered_by_the_mount() {
    let fsname = "amknod";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    until_counter(&a, fsname, "pending", 0);
    let answered = counter(&a, fsname, "answered");
    hold_sender(&a);
    let made: Vec<String> = (0..30).map(|i| format!("n{i}")).collect();
    for n in &made {
        mknod(&da.join(n), libc::S_IFREG | 0o640).unwrap();
    }
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 30,
        "answered by the mount"
    );
    assert_eq!(counter(&a, fsname, "pending"), 30, "and not sent");
    let here: Vec<_> = made.iter().map(|n| shown(&da.join(n))).collect();
    assert_eq!(counter(&a, fsname, "pending"), 30, "stats answered here");
    assert_eq!(
        mknod(&da.join("n3"), libc::S_IFREG | 0o600),
        Err(libc::EEXIST)
    );
    release_sender(&a);
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0);
    // A FIFO is not answered here.
    mknod(&da.join("fifo"), libc::S_IFIFO | 0o600).unwrap();
    assert_eq!(counter(&a, fsname, "answered"), answered + 30);
    let db = fs.path("d");
    let mut want = made.clone();
    want.extend(["first".to_string(), "fifo".to_string()]);
    want.sort();
    assert_eq!(names(&db), want, "the other mount sees them all");
    for (n, h) in made.iter().zip(&here) {
        assert_eq!(shown(&db.join(n)), *h, "{n}: as the mount answered it");
    }
    assert_eq!(shown(&db.join("n0")).0, libc::S_IFREG | (0o640 & !umask()));
    assert!(fs::metadata(db.join("fifo")).unwrap().file_type().is_fifo());
    lfsck_clean(&fs.source());
}
