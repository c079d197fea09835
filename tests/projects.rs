//! Project IDs (issue 21, step 2; `nacre project`, as `lfs project`) on the networked form:
//! a tree given a project with the inherit flag passes it to every new file and directory
//! (on another MDT too); OST objects carry their file's project (checked in the OSTs' own
//! directories), also after the project changes; only root changes projects; a rename or
//! hard link into a directory of another project is refused (`EXDEV`), and `mv` copies.

use nacre_testkit::{nacre, nacre_ok, wait_for, Form, Spec, TestFs};
use nacre_types::Owner;
use serde_json::Value;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An extended attribute of a local file (`None`: absent).
fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and a buffer of the given length.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (len >= 0).then(|| buf[..len as usize].to_vec())
}

/// The owner, group and project each of `path`'s OST objects carries on its OST's disk.
fn object_owners(fs: &TestFs, path: &Path) -> Vec<Option<Owner>> {
    let v: Value =
        serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()])).unwrap();
    v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let (ost, seq, id) = (
                o["ost"].as_u64().unwrap(),
                o["seq"].as_u64().unwrap(),
                o["id"].as_u64().unwrap(),
            );
            let file: PathBuf = fs
                .data
                .join(format!("ost{ost}"))
                .join("O")
                .join(seq.to_string())
                .join(format!("d{}", id % 32))
                .join(id.to_string());
            xattr(&file, "user.nacre.owner").and_then(|b| Owner::from_bytes(&b))
        })
        .collect()
}

/// `nacre project ARGS` listing lines as (id, flag, path).
fn listing(args: &[&str]) -> Vec<(u32, char, String)> {
    let mut a = vec!["project"];
    a.extend_from_slice(args);
    nacre_ok(&a)
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            (
                w.next().unwrap().parse().unwrap(),
                w.next().unwrap().chars().next().unwrap(),
                w.next().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_project_tree_passes_its_project_to_new_files_and_their_objects() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).mdts(2).fsname("projn"));
    let d = fs.path("d");
    std::fs::create_dir_all(d.join("old")).unwrap();
    std::fs::write(d.join("old/f"), vec![1u8; 100_000]).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // Set on the whole tree, with the inherit flag on its directories.
    nacre_ok(&["project", "-p", "42", "-s", "-r", &s(&d)]);
    assert_eq!(
        listing(&["-d", &s(&d)]),
        [(42, 'P', s(&d))],
        "the directory itself"
    );
    assert_eq!(
        listing(&["-r", &s(&d)]),
        [(42, 'P', s(&d.join("old"))), (42, '-', s(&d.join("old/f")))]
    );
    // What was there already has its objects' project changed on the OSTs.
    wait_for("the old file's objects in project 42", || {
        object_owners(&fs, &d.join("old/f"))
            .iter()
            .all(|o| o.is_some_and(|o| o.project == 42))
    });
    // New entries inherit: files, directories (with the flag), a directory on MDT1, and a
    // file in it.
    std::fs::create_dir(d.join("new")).unwrap();
    nacre_ok(&["setstripe", "-c", "2", &s(&d.join("new"))]);
    {
        // Two stripes' worth, made durable (the objects exist on the OSTs after it).
        use std::io::Write;
        let mut f = std::fs::File::create(d.join("new/g")).unwrap();
        f.write_all(&vec![2u8; 3 << 20]).unwrap();
        f.sync_all().unwrap();
    }
    nacre_ok(&["mkdir", "-i", "1", &s(&d.join("remote"))]);
    std::fs::write(d.join("remote/h"), b"on MDT1").unwrap();
    std::fs::create_dir(fs.path("plain")).unwrap();
    std::fs::write(fs.path("plain/x"), b"x").unwrap();
    assert_eq!(
        listing(&["-r", &s(&d)]),
        [
            (42, 'P', s(&d.join("new"))),
            (42, '-', s(&d.join("new/g"))),
            (42, 'P', s(&d.join("old"))),
            (42, '-', s(&d.join("old/f"))),
            (42, 'P', s(&d.join("remote"))),
            (42, '-', s(&d.join("remote/h"))),
        ]
    );
    assert_eq!(
        listing(&["-r", &s(&fs.path("plain"))]),
        [(0, '-', s(&fs.path("plain/x")))]
    );
    nacre_ok(&["project", "-c", &s(&d)]);
    // The objects a new file's writes create carry its project from the first write.
    let owners = object_owners(&fs, &d.join("new/g"));
    assert_eq!(owners.len(), 2);
    assert!(
        owners
            .iter()
            .all(|o| o.is_some_and(|o| o.project == 42 && o.uid == 0)),
        "{owners:?}"
    );
    // A later change reaches the objects.
    nacre_ok(&["project", "-p", "7", &s(&d.join("new/g"))]);
    assert_eq!(
        listing(&[&s(&d.join("new/g"))]),
        [(7, '-', s(&d.join("new/g")))]
    );
    wait_for("the objects in project 7", || {
        object_owners(&fs, &d.join("new/g"))
            .iter()
            .all(|o| o.is_some_and(|o| o.project == 7))
    });
    // The check names what differs.
    let check = nacre(&["project", "-c", &s(&d)]);
    assert!(!check.status.success());
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("new/g"),
        "{check:?}"
    );

    // Into a directory of another project neither rename nor hard link (EXDEV: mv copies).
    let err = std::fs::rename(fs.path("plain/x"), d.join("x")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EXDEV), "{err}");
    let err = std::fs::hard_link(fs.path("plain/x"), d.join("x")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EXDEV), "{err}");
    let mv = Command::new("mv")
        .arg(fs.path("plain/x"))
        .arg(d.join("x"))
        .status()
        .unwrap();
    assert!(mv.success());
    assert_eq!(listing(&[&s(&d.join("x"))]), [(42, '-', s(&d.join("x")))]);
    assert_eq!(std::fs::read(d.join("x")).unwrap(), b"x");
    // Out of it, and within it, a rename keeps the project.
    std::fs::rename(d.join("old/f"), fs.path("plain/f")).unwrap();
    assert_eq!(
        listing(&[&s(&fs.path("plain/f"))]),
        [(42, '-', s(&fs.path("plain/f")))]
    );
    std::fs::rename(fs.path("plain/f"), d.join("f")).unwrap();

    // Only root changes projects: a user who may write the file is refused.
    let mine = d.join("mine");
    std::fs::write(&mine, b"m").unwrap();
    std::fs::set_permissions(&mine, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--"])
        .args(["setfattr", "-n", "user.nacre.project", "-v", "5"])
        .arg(&mine)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{out:?}"
    );
    assert_eq!(listing(&[&s(&mine)]), [(42, '-', s(&mine))]);
    // Bad values are refused; clearing takes the project and the flag away.
    let bad = nacre(&["project", "-p", "x", &s(&mine)]);
    assert!(!bad.status.success());
    nacre_ok(&["project", "-C", "-r", &s(&d.join("new"))]);
    assert_eq!(
        listing(&["-r", &s(&d.join("new"))]),
        [(0, '-', s(&d.join("new/g")))]
    );
    assert_eq!(
        listing(&["-d", &s(&d.join("new"))]),
        [(0, '-', s(&d.join("new")))]
    );
}
