//! Generates `nacre.h` (cbindgen) and `nacre.pc`, into OUT_DIR and beside the built library
//! (`TARGET/PROFILE/include/nacre.h`, `TARGET/PROFILE/pkgconfig/nacre.pc`), so a C program
//! builds against the tree with `PKG_CONFIG_PATH=TARGET/PROFILE/pkgconfig`.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let header = out.join("nacre.h");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("nacre.h")
        .write_to_file(&header);
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // OUT_DIR is TARGET/PROFILE/build/PKG-HASH/out.
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    let include = profile_dir.join("include");
    let pkgconfig = profile_dir.join("pkgconfig");
    let _ = std::fs::create_dir_all(&include);
    let _ = std::fs::create_dir_all(&pkgconfig);
    let _ = std::fs::copy(&header, include.join("nacre.h"));
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let pc = format!(
        "prefix={}\nlibdir=${{prefix}}\nincludedir=${{prefix}}/include\n\n\
         Name: nacre\nDescription: the node's client API of the Nacre file system\n\
         Version: {version}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lnacre\n\
         Cflags: -I${{includedir}}\n",
        profile_dir.display()
    );
    let _ = std::fs::write(pkgconfig.join("nacre.pc"), pc);
}
