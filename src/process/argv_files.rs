//! The files a stack's command lines name: literal arguments that are paths
//! (a `--model PATH`, a positional checkpoint directory), found in the argv
//! templates so `check` can say a missing model before a run fails on it,
//! and the planners can read what the checkpoint there declares
//! (`plan::checkpoint`).

use std::path::{Path, PathBuf};

use crate::process::template::{ArgTemplate, ArgvTemplate};

/// A path one argument of a command names, and where in the config.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedFile {
    /// As written in the config.
    pub written: String,
    /// Resolved against the config's directory (the child's cwd).
    pub resolved: PathBuf,
    /// `argv` or `optional (when = KNOB)`.
    pub place: String,
}

/// The literal paths of `argv` past its program (placeholders are filled
/// per run, so only whole literal arguments, or the value of a
/// `--flag=VALUE`, count). A path is text with a `/` that is not a URL.
pub fn named_files(argv: &ArgvTemplate, base_dir: &Path) -> Vec<NamedFile> {
    let main = argv.args.iter().skip(1).map(|a| (a, "argv".to_string()));
    let optional = argv.optional.iter().flat_map(|g| {
        g.args
            .iter()
            .map(move |a| (a, format!("optional (when = \"{}\")", g.when)))
    });
    main.chain(optional)
        .filter_map(|(arg, place)| {
            let written = literal_path(arg)?;
            Some(NamedFile {
                resolved: base_dir.join(&written),
                written,
                place,
            })
        })
        .collect()
}

fn literal_path(arg: &ArgTemplate) -> Option<String> {
    let text = arg.to_string();
    // A placeholder renders as `{name}`; literal text never holds a brace.
    if text.contains('{') {
        return None;
    }
    let value = match text.strip_prefix('-') {
        Some(flag) => flag.split_once('=')?.1.to_string(),
        None => text,
    };
    (value.contains('/') && !value.contains("://")).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::template::Special;

    fn argv(args: &[&str], optional: &[(&str, &[&str])]) -> ArgvTemplate {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let optional: Vec<(String, Vec<String>)> = optional
            .iter()
            .map(|(w, a)| (w.to_string(), a.iter().map(|s| s.to_string()).collect()))
            .collect();
        ArgvTemplate::parse(&args, &optional, &[Special::Out, Special::Port]).unwrap()
    }

    #[test]
    fn literal_paths_are_found_and_placeholders_urls_and_the_program_are_not() {
        let t = argv(
            &[
                "bin/k3",
                "/srv/k3model",
                "--ids",
                "1,2",
                "--trunk",
                "../trunk",
                "--cache-gb",
                "{memory.cache_gb}",
                "--out",
                "{out}",
                "--url",
                "http://h:1/v1",
                "--log-dir=logs/x",
                "--host",
                "127.0.0.1",
            ],
            &[("speculative.draft_len", &["-md", "/models/draft.gguf"])],
        );
        let found = named_files(&t, Path::new("/base"));
        let written: Vec<&str> = found.iter().map(|f| f.written.as_str()).collect();
        assert_eq!(
            written,
            ["/srv/k3model", "../trunk", "logs/x", "/models/draft.gguf"]
        );
        assert_eq!(found[1].resolved, Path::new("/base/../trunk"));
        assert_eq!(found[0].place, "argv");
        assert!(
            found[3].place.contains("speculative.draft_len"),
            "{found:?}"
        );
    }
}
