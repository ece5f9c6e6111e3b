//! Every relative link in README.md and docs/**/*.md resolves: the file
//! exists, and a `#fragment` into a Markdown file names one of its headings
//! (GitHub's anchor rule: lower case, punctuation but `-` and `_` dropped,
//! spaces as `-`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read docs/") {
            let path = entry.expect("a dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings, outside code fences.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if !target.contains(char::is_whitespace) {
                out.push(target.to_string());
            }
        }
    }
    out
}

fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("read a markdown file");
    let dir = file.parent().expect("a file's directory");
    let mut broken = Vec::new();
    for link in links(&text) {
        if link.starts_with("http://") || link.starts_with("https://") {
            continue;
        }
        let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !target.exists() {
            broken.push(format!("{}: {link} (no such file)", file.display()));
            continue;
        }
        let is_md = target.extension().is_some_and(|e| e == "md");
        if !fragment.is_empty() && is_md {
            let text = std::fs::read_to_string(&target).expect("read a link's target");
            if !anchors(&text).contains(fragment) {
                broken.push(format!("{}: {link} (no such heading)", file.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let broken: Vec<String> = markdown_files()
        .iter()
        .flat_map(|f| broken_links(f))
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_missing_file_and_a_missing_heading_are_found() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let doc = dir.path().join("a.md");
    std::fs::write(
        &doc,
        "# Title here\n[ok](#title-here) [gone](b.md) [no](#nowhere)\n",
    )
    .expect("write");
    let broken = broken_links(&doc);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("b.md (no such file)"));
    assert!(broken[1].contains("#nowhere (no such heading)"));
}
