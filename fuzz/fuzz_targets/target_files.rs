//! Files a server reads from its targets: the target label, the multi-mount protection
//! record, and the MGS's stored configurations and parameters.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("nacre-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch();
    std::fs::write(dir.join("nacre-label"), data).unwrap();
        let _ = nacre_osd::Label::read(dir);
    let _ = nacre_osd::mmp::MmpRecord::decode(data);
    std::fs::write(dir.join(nacre_osd::mmp::MMP_FILE), data).unwrap();
    if let Ok(f) = nacre_osd::mmp::MmpFile::open(dir) {
        let _ = f.read();
    }
    let f = dir.join("blob");
    std::fs::write(&f, data).unwrap();
    let _ = nacre_mgs::store::load(&f);
    let _ = nacre_mgs::store::load_params(&f);
});
