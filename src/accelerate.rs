//! HuggingFace Accelerate's launcher, `accelerate launch` (also `python -m accelerate.commands.launch`), as
//! its own source reads the job (huggingface/accelerate, commit 16cb6eb, July 2026):
//!
//! * The options (`launch_command_parser`, src/accelerate/commands/launch.py): `--main_process_ip`,
//!   `--main_process_port`, `--num_machines`, `--machine_rank`, `--config_file`; every option with an
//!   underscore also has its hyphen form (`_StoreAction` in src/accelerate/commands/utils.py adds
//!   `--main-process-ip`). Its options end at the training script (argparse `REMAINDER`).
//! * The config file (`_validate_launch_command`, launch.py): read when `--config_file` is given, or when the
//!   default file exists and `--cpu` is not given; a value from it is used only where the flag was not given
//!   (`getattr(args, name, None) is None`), and only for `compute_environment: LOCAL_MACHINE` (the default;
//!   SageMaker has its own launcher). A `--config_file` that does not exist makes `accelerate launch` fail
//!   (`load_config_from_file`).
//! * The default file (src/accelerate/commands/config/config_args.py, module level): `hf_cache_home =
//!   os.path.expanduser(os.environ.get("HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"),
//!   "huggingface")))`, then `<hf_cache_home>/accelerate/default_config.yaml` (the JSON and YAML defaults have
//!   the same name). A file whose name ends in `.json` is JSON, anything else YAML (`yaml.safe_load`).
//! * What they mean (`prepare_multi_gpu_env`, src/accelerate/utils/launch.py): with `num_machines > 1` the
//!   master is torchrun's `--rdzv_endpoint main_process_ip:main_process_port` (or `--master_addr`/`--master_port`
//!   with `--same_network`), static rendezvous (TCPStore); the port defaults to 29500; `num_machines` defaults
//!   to 1 (`_validate_launch_command`) and `machine_rank` to 0 (`ClusterConfig`).
//!
//! The config file is read by a bounded reader of the few top-level scalar keys ncclenv needs, not by a YAML
//! library: a file `accelerate config` writes is a flat block mapping (`yaml.safe_dump`) whose nested
//! sections (`fsdp_config:`, `deepspeed_config:`) ncclenv skips; see [`parse_yaml`] and docs/policy.md for
//! the measured size of the alternative.

use std::collections::BTreeMap;

/// The keys of the config file ncclenv reads.
pub const KEYS: [&str; 6] = [
    "compute_environment",
    "main_process_ip",
    "main_process_port",
    "num_machines",
    "machine_rank",
    "num_processes",
];

/// The largest config file read, in bytes (one `accelerate config` writes is under 2 KiB).
pub const FILE_MAX: usize = 256 << 10;

/// `accelerate launch`'s options that take a value and that ncclenv reads, in both spellings.
pub const VALUED: &[&str] = &[
    "--config_file",
    "--config-file",
    "--main_process_ip",
    "--main-process-ip",
    "--main_process_port",
    "--main-process-port",
    "--num_machines",
    "--num-machines",
    "--machine_rank",
    "--machine-rank",
    "--num_processes",
    "--num-processes",
    "--rdzv_backend",
    "--rdzv-backend",
];

/// `accelerate launch`'s options that take no value (its `store_true` options, launch.py), in both
/// spellings; every other option takes a value.
pub const FLAGS: &[&str] = &[
    "-m",
    "-q",
    "--module",
    "--quiet",
    "--cpu",
    "--debug",
    "--downcast_bf16",
    "--downcast-bf16",
    "--dynamo_use_dynamic",
    "--dynamo-use-dynamic",
    "--dynamo_use_fullgraph",
    "--dynamo-use-fullgraph",
    "--dynamo_use_regional_compilation",
    "--dynamo-use-regional-compilation",
    "--enable_cpu_affinity",
    "--enable-cpu-affinity",
    "--fp8_use_autocast_during_eval",
    "--fp8-use-autocast-during-eval",
    "--multi_gpu",
    "--multi-gpu",
    "--no_python",
    "--no-python",
    "--same_network",
    "--same-network",
    "--tpu",
    "--tpu_cluster",
    "--tpu-cluster",
    "--tpu_use_sudo",
    "--tpu-use-sudo",
    "--use_deepspeed",
    "--use-deepspeed",
    "--use_fsdp",
    "--use-fsdp",
    "--use_megatron_lm",
    "--use-megatron-lm",
    "--use_parallelism_config",
    "--use-parallelism-config",
];

/// The config file `accelerate launch` reads, and what ncclenv read from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigFile {
    /// Its path, as resolved (see the module documentation).
    pub path: String,
    /// The values of [`KEYS`] it sets to a scalar (a `null` is not set), as written.
    pub values: Vec<(&'static str, String)>,
    /// Why it could not be used (a named file that cannot be read or parsed), one sentence.
    pub problem: Option<String>,
}

impl ConfigFile {
    /// The value of `key`, when the file sets it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The default config file's path as Accelerate resolves it from `env` (`HF_HOME`, else `XDG_CACHE_HOME` or
/// `~/.cache`, then `huggingface/accelerate/default_config.yaml`; `~` is `HOME`). `None` when a `~` cannot be
/// expanded (no `HOME`, or `~user`).
pub fn default_path(env: &BTreeMap<String, String>) -> Option<String> {
    let hf_home = match env.get("HF_HOME") {
        // os.environ.get: a variable set to "" is set.
        Some(h) => h.clone(),
        None => {
            let xdg = env.get("XDG_CACHE_HOME").map_or("~/.cache", String::as_str);
            join(xdg, "huggingface")
        }
    };
    let hf_home = expand_user(&hf_home, env)?;
    Some(join(&join(&hf_home, "accelerate"), "default_config.yaml"))
}

/// `os.path.join(a, b)`: `b` when it is absolute or `a` is empty, else `a/b` (one separator).
fn join(a: &str, b: &str) -> String {
    if b.starts_with('/') || a.is_empty() {
        b.to_string()
    } else if a.ends_with('/') {
        format!("{a}{b}")
    } else {
        format!("{a}/{b}")
    }
}

/// `os.path.expanduser` for `~` and `~/…` from `HOME`; other text unchanged; `None` for `~user` or no `HOME`.
fn expand_user(p: &str, env: &BTreeMap<String, String>) -> Option<String> {
    match p.strip_prefix('~') {
        None => Some(p.to_string()),
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            let home = env.get("HOME")?;
            let home = home.trim_end_matches('/');
            Some(format!("{home}{rest}"))
        }
        Some(_) => None,
    }
}

/// Which config file `accelerate launch` with options `opts` reads: `--config_file` (`named`), else the
/// default file unless `--cpu` is given. `None` when none is read.
pub fn which(opts: &[(String, String)], env: &BTreeMap<String, String>) -> Option<(String, bool)> {
    let named = opts
        .iter()
        .rev()
        .find(|(n, _)| n == "--config_file" || n == "--config-file");
    match named {
        Some((_, f)) => Some((f.clone(), true)),
        None if opts.iter().any(|(n, _)| n == "--cpu") => None,
        None => default_path(env).map(|p| (p, false)),
    }
}

/// Read the config file at `path` through `read` (the file's bytes, or `Err((missing, reason))`). A default
/// file that does not exist is not read (`None`), as Accelerate reads it only when it exists; a named one
/// that does not exist, cannot be read or does not parse is a [`ConfigFile::problem`].
pub fn load(
    path: &str,
    named: bool,
    read: &crate::launch_facts::ReadFile<'_>,
) -> Option<ConfigFile> {
    let mut file = ConfigFile {
        path: path.to_string(),
        ..ConfigFile::default()
    };
    let bytes = match read(path, FILE_MAX) {
        Ok(b) => b,
        Err((true, _)) if !named => return None,
        Err((_, why)) => {
            file.problem = Some(format!(
                "accelerate launch's config file {path} cannot be read ({why}); its values are not used"
            ));
            return Some(file);
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let parsed = if path.ends_with(".json") {
        parse_json(&text)
    } else {
        parse_yaml(&text)
    };
    match parsed {
        Ok(values) => file.values = values,
        Err(why) => {
            file.problem = Some(format!(
                "accelerate launch's config file {path}: {why}; its values are not used"
            ))
        }
    }
    Some(file)
}

/// The top-level scalar values of [`KEYS`] in a YAML file as `accelerate config` writes it (`yaml.safe_dump`
/// of a flat mapping): lines `key: value` at column 0, the value plain (a trailing ` #` comment removed),
/// `'single'` (`''` is a quote) or `"double"` quoted (`\"` and `\\` unescaped); `null`, `~` and nothing are
/// no value. Indented lines (nested sections), comments, `---` and `...` are skipped; a key given twice
/// counts with its last value, as `yaml.safe_load` keeps it. A file that is not a block mapping (a flow
/// mapping `{…}`, a list) is an error, as is a value of a key read that spans lines (a quote left open).
pub fn parse_yaml(text: &str) -> Result<Vec<(&'static str, String)>, String> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for line in text.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let t = line.trim_start_matches('\u{feff}');
        if t.is_empty() || t.starts_with('#') || t.starts_with(' ') || t.starts_with('\t') {
            continue;
        }
        if t == "---" || t == "..." || t.starts_with("--- ") || t.starts_with("%") {
            continue;
        }
        if t.starts_with('{') || t.starts_with('[') || t.starts_with("- ") {
            return Err("not a YAML mapping of keys and values".into());
        }
        let Some((key, rest)) = t.split_once(':') else {
            continue;
        };
        let Some(key) = KEYS.iter().copied().find(|k| *k == key.trim()) else {
            continue;
        };
        out.retain(|(k, _)| *k != key);
        if let Some(v) = yaml_scalar(rest.trim())
            .ok_or_else(|| format!("the value of {key} is not one line of text"))?
        {
            out.push((key, v));
        }
    }
    Ok(out)
}

/// One YAML scalar written on one line: `Some(None)` for no value (`null`, `~`, nothing), `None` when it
/// cannot be read on one line (a quote left open, a block scalar `|`/`>`).
fn yaml_scalar(value: &str) -> Option<Option<String>> {
    if let Some(rest) = value.strip_prefix('\'') {
        // '' is a quote inside single quotes.
        let mut s = String::new();
        let mut chars = rest.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    s.push('\'');
                } else {
                    return Some(Some(s));
                }
            } else {
                s.push(c);
            }
        }
        return None;
    }
    if let Some(rest) = value.strip_prefix('"') {
        let mut s = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(Some(s)),
                '\\' => s.push(chars.next()?),
                _ => s.push(c),
            }
        }
        return None;
    }
    if value.starts_with('|') || value.starts_with('>') {
        return None;
    }
    // A plain scalar ends before " #".
    let value = value.split(" #").next().unwrap_or("").trim();
    match value {
        "" | "~" | "null" | "Null" | "NULL" => Some(None),
        _ => Some(Some(value.to_string())),
    }
}

/// The top-level values of [`KEYS`] in a JSON config file: strings and numbers as written, `null` as no
/// value.
pub fn parse_json(text: &str) -> Result<Vec<(&'static str, String)>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    let mut out = Vec::new();
    for key in KEYS {
        match obj.get(key) {
            Some(serde_json::Value::String(s)) => out.push((key, s.clone())),
            Some(serde_json::Value::Number(n)) => out.push((key, n.to_string())),
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_default_file_is_resolved_as_accelerate_resolves_it() {
        /// (the variables, the default file).
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: [Case; 7] = [
            (
                &[("HOME", "/root")],
                Some("/root/.cache/huggingface/accelerate/default_config.yaml"),
            ),
            (
                &[("HOME", "/home/u/"), ("XDG_CACHE_HOME", "/xdg")],
                Some("/xdg/huggingface/accelerate/default_config.yaml"),
            ),
            (
                &[
                    ("HOME", "/root"),
                    ("XDG_CACHE_HOME", "/xdg"),
                    ("HF_HOME", "/hf"),
                ],
                Some("/hf/accelerate/default_config.yaml"),
            ),
            (
                &[("HF_HOME", "~/hf"), ("HOME", "/h")],
                Some("/h/hf/accelerate/default_config.yaml"),
            ),
            // os.environ.get: an empty HF_HOME is set (a relative path).
            (&[("HF_HOME", "")], Some("accelerate/default_config.yaml")),
            (&[], None),
            (&[("HF_HOME", "~other/hf")], None),
        ];
        for (vars, want) in cases {
            assert_eq!(default_path(&env(vars)).as_deref(), want, "{vars:?}");
        }
    }

    #[test]
    fn which_file_flag_then_default_unless_cpu() {
        let e = env(&[("HOME", "/root")]);
        let o = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            which(&o(&[("--config-file", "/c.yaml")]), &e),
            Some(("/c.yaml".to_string(), true))
        );
        assert_eq!(which(&o(&[("--cpu", "")]), &e), None);
        assert_eq!(
            which(&o(&[("--cpu", ""), ("--config_file", "/c.yaml")]), &e),
            Some(("/c.yaml".to_string(), true))
        );
        assert!(
            which(&[], &e).is_some_and(|(p, named)| p.ends_with("default_config.yaml") && !named)
        );
    }

    #[test]
    fn the_bounded_reader_takes_top_level_scalars_only() {
        let text = "compute_environment: LOCAL_MACHINE\r\n\
                    deepspeed_config:\n  main_process_ip: 10.9.9.9\n  num_machines: 7\n\
                    distributed_type: MULTI_GPU\n\
                    # main_process_ip: 10.8.8.8\n\
                    machine_rank: 1 # this node\n\
                    main_process_ip: 'master-0.job'\n\
                    main_process_port: null\n\
                    num_machines: 1\n\
                    num_machines: 2\n";
        let v = parse_yaml(text).expect("parses");
        assert_eq!(
            v,
            vec![
                ("compute_environment", "LOCAL_MACHINE".to_string()),
                ("machine_rank", "1".to_string()),
                ("main_process_ip", "master-0.job".to_string()),
                ("num_machines", "2".to_string()),
            ]
        );
        assert_eq!(
            parse_yaml("main_process_ip: \"a\\\"b\"\nmain_process_port: 'it''s'\n").expect("q"),
            vec![
                ("main_process_ip", "a\"b".to_string()),
                ("main_process_port", "it's".to_string())
            ]
        );
        assert!(parse_yaml("{main_process_ip: 10.0.0.1}").is_err());
        assert!(parse_yaml("main_process_ip: 'open\n").is_err());
        assert!(parse_yaml("main_process_ip: |\n  10.0.0.1\n").is_err());
        // A key ncclenv does not read may be anything.
        assert_eq!(parse_yaml("fsdp_config: |\n  x\n").expect("skip"), vec![]);
        assert_eq!(
            parse_json(
                "{\"main_process_ip\": \"10.0.0.1\", \"num_machines\": 2, \"machine_rank\": null}"
            )
            .expect("json"),
            vec![
                ("main_process_ip", "10.0.0.1".to_string()),
                ("num_machines", "2".to_string())
            ]
        );
        assert!(parse_json("[1]").is_err());
    }
}
