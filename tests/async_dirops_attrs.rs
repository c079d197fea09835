//! A delegated directory's own attributes as its holder answers them (crate
//! nacre_client::dirattrs): the link count and times the kernel asks for after every
//! create are those of what the holder answered, sent or not, whatever its batches' replies
//! say of the moment they were made.

use super::async_dirops::{counter, delegated_dir, until_fired};
use nacre_testkit::{fail_loc, Form, Spec, TestFs};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

/// A batch of the holder's is taken to be sent (its directory's attributes after it are
/// the MDT's answer) while the holder answers one more mkdir there: the batch's answer
/// does not have it, so it is not the directory's state. Before the fix, the kernel's stat
/// between that answer and the next batch's found one link too few and kept it (the
/// racer's two mounts disagreed on a directory's link count, 6/7).
#[test]
fn a_mkdir_answered_while_a_batch_is_on_its_way_counts_in_the_directorys_links() {
    let fsname = "asyncnl";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    let pid = a.pid().expect("mount process");
    let answered = counter(&a, fsname, "answered");
    fs::create_dir(da.join("s1")).unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 1,
        "s1 answered here"
    );
    assert_eq!(fs::metadata(&da).unwrap().nlink(), 3);
    // The sender takes s1's mkdir and is held before sending it.
    fail_loc(pid, "client.delegated.taken~hold");
    until_fired(pid);
    fs::create_dir(da.join("s2")).unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 2,
        "s2 answered here"
    );
    // s1's batch goes (armed again: the held pass goes on), and the next, s2's, is held.
    fail_loc(pid, "client.delegated.taken~hold");
    until_fired(pid);
    // A stat now: from what the holder keeps, or from the MDT once s2 is sent (it waits
    // for the held batch then); either way with s2's link.
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = da.clone();
    let stat = std::thread::spawn(move || tx.send(fs::metadata(&dir).map(|m| m.nlink())));
    if let Ok(early) = rx.recv_timeout(Duration::from_secs(2)) {
        assert_eq!(
            early.unwrap(),
            4,
            "s1 and s2 counted while s2's batch is held"
        );
    }
    fail_loc(pid, "0");
    stat.join().unwrap().ok();
    assert_eq!(fs::metadata(&da).unwrap().nlink(), 4);
    assert_eq!(
        fs::metadata(fs.path("d")).unwrap().nlink(),
        4,
        "another mount"
    );
    assert_eq!(counter(&a, fsname, "lost"), 0);
}
