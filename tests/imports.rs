//! The house as its imports draw it (issue 42): in no crate do three or more files use each
//! other round in a circle (a file and one other may use each other). nacre-mds has its own,
//! stricter test of its layers too (crates/mds/tests/layers.rs).

use nacre_testkit::imports::{file_graph, long_circles};

#[test]
fn no_crate_has_a_circle_of_three_or_more_files() {
    let crates = nacre_testkit::package_dir(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut circles = Vec::new();
    let mut checked = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        for ring in long_circles(&file_graph(&src)) {
            circles.push(format!("{name}: {}", ring.join(" -> ")));
        }
    }
    assert!(
        checked >= 20,
        "only {checked} crates found under {}",
        crates.display()
    );
    assert!(
        circles.is_empty(),
        "circles of files:\n{}",
        circles.join("\n")
    );
}
