//! The one-way imports `docs/architecture.md` promises: its module table
//! lists `src/`'s modules lowest first, and a module may import only from
//! modules listed before it. Checked on the source itself, so a new
//! upward import (or a module missing from the table) fails here, naming
//! the file and line.

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The modules of the architecture table, in its order: `| \`name.rs\` |`
/// or `| \`name/\` |` rows of the "Modules" section.
fn documented_order() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let section = doc
        .split("## Modules (`src/`)")
        .nth(1)
        .expect("docs/architecture.md has a \"## Modules (`src/`)\" section");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter_map(|name| {
            name.strip_suffix(".rs")
                .or_else(|| name.strip_suffix('/'))
                .map(str::to_string)
        })
        .collect()
}

/// The top-level modules `src/lib.rs` declares, in its order.
fn declared_order() -> Vec<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').to_string())
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(root().join("src")).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::name` a line of code (not a comment) names.
fn crate_paths(line: &str) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c}`: each first segment of the group.
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let head: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !head.is_empty() {
                    names.push(head);
                }
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.push(head);
        }
    }
    names
}

#[test]
fn lib_rs_declares_the_modules_in_the_documented_order() {
    let documented = documented_order();
    let declared = declared_order();
    assert!(
        documented.len() > 10,
        "the architecture table lists {documented:?}"
    );
    assert_eq!(
        declared, documented,
        "src/lib.rs must declare exactly the modules of docs/architecture.md's table, in its order"
    );
}

#[test]
fn every_module_imports_only_from_modules_below_it() {
    let order = documented_order();
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    files.sort();
    let mut upward = Vec::new();
    for file in files {
        let module = module_of(&file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(own) = rank(&module) else {
            panic!(
                "src/{module} is missing from docs/architecture.md's module table (add its row where its imports put it)"
            );
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for name in crate_paths(line) {
                if let Some(r) = rank(&name)
                    && r > own
                {
                    upward.push(format!(
                        "{}:{}: `{module}` imports `{name}`, which the table lists below it (a module imports only from rows above its own)",
                        file.strip_prefix(root()).unwrap().display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn the_import_scan_sees_grouped_and_plain_paths_and_skips_comments() {
    assert_eq!(crate_paths("use crate::ledger::Ledger;"), ["ledger"]);
    assert_eq!(
        crate_paths("use crate::{config::Config, menu};"),
        ["config", "menu"]
    );
    assert_eq!(
        crate_paths("    let x = crate::display::ratio(y) + crate::vocab::A;"),
        ["display", "vocab"]
    );
    assert!(crate_paths("/// see [`crate::daemon`]").is_empty());
}
