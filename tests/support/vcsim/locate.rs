//! Finds (and if needed builds, once, under a file lock) the harness binary.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

/// The harness binary: `$VOLMIG_VCSIM_BIN`, else `target/vcsim/vcsim-harness`, built with
/// `make -s vcsim` first when missing or older than its sources.
pub fn harness_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("VOLMIG_VCSIM_BIN") {
        return PathBuf::from(bin);
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build_harness) {
        Ok(bin) => bin.clone(),
        Err(e) => panic!("vcsim: {e}"),
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn harness_is_stale(root: &Path, bin: &Path) -> bool {
    let Some(built) = modified(bin) else {
        return true;
    };
    let src = root.join("tests/support/vcsim");
    let mut inputs: Vec<PathBuf> = vec![root.join("mk/vcsim.mk")];
    if let Ok(entries) = std::fs::read_dir(&src) {
        inputs.extend(
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "go")),
        );
    }
    inputs
        .iter()
        .any(|p| modified(p).is_some_and(|m| m > built))
}

fn build_harness() -> Result<PathBuf, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target");
    let bin = target.join("vcsim/vcsim-harness");
    if !harness_is_stale(&root, &bin) {
        return Ok(bin);
    }
    std::fs::create_dir_all(target.join("vcsim"))
        .map_err(|e| format!("create {}: {e}", target.join("vcsim").display()))?;
    let lock_path = target.join("vcsim/.build.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;
    // Another test process may have built it while this one waited for the lock.
    if harness_is_stale(&root, &bin) {
        let out = std::process::Command::new("make")
            .args(["-s", "vcsim"])
            .arg(format!("TARGET_DIR={}", target.display()))
            .current_dir(&root)
            .output()
            .map_err(|e| format!("run make vcsim: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "make vcsim failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    drop(lock);
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("make vcsim did not produce {}", bin.display()))
    }
}
