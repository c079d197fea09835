//! The `nacre` Python package (crates/python: the pyo3 module built by the workspace, and
//! its Python files) assembled as a package and its tests (tests/python/test_nacre.py) run
//! by the system's python3 on a networked mount.

use nacre_testkit::{Form, Spec, TestFs};
use std::path::Path;
use std::process::Command;

/// The package as `pip install ./crates/python` would lay it out, under `dir`.
fn assemble(dir: &Path) {
    let built = nacre_testkit::nacre_bin().parent().unwrap().to_path_buf();
    let src = nacre_testkit::tests_dir().join("../crates/python/python/nacre");
    let pkg = dir.join("nacre");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::copy(src.join("__init__.py"), pkg.join("__init__.py")).unwrap();
    std::fs::copy(built.join("lib_nacre.so"), pkg.join("_nacre.abi3.so")).unwrap();
}

#[test]
fn the_python_package_passes_its_tests_on_a_networked_mount() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("apipy"));
    let site = fs.scratch().join("site");
    assemble(&site);
    let tests = nacre_testkit::tests_dir().join("python/test_nacre.py");
    let out = Command::new("python3")
        .arg(&tests)
        .arg("-v")
        .env("PYTHONPATH", &site)
        .env("NACRE_MOUNT", &fs.mnt)
        .env("NACRE_FSNAME", "apipy")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert!(out.status.success(), "{err}");
    // unittest reports on stderr: every test ran and passed.
    assert!(err.contains("Ran 9 tests"), "{err}");
    assert!(err.trim_end().ends_with("OK"), "{err}");
}
