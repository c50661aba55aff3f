//! File writes that never leave a half-written file where a complete one is expected.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}{hint}")]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
    hint: &'static str,
}

impl WriteError {
    pub fn new(path: &Path, source: std::io::Error) -> Self {
        let hint = match source.kind() {
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                "; choose a writable folder with --out"
            }
            _ => "",
        };
        WriteError {
            path: path.to_path_buf(),
            source,
            hint,
        }
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`: a
/// reader sees the old file or the new one, never a torn one, even across a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| WriteError::new(dir, e))?;
    // Unique per call, not only per process: two threads may write the same path.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.tmp{}-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(WriteError::new(path, e));
    }
    Ok(())
}

/// Writes only when the content differs, so unchanged outputs keep their timestamps.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    write_atomic(path, bytes)
}

/// Fails early, with the folder named, when `dir` cannot be created or written.
pub fn ensure_writable_dir(dir: &Path) -> Result<(), WriteError> {
    std::fs::create_dir_all(dir).map_err(|e| WriteError::new(dir, e))?;
    let probe = dir.join(format!(".fa4-gen-probe{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| WriteError::new(dir, e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/file.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn threads_writing_one_path_all_succeed() {
        // A plan that names one kernel twice compiles it on two threads at once; each
        // write's temporary file must be its own, or one rename finds the other's gone.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("src/k.cu");
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(p, &[t; 4096]).unwrap();
                    }
                });
            }
        });
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn unwritable_dir_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        // A folder cannot be created under a regular file, whoever runs the test.
        let err = ensure_writable_dir(&file.join("sub")).unwrap_err();
        assert!(err.to_string().contains("plain-file"), "{err}");
    }
}
