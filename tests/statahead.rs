//! Listings and the stats after them with `--readdirplus auto` (crates/fuse/src/fs/window.rs):
//! a scan that does not stat gets plain pages of names (no lock or attributes per entry);
//! stats that come in name order after a listing are answered from readdirplus pages
//! fetched ahead (the statahead window), and only while those are current — a change by
//! another mount, or any change by this one, sends the stat to the MDT again.

use nacre_testkit::{md_requests, on_both_forms, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

const READS: &[&str] = &["getattr", "lookup"];

/// A second client process mounting `fs` with `--readdirplus auto`: its mount point and
/// handle (unmounted on drop).
fn second_mount(fs: &TestFs) -> (PathBuf, nacre_testkit::ClientMount) {
    let mnt = fs.scratch().join("other");
    fs::create_dir_all(&mnt).unwrap();
    let m = fs.mount_another(&mnt, &["--readdirplus", "auto"]);
    (mnt, m)
}

/// Makes `count` files `f00000`... in `dir`, file `i` of `i % 97` bytes.
fn make_files(dir: &Path, count: usize) {
    fs::create_dir(dir).unwrap();
    for i in 0..count {
        fs::write(dir.join(name(i)), vec![b'x'; size(i) as usize]).unwrap();
    }
}

fn name(i: usize) -> String {
    format!("f{i:05}")
}

fn size(i: usize) -> u64 {
    (i % 97) as u64
}

/// The names `dir` lists, read to the end before anything else.
fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// On a mount that did not make them: a listing of 3,000 files that stats nothing is
/// plain pages after the first reply; the stats of all of them in name order afterwards
/// (a program that lists, sorts, then stats) come from readdirplus pages, not a lookup
/// each, and are right.
fn stats_after_a_whole_listing_come_from_statahead_pages(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae1",
        Form::Networked => "stan1",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    const FILES: usize = 3_000;
    make_files(&fs.path("d"), FILES);
    let (other, _mount) = second_mount(&fs);
    let d = other.join("d");
    assert!(fs::metadata(&d).unwrap().is_dir());

    let (plain, plus) = (
        md_requests(fsname, &["readdir"]),
        md_requests(fsname, &["readdirplus"]),
    );
    let names = list(&d);
    assert_eq!(names, (0..FILES).map(name).collect::<Vec<_>>());
    let plus_pages = md_requests(fsname, &["readdirplus"]) - plus;
    let plain_pages = md_requests(fsname, &["readdir"]) - plain;
    // The first reply with attributes (a page, and the next fetched ahead), then names.
    assert!(
        plus_pages <= 2,
        "{plus_pages} readdirplus pages for a plain scan"
    );
    assert!(plain_pages >= 2, "{plain_pages} readdir pages");

    let (reads, plus) = (
        md_requests(fsname, READS),
        md_requests(fsname, &["readdirplus"]),
    );
    for (i, n) in names.iter().enumerate() {
        let m = fs::symlink_metadata(d.join(n)).unwrap();
        assert!(m.is_file(), "{n}");
        assert_eq!(m.len(), size(i), "{n}");
    }
    let asked = md_requests(fsname, READS) - reads;
    assert!(
        asked < 20,
        "{asked} lookups and getattrs for {FILES} stats after a listing"
    );
    let pages = md_requests(fsname, &["readdirplus"]) - plus;
    assert!(pages >= 8, "{pages} statahead pages");

    // Numeric order is not name order (f10 sorts before f2): every stat right.
    let n = fs.path("n");
    fs::create_dir(&n).unwrap();
    for i in 0..1_000 {
        fs::write(n.join(format!("f{i}")), vec![b'y'; size(i) as usize]).unwrap();
    }
    let n = other.join("n");
    assert_eq!(list(&n).len(), 1_000);
    for i in 0..1_000 {
        let m = fs::symlink_metadata(n.join(format!("f{i}"))).unwrap();
        assert_eq!(m.len(), size(i), "f{i}");
    }

    // Creates of new names in a directory another mount made: the kernel looks each up
    // first, in name order, and finds nothing; pages that answer nothing stop the window
    // for longer each time (without that, a readdirplus page per create).
    let plus = md_requests(fsname, &["readdirplus"]);
    for i in 0..2_000 {
        fs::write(other.join(format!("n/new{i:05}")), b"").unwrap();
    }
    let pages = md_requests(fsname, &["readdirplus"]) - plus;
    assert!(pages <= 16, "{pages} readdirplus pages for 2,000 creates");
}

/// What the window fetched is answered only while current: a chmod, a write, a rename and
/// an unlink on another mount after the fetch are seen by the stats that follow (their
/// locks were called back), while the other names still come from the window; and after
/// any change this mount makes, nothing fetched before it is used.
fn the_window_answers_only_while_current(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae2",
        Form::Networked => "stan2",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    const FILES: usize = 700;
    make_files(&fs.path("d"), FILES);
    make_files(&fs.path("e"), FILES);
    let (other, _mount) = second_mount(&fs);
    let d = other.join("d");
    assert_eq!(list(&d).len(), FILES);
    // Two misses in name order past the first reply: the window holds f00302 onwards.
    for i in [300, 301] {
        assert_eq!(
            fs::symlink_metadata(d.join(name(i))).unwrap().len(),
            size(i)
        );
    }
    let a = |i: usize| fs.path("d").join(name(i));
    fs::set_permissions(a(310), fs::Permissions::from_mode(0o600)).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(a(311))
        .unwrap()
        .write_all(b"more")
        .unwrap();
    fs::rename(a(312), fs.path("d/renamed")).unwrap();
    fs::remove_file(a(313)).unwrap();

    // Lookups only: the directory's own attributes are asked again after its changes.
    let lookups = md_requests(fsname, &["lookup"]);
    for i in 302..330 {
        let got = fs::symlink_metadata(d.join(name(i)));
        match i {
            310 => assert_eq!(got.unwrap().permissions().mode() & 0o777, 0o600),
            311 => assert_eq!(got.unwrap().len(), size(i) + 4),
            312 | 313 => assert!(got.is_err(), "{} still there", name(i)),
            _ => {
                let m = got.unwrap();
                assert_eq!(m.len(), size(i), "{}", name(i));
                assert_eq!(m.permissions().mode() & 0o777, 0o644, "{}", name(i));
            }
        }
    }
    assert!(fs::symlink_metadata(d.join("renamed")).is_ok());
    // The four changed names were looked up; the 24 others came from the window.
    let asked = md_requests(fsname, &["lookup"]) - lookups;
    assert!(
        asked < 10,
        "{asked} lookups for 28 stats, 4 of changed files"
    );

    // This mount's own change, anywhere, after the fetch: the window is not used.
    let e = other.join("e");
    assert_eq!(list(&e).len(), FILES);
    for i in [300, 301] {
        assert_eq!(
            fs::symlink_metadata(e.join(name(i))).unwrap().len(),
            size(i)
        );
    }
    fs::write(other.join("made-here"), b"x").unwrap();
    // Asked again: a lookup, or a new page (not the one fetched before the change).
    let asked = || md_requests(fsname, &["lookup", "readdirplus"]);
    let before = asked();
    assert_eq!(
        fs::symlink_metadata(e.join(name(302))).unwrap().len(),
        size(302)
    );
    assert!(
        asked() > before,
        "a stat after a change here was answered from a window fetched before it"
    );
    for i in 303..320 {
        assert_eq!(
            fs::symlink_metadata(e.join(name(i))).unwrap().len(),
            size(i)
        );
    }
}

/// With the default `--readdirplus true`, a listing refreshes the attributes the kernel
/// holds: files written here (the kernel drops their size and times after each write) are
/// stat'ed from the kernel after a listing of their directory, as IO500's mdtest-hard stat
/// phase does after its find. Regression: with `auto` as the default, that stat phase asked
/// the MDT for every file (670k -> 9.8k stats/s).
fn a_listing_refreshes_the_attributes_of_files_written_here(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae3",
        Form::Networked => "stan3",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    const FILES: usize = 600;
    make_files(&fs.path("d"), FILES);
    assert_eq!(list(&fs.path("d")).len(), FILES);
    let reads = md_requests(fsname, READS);
    for i in 0..FILES {
        let m = fs::symlink_metadata(fs.path("d").join(name(i))).unwrap();
        assert_eq!(m.len(), size(i), "{}", name(i));
    }
    let asked = md_requests(fsname, READS) - reads;
    assert!(asked < 10, "{asked} getattrs and lookups for {FILES} stats");
}

/// With the default `--readdirplus true`, a listing of files this mount made and wrote is
/// built by the mount from plain pages (names only, 1,024 per request, no lock per entry)
/// after the MDT's first readdirplus page, which checked the caller may search the
/// directory: IO500's find over mdtest's files. The stats after it stay in the kernel and
/// are right. Mutation-checked: with pages never built here, readdirplus pages go back to
/// one per 256 entries and the first assertion fails.
fn a_listing_of_files_made_here_is_built_from_plain_pages(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae4",
        Form::Networked => "stan4",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    const FILES: usize = 3_000;
    make_files(&fs.path("d"), FILES);
    let (plus, plain) = (
        md_requests(fsname, &["readdirplus"]),
        md_requests(fsname, &["readdir"]),
    );
    assert_eq!(list(&fs.path("d")).len(), FILES);
    let plus = md_requests(fsname, &["readdirplus"]) - plus;
    let plain = md_requests(fsname, &["readdir"]) - plain;
    assert!(
        plus <= 2 && plain >= 2,
        "{plus} readdirplus and {plain} readdir pages for a listing of {FILES} files made here"
    );
    let reads = md_requests(fsname, READS);
    for i in 0..FILES {
        let m = fs::symlink_metadata(fs.path("d").join(name(i))).unwrap();
        assert_eq!(m.len(), size(i), "{}", name(i));
        assert_eq!(m.permissions().mode() & 0o777, 0o644, "{}", name(i));
    }
    let asked = md_requests(fsname, READS) - reads;
    assert!(asked < 10, "{asked} getattrs and lookups for {FILES} stats");
}

/// The same for files this mount answered the creates of itself, in a directory delegated
/// to it and still held (asynchronous directory operations, the default): mdtest easy's
/// empty files, then IO500's find over them on the same mount. What the mount keeps of them
/// under the delegation is given with each entry, under the file's own lock (granted with
/// its batch). Regression: files kept under a delegation were left to the MDT's readdirplus
/// pages (find over 100,000 of them: 156k entries/s without asynchronous creates, 82k with).
/// Networked only: the embedded form's mount takes no delegation.
#[test]
fn a_listing_of_files_made_under_a_delegation_is_built_from_plain_pages() {
    let fsname = "stan6";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    const FILES: usize = 3_000;
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    let answered = || super::async_dirops::async_counter(fs.client_pid(), fsname, "answered");
    let before = answered();
    for i in 0..FILES {
        fs::File::create(dir.join(name(i))).unwrap();
    }
    assert!(
        answered() - before >= FILES as u64 - 10,
        "{} of {FILES} creates answered by the mount",
        answered() - before
    );
    let (plus, plain) = (
        md_requests(fsname, &["readdirplus"]),
        md_requests(fsname, &["readdir"]),
    );
    assert_eq!(list(&dir).len(), FILES);
    let plus = md_requests(fsname, &["readdirplus"]) - plus;
    let plain = md_requests(fsname, &["readdir"]) - plain;
    assert!(
        plus <= 2 && plain >= 2,
        "{plus} readdirplus and {plain} readdir pages for a listing of {FILES} files made \
         under a delegation"
    );
    let reads = md_requests(fsname, READS);
    for i in 0..FILES {
        let m = fs::symlink_metadata(dir.join(name(i))).unwrap();
        assert_eq!(m.len(), 0, "{}", name(i));
        assert_eq!(m.permissions().mode() & 0o777, 0o644, "{}", name(i));
    }
    let asked = md_requests(fsname, READS) - reads;
    assert!(asked < 10, "{asked} getattrs and lookups for {FILES} stats");
}

/// The same for small files whose bytes are all on the MDT (a directory laid out
/// `-E 64K -L mdt`, as sites lay out mdtest hard's): the mount follows their size from the
/// MDT's answers to its writes there (embedded: each write a `DomWrite` after the create)
/// or from the batch that carried them with their creates (networked: the directory
/// delegated to the mount). Regression: such files were never vouched for, and IO500's
/// find over mdtest hard's files on the MDT ran from the MDT's readdirplus pages (68-78k
/// entries/s). Mutation-checked: with those files refused again, the first assertion
/// fails on both forms.
fn a_listing_of_small_files_on_the_mdt_made_here_is_built_from_plain_pages(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae7",
        Form::Networked => "stan7",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    const FILES: usize = 3_000;
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    nacre_testkit::nacre_ok(&[
        "setstripe",
        "-E",
        "64K",
        "-L",
        "mdt",
        "-E",
        "-1",
        "-c",
        "1",
        dir.to_str().unwrap(),
    ]);
    let bytes = |i: usize| 3_901 + i as u64 % 7;
    for i in 0..FILES {
        fs::write(dir.join(name(i)), vec![b'y'; bytes(i) as usize]).unwrap();
    }
    let (plus, plain) = (
        md_requests(fsname, &["readdirplus"]),
        md_requests(fsname, &["readdir"]),
    );
    assert_eq!(list(&dir).len(), FILES);
    let plus = md_requests(fsname, &["readdirplus"]) - plus;
    let plain = md_requests(fsname, &["readdir"]) - plain;
    assert!(
        plus <= 2 && plain >= 2,
        "{plus} readdirplus and {plain} readdir pages for a listing of {FILES} small files \
         on the MDT made here"
    );
    let reads = md_requests(fsname, READS);
    for i in 0..FILES {
        let m = fs::symlink_metadata(dir.join(name(i))).unwrap();
        assert_eq!((m.len(), m.blocks()), (bytes(i), 8), "{}", name(i));
    }
    let asked = md_requests(fsname, READS) - reads;
    assert!(asked < 10, "{asked} getattrs and lookups for {FILES} stats");
    // What another mount gets from the MDT.
    let other = fs.scratch().join("other");
    fs::create_dir_all(&other).unwrap();
    let _other = fs.mount_another(&other, &[]);
    for i in (0..FILES).step_by(97) {
        let m = fs::symlink_metadata(other.join("d").join(name(i))).unwrap();
        assert_eq!(
            (m.len(), m.blocks()),
            (bytes(i), 8),
            "{} from the MDT",
            name(i)
        );
    }
}

/// What another mount changed in files this mount made is what a listing built here shows
/// (their locks were called back: the mount no longer vouches for them), and so is this
/// mount's own write to a file of a page built here before the kernel was given that entry
/// (the attributes are taken as each entry is given, not when its page was fetched), and
/// the entries after the first it can no longer give come from the MDT's readdirplus pages,
/// with their attributes. Each of these has more than one guard (the lock held at the fetch and when given, the
/// attributes taken again when given, an open for writing here): a mutation of any one of
/// them alone still passes.
fn a_listing_built_here_shows_what_changed(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae5",
        Form::Networked => "stan5",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    const FILES: usize = 2_500;
    make_files(&fs.path("d"), FILES);
    let other = fs.scratch().join("other");
    fs::create_dir_all(&other).unwrap();
    let _b = fs.mount_another(&other, &[]);
    let b = |i: usize| other.join("d").join(name(i));
    fs::set_permissions(b(2300), fs::Permissions::from_mode(0o600)).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(b(2350))
        .unwrap()
        .write_all(b"more")
        .unwrap();
    fs::remove_file(b(2400)).unwrap();
    // Here: a listing 300 entries in (into the page built here after the MDT's first,
    // entries 256 to 1,279), then a write to a file of that page the kernel has not had.
    let mut listing = fs::read_dir(fs.path("d")).unwrap();
    let first: Vec<_> = (&mut listing)
        .take(300)
        .map(|e| e.unwrap().file_name())
        .collect();
    fs::OpenOptions::new()
        .append(true)
        .open(fs.path("d").join(name(600)))
        .unwrap()
        .write_all(b"12345")
        .unwrap();
    let mut names: Vec<String> = first
        .into_iter()
        .chain(listing.map(|e| e.unwrap().file_name()))
        .map(|n| n.into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), FILES - 1);
    let reads = md_requests(fsname, READS);
    for i in 0..FILES {
        let got = fs::symlink_metadata(fs.path("d").join(name(i)));
        match i {
            600 => assert_eq!(got.unwrap().len(), size(i) + 5),
            2300 => assert_eq!(got.unwrap().permissions().mode() & 0o777, 0o600),
            2350 => assert_eq!(got.unwrap().len(), size(i) + 4),
            2400 => assert!(got.is_err(), "{} still there", name(i)),
            _ => {
                let m = got.unwrap();
                assert_eq!(m.len(), size(i), "{}", name(i));
                assert_eq!(m.permissions().mode() & 0o777, 0o644, "{}", name(i));
            }
        }
    }
    // Past the first entry the mount no longer vouched for, the listing went on from the
    // MDT's readdirplus pages: the kernel had every entry's attributes, those of the two
    // files another mount changed too. What asks: the file written here after its page
    // was fetched, and the lookup of the removed name.
    let asked = md_requests(fsname, READS) - reads;
    assert!(asked <= 2, "{asked} getattrs and lookups for {FILES} stats");
}

/// The names one directory stream reads, from where it is to the end (no `.`, `..`).
///
/// # Safety
/// `d` is an open stream.
unsafe fn read_to_end(d: *mut libc::DIR) -> Vec<String> {
    let mut names = Vec::new();
    loop {
        // SAFETY: `d` is open; the entry is read before the next call.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            return names;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
        let name = name.to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
}

/// A stream over a directory far longer than what a stream keeps of it (the mount lets go
/// of the entries the kernel was given): read to the end, sent back by `seekdir` to a
/// position among the first names, and rewound, it lists every name once each time, in
/// the same order, with a name another mount added meanwhile. The listing is read on a
/// mount that did not make the files; the other mount's create calls back its lock on the
/// directory, which drops the kernel's copy of the listing, so what follows reaches the
/// mount.
fn a_long_listing_sought_back_lists_every_name(form: Form) {
    let fsname = match form {
        Form::Embedded => "stae7",
        Form::Networked => "stan7",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let count = 5_000;
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..count {
        fs::File::create(dir.join(name(i))).unwrap();
    }
    let mnt = fs.scratch().join("other");
    fs::create_dir_all(&mnt).unwrap();
    let other = fs.mount_another(&mnt, &[]);
    let pid = other.pid().expect("the other mount's process");
    let dropped = || {
        let text = nacre_testkit::get_param(Some(pid), &format!("llite.{fsname}.lock_cache"));
        text.lines()
            .find_map(|l| l.strip_prefix("listings_invalidated "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no listings_invalidated in {text}"))
    };
    let path = std::ffi::CString::new(mnt.join("d").as_os_str().as_encoded_bytes()).unwrap();
    let want: Vec<String> = (0..count).map(name).collect();
    // SAFETY: a plain libc directory stream on a valid path, closed below.
    unsafe {
        let d = libc::opendir(path.as_ptr());
        assert!(!d.is_null());
        let mut first = Vec::new();
        while first.len() < 100 {
            first.extend(read_one(d));
        }
        let at = libc::telldir(d);
        first.extend(read_to_end(d));
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, want, "the first reading");
        let before = dropped();
        fs::File::create(dir.join("zzzzz")).unwrap();
        nacre_testkit::wait_for("the kernel's listing dropped", || dropped() > before);
        first.push("zzzzz".to_string());
        libc::seekdir(d, at);
        let again = read_to_end(d);
        assert_eq!(
            again,
            first[100..],
            "after seekdir back among the first names"
        );
        libc::rewinddir(d);
        assert_eq!(read_to_end(d), first, "after rewinddir");
        libc::closedir(d);
    }
}

/// The next name of stream `d` (none for `.` and `..`).
///
/// # Safety
/// `d` is an open stream.
unsafe fn read_one(d: *mut libc::DIR) -> Option<String> {
    // SAFETY: `d` is open; the entry is read before the next call.
    let e = unsafe { libc::readdir(d) };
    assert!(!e.is_null(), "the listing ended early");
    // SAFETY: d_name is NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
    let name = name.to_string_lossy().into_owned();
    (name != "." && name != "..").then_some(name)
}

on_both_forms!(
    a_long_listing_sought_back_lists_every_name,
    stats_after_a_whole_listing_come_from_statahead_pages,
    the_window_answers_only_while_current,
    a_listing_refreshes_the_attributes_of_files_written_here,
    a_listing_of_files_made_here_is_built_from_plain_pages,
    a_listing_of_small_files_on_the_mdt_made_here_is_built_from_plain_pages,
    a_listing_built_here_shows_what_changed
);
