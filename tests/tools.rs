//! Ordinary tools work unmodified on the mount, on both forms: cp, tar, rsync, git, make, fio.

use nacre_testkit::{on_both_forms, sh, Form, TestFs};

fn prepare_tree(dir: &std::path::Path) {
    sh(&format!(
        "mkdir -p {0}/src/sub && for i in $(seq 1 50); do head -c $((i * 997)) /dev/urandom > {0}/src/sub/f$i; done \
         && ln -s sub/f1 {0}/src/link && ln {0}/src/sub/f2 {0}/src/hard && chmod 640 {0}/src/sub/f3 \
         && setfattr -n user.tag -v t {0}/src/sub/f4",
        dir.display()
    ));
}

fn cp_tar_rsync_round_trip(form: Form) {
    let fs = TestFs::start(form, 2);
    let local = tempfile::tempdir().unwrap();
    prepare_tree(local.path());
    let (l, m) = (
        local.path().display().to_string(),
        fs.mnt.display().to_string(),
    );
    sh(&format!("cp -a {l}/src {m}/cp && diff -r {l}/src {m}/cp"));
    let out = sh(&format!("getfattr -n user.tag --only-values {m}/cp/sub/f4"));
    assert_eq!(out, "t");
    assert_eq!(sh(&format!("stat -c %a {m}/cp/sub/f3")).trim(), "640");
    assert_eq!(sh(&format!("readlink {m}/cp/link")).trim(), "sub/f1");
    sh(&format!("tar -C {l} -cf {m}/t.tar src && mkdir {m}/untar && tar -C {m}/untar -xf {m}/t.tar && diff -r {l}/src {m}/untar/src"));
    sh(&format!("rsync -aHX {l}/src/ {m}/rs/ && diff -r {l}/src {m}/rs && rsync -aHX --delete {m}/rs/ {l}/back/ && diff -r {l}/src {l}/back"));
    assert_eq!(
        sh(&format!("stat -c %h {m}/rs/hard")).trim(),
        "2",
        "rsync -H keeps hard links"
    );
}

fn git_and_make(form: Form) {
    let fs = TestFs::start(form, 1);
    let m = fs.mnt.display().to_string();
    sh(&format!(
        "cd {m} && git init -q repo && cd repo && git config user.email t@e && git config user.name t \
         && printf 'all: out\\nout: in.txt\\n\\tcat in.txt in.txt > out\\nclean:\\n\\trm -f out\\n' > Makefile \
         && echo hello > in.txt && git add . && git commit -qm first && make -s && test \"$(cat out)\" = \"$(printf 'hello\\nhello')\" \
         && echo more >> in.txt && git commit -qam second && git log --oneline | wc -l | grep -q 2 \
         && git status --porcelain | grep -q out && make -s clean && git gc -q && git fsck --strict 2>&1 | grep -v dangling | wc -l | grep -q '^0$'"
    ));
}

fn fio_verify_job(form: Form) {
    let fs = TestFs::start(form, 4);
    let m = fs.mnt.display().to_string();
    sh(&format!(
        "mkdir {m}/fio && nacre_bin={} && $nacre_bin setstripe -c 4 -S 1M {m}/fio",
        nacre_testkit::nacre_bin().display()
    ));
    let out = sh(&format!(
        "fio --name=verify --directory={m}/fio --rw=randwrite --bs=64k --size=32m --numjobs=2 \
         --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 --direct=1 --ioengine=psync --group_reporting \
         --output-format=terse"
    ));
    let fields: Vec<&str> = out.lines().last().unwrap().split(';').collect();
    // Terse v3: field 5 is the error code; 0 means the job and its verification succeeded.
    assert_eq!(fields[4], "0", "fio reported an error: {out}");
    let seq = sh(&format!(
        "fio --name=seq --directory={m}/fio --rw=write --bs=1m --size=64m --numjobs=2 --verify=crc32c \
         --verify_state_save=0 --verify_fatal=1 --do_verify=1 --direct=1 --ioengine=psync --output-format=terse"
    ));
    assert!(
        seq.lines().all(|l| l.split(';').nth(4) == Some("0")),
        "{seq}"
    );
    // fio must not leave its verify state files in the working directory (they were once
    // committed to the repository by accident).
    let left: Vec<_> = std::fs::read_dir(".")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("-verify.state"))
        .collect();
    assert!(left.is_empty(), "fio left {left:?}");
}

on_both_forms!(cp_tar_rsync_round_trip, git_and_make, fio_verify_job,);
