//! `nacre gen-docs`: man pages and shell completions generated from the command line's own
//! definitions (clap), so they never drift from it. The Debian package ships them.

use anyhow::Context;
use std::path::Path;

/// Writes `nacre.1` and a `nacre-COMMAND.1` per command into `man` (if given) and bash, zsh
/// and fish completions into `completions` (if given).
pub(crate) fn gen_docs(
    cmd: clap::Command,
    man: Option<&Path>,
    completions: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(dir) = man {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        write_man(&cmd, "nacre", dir)?;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = format!("nacre-{}", sub.get_name());
            write_man(&sub.clone().name(name.clone()), &name, dir)?;
        }
    }
    if let Some(dir) = completions {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            clap_complete::generate_to(shell, &mut cmd.clone(), "nacre", dir)
                .with_context(|| format!("cannot write {shell} completions"))?;
        }
    }
    Ok(())
}

fn write_man(cmd: &clap::Command, name: &str, dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))
}
