//! The kernel template sources: `.cu.tera` entry points and the hand-written `.cuh`
//! headers they include, addressed by their path under `templates/`.
//!
//! The set is embedded in the binary at build time (see `build.rs`), or read from a
//! directory to try out an edited template without rebuilding.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fa4_spec::Fnv1a64;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_templates.rs"));
}

/// Headers live under this folder of `templates/` and are included relative to it
/// (`#include "fa4/common/mask.cuh"`).
const INCLUDE_DIR: &str = "include/";

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template file `{0}` is not in the template set")]
    Missing(String),
    #[error("`{from}` includes \"{header}\", which is not under templates/include/")]
    MissingInclude { from: String, header: String },
    #[error("cannot read templates from {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Template files by path relative to `templates/` (e.g. `include/fa4/common/mask.cuh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSet {
    files: BTreeMap<String, String>,
}

impl TemplateSet {
    /// The templates this binary was built with.
    pub fn embedded() -> Self {
        TemplateSet {
            files: embedded::EMBEDDED
                .iter()
                .map(|(p, c)| (p.to_string(), c.to_string()))
                .collect(),
        }
    }

    /// Every file under `dir`, read now.
    pub fn from_dir(dir: &Path) -> Result<Self, TemplateError> {
        fn walk(
            root: &Path,
            dir: &Path,
            files: &mut BTreeMap<String, String>,
        ) -> std::io::Result<()> {
            for entry in std::fs::read_dir(dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    walk(root, &path, files)?;
                } else {
                    let rel = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/");
                    files.insert(rel, std::fs::read_to_string(&path)?);
                }
            }
            Ok(())
        }
        let mut files = BTreeMap::new();
        walk(dir, dir, &mut files).map_err(|source| TemplateError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(TemplateSet { files })
    }

    /// A set from explicit (path, content) pairs.
    pub fn from_files<I, P, C>(files: I) -> Self
    where
        I: IntoIterator<Item = (P, C)>,
        P: Into<String>,
        C: Into<String>,
    {
        TemplateSet {
            files: files
                .into_iter()
                .map(|(p, c)| (p.into(), c.into()))
                .collect(),
        }
    }

    /// Replaces or adds one file.
    pub fn insert(&mut self, path: impl Into<String>, content: impl Into<String>) {
        self.files.insert(path.into(), content.into());
    }

    pub fn get(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }

    /// Every header as (include name, content), the include name being what follows
    /// `#include` (`fa4/common/mask.cuh`). This is what NVRTC is handed.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter_map(|(p, c)| p.strip_prefix(INCLUDE_DIR).map(|name| (name, c.as_str())))
    }

    /// The headers `file` includes, directly or through other headers, by include name.
    pub fn include_closure(&self, file: &str) -> Result<BTreeSet<String>, TemplateError> {
        let root = self
            .get(file)
            .ok_or_else(|| TemplateError::Missing(file.to_string()))?;
        let mut seen = BTreeSet::new();
        let mut todo: Vec<(String, &str)> = vec![(file.to_string(), root)];
        while let Some((from, text)) = todo.pop() {
            for header in quoted_includes(text) {
                if seen.contains(header) {
                    continue;
                }
                let content = self.get(&format!("{INCLUDE_DIR}{header}")).ok_or_else(|| {
                    TemplateError::MissingInclude {
                        from: from.clone(),
                        header: header.to_string(),
                    }
                })?;
                seen.insert(header.to_string());
                todo.push((header.to_string(), content));
            }
        }
        Ok(seen)
    }

    /// Content hash of a template and every header it includes: any edit to any of
    /// them changes the hash, and with it every kernel id rendered from the template.
    pub fn template_hash(&self, file: &str) -> Result<String, TemplateError> {
        let mut h = Fnv1a64::default();
        h.field(file).field(self.get(file).unwrap_or_default());
        for header in self.include_closure(file)? {
            let content = self
                .get(&format!("{INCLUDE_DIR}{header}"))
                .unwrap_or_default();
            h.field(&header).field(content);
        }
        Ok(h.hex())
    }
}

/// The targets of `#include "..."` lines (angle-bracket includes are left to NVRTC).
fn quoted_includes(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix('#')?.trim_start();
        let rest = rest.strip_prefix("include")?.trim_start();
        let rest = rest.strip_prefix('"')?;
        rest.split('"').next()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> TemplateSet {
        TemplateSet::from_files([
            ("k.cu.tera", "#include \"a.cuh\"\nint x;"),
            (
                "include/a.cuh",
                "#pragma once\n  #  include \"b/c.cuh\"\n#include <cuda.h>",
            ),
            ("include/b/c.cuh", "#pragma once\n#include \"a.cuh\""),
            ("include/unused.cuh", "//"),
        ])
    }

    #[test]
    fn closure_follows_nested_and_cyclic_includes() {
        let set = toy();
        let closure = set.include_closure("k.cu.tera").unwrap();
        assert_eq!(
            closure.into_iter().collect::<Vec<_>>(),
            vec!["a.cuh".to_string(), "b/c.cuh".to_string()]
        );
    }

    #[test]
    fn hash_covers_included_headers_only() {
        let base = toy();
        let h0 = base.template_hash("k.cu.tera").unwrap();

        let mut edited = base.clone();
        edited.insert(
            "include/b/c.cuh",
            "#pragma once\n#include \"a.cuh\"\n// edit",
        );
        assert_ne!(edited.template_hash("k.cu.tera").unwrap(), h0);

        let mut unrelated = base.clone();
        unrelated.insert("include/unused.cuh", "// changed");
        assert_eq!(unrelated.template_hash("k.cu.tera").unwrap(), h0);
    }

    #[test]
    fn missing_include_is_named() {
        let set = TemplateSet::from_files([("k.cu.tera", "#include \"nope.cuh\"")]);
        let err = set.include_closure("k.cu.tera").unwrap_err().to_string();
        assert!(
            err.contains("nope.cuh") && err.contains("k.cu.tera"),
            "{err}"
        );
    }

    #[test]
    fn embedded_set_has_the_portable_template() {
        let set = TemplateSet::embedded();
        assert!(set.get("portable_fwd.cu.tera").is_some());
        let closure = set.include_closure("portable_fwd.cu.tera").unwrap();
        assert!(closure.contains("fa4/portable/kernel.cuh"));
        assert!(closure.contains("fa4/common/softmax.cuh"));
    }
}
