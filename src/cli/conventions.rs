//! The command line's conventions, applied to every command and flag in one place, so that a
//! flag added anywhere follows them without saying so: every flag is also the environment
//! variable `COPYRATOR_<FLAG>`, one name across commands; `-h` is short (each flag's first
//! sentence, the tuning flags left to `--help`), under headings; help never cites the SPEC.

use std::sync::OnceLock;

use clap::{Arg, Command, CommandFactory};

/// The prefix of every flag's environment variable.
pub const ENV_PREFIX: &str = "COPYRATOR_";

/// Environment variables renamed to follow the one rule: the old name still works (read when
/// the new one is unset), so existing installs keep their settings.
pub const RENAMED_ENV: [(&str, &str); 2] = [
    (
        "COPYRATOR_WEBHOOK_CONFIGURATIONS",
        "COPYRATOR_WEBHOOK_CONFIGURATION",
    ),
    ("COPYRATOR_CERTS_OUT", "COPYRATOR_OUT"),
];

/// Flags of `serve` by heading, in the order `-h` shows them. A flag not listed lands under
/// "Other options"; one marked `*` is shown by `--help` only (tuning, rarely changed).
const SERVE_HEADINGS: &[(&str, &[&str])] = &[
    (
        "What is copied, and where",
        &[
            "trusted_namespaces",
            "exclude_namespaces",
            "copy_kinds",
            "*bind_cluster_roles",
            "*bind_roles",
            "*escalate_roles",
            "namespaces",
            "*default_cas_file",
            "*max_sources_per_namespace",
            "*max_source_metadata_bytes",
        ],
    ),
    (
        "Cluster",
        &[
            "kubeconfig",
            "resync_interval",
            "pod_gate_timeout",
            "hub_sync_interval",
            "*hub_members_namespace",
            "*own_username",
            "*unlabelled_scan_interval",
        ],
    ),
    (
        "Webhook server and TLS",
        &[
            "webhook_addr",
            "*http_addr",
            "tls_secret",
            "*tls_secret_namespace",
            "*tls_dns_names",
            "*tls_ips",
            "*webhook_configuration",
            "*tls_cert",
            "*tls_key",
            "client_ca",
            "*api_server_cidrs",
            "*ca_validity",
            "*cert_validity",
            "*cert_propagation",
            "*cert_check_interval",
            "*tls_reload_interval",
        ],
    ),
    (
        "Webhook limits",
        &[
            "*max_body_bytes",
            "*memory_limit",
            "*webhook_max_in_flight",
            "*webhook_max_in_flight_per_peer",
            "*webhook_body_bytes_in_flight",
            "*webhook_body_bytes_per_peer",
            "*webhook_request_timeout",
            "*webhook_first_request_timeout",
            "*webhook_idle_timeout",
            "*webhook_max_connections",
            "*webhook_max_connections_per_peer",
            "*webhook_max_streams",
        ],
    ),
    (
        "Workers and API limits",
        &[
            "workers",
            "*threads",
            "api_qps",
            "*api_burst",
            "*api_read_qps",
            "*api_read_burst",
            "*api_read_concurrency",
            "*queue_capacity",
            "*fanout_concurrency",
            "*fanout_bytes",
            "*source_cache_bytes",
            "*new_namespace_delay",
            "*list_page_size",
            "*api_timeout",
        ],
    ),
    (
        "Leader election",
        &[
            "leader_election",
            "lease_namespace",
            "*lease_name",
            "*lease_duration",
            "*identity",
        ],
    ),
    ("Logging", &["log_format", "log_level"]),
];

/// Headings of the flags the other commands share.
const SHARED_HEADINGS: &[(&str, &[&str])] = &[
    (
        "Policy (as the running copyrator's; explain reads it from its Lease)",
        &[
            "trusted_namespaces",
            "exclude_namespaces",
            "copy_kinds",
            "*bind_cluster_roles",
            "*bind_roles",
            "*escalate_roles",
            "*max_sources_per_namespace",
            "*max_source_metadata_bytes",
        ],
    ),
    (
        "Finding copyrator",
        &["lease_namespace", "lease_name", "webhook_configuration"],
    ),
];

/// The command line: the derived definition with the conventions applied. `main` parses with
/// it; the tests read it.
pub fn command() -> Command {
    conventions(super::Cli::command())
}

/// The environment variable of the flag `--long`.
pub fn env_name(long: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        long.to_ascii_uppercase().replace('-', "_")
    )
}

/// Sets each renamed variable's new name from its old one, when only the old one is set.
///
/// # Safety
/// Changes the process environment: call it before any other thread exists.
pub unsafe fn carry_renamed_env() {
    for (old, new) in RENAMED_ENV {
        if std::env::var_os(new).is_none()
            && let Some(value) = std::env::var_os(old)
        {
            // SAFETY: the caller runs this while the process has one thread.
            unsafe { std::env::set_var(new, value) };
        }
    }
}

fn conventions(cmd: Command) -> Command {
    let serve = cmd.get_name() == "serve";
    let headings = if serve {
        SERVE_HEADINGS
    } else {
        SHARED_HEADINGS
    };
    let has_flags = cmd
        .get_arguments()
        .any(|a| !a.is_positional() && !is_builtin(a));
    let about = cmd.get_about().map(|a| without_spec(&a.to_string()));
    let long_about = cmd.get_long_about().map(|a| without_spec(&a.to_string()));
    let mut cmd = cmd.mut_args(|arg| flag_conventions(arg, headings, serve));
    if let Some(about) = about {
        cmd = cmd.about(about);
    }
    if let Some(long_about) = long_about {
        cmd = cmd.long_about(long_about);
    }
    let cmd = if has_flags {
        cmd.after_help(
            "Every flag is also an environment variable: COPYRATOR_<FLAG> (--log-level: COPYRATOR_LOG_LEVEL).",
        )
    } else {
        cmd
    };
    cmd.max_term_width(100).mut_subcommands(conventions)
}

fn is_builtin(arg: &Arg) -> bool {
    matches!(arg.get_id().as_str(), "help" | "version")
}

fn flag_conventions(
    arg: Arg,
    headings: &'static [(&'static str, &'static [&'static str])],
    serve: bool,
) -> Arg {
    if is_builtin(&arg) {
        return arg;
    }
    let mut arg = spell_help(arg);
    if arg.is_positional() {
        return arg;
    }
    if let Some(long) = arg.get_long() {
        // clap keeps `&'static str` names: the command is built once per process.
        let env: &'static str = Box::leak(env_name(long).into_boxed_str());
        arg = arg.env(env).hide_env(true);
    }
    let id = arg.get_id().as_str().to_string();
    let derived = arg
        .get_value_names()
        .is_some_and(|names| names.iter().all(|n| n.as_str() == id.to_ascii_uppercase()));
    if derived && let Some(name) = arg.get_long().and_then(value_name) {
        arg = arg.value_name(name);
    }
    let placed = headings.iter().find_map(|(heading, ids)| {
        ids.iter()
            .find(|i| i.trim_start_matches('*') == id)
            .map(|i| (*heading, i.starts_with('*')))
    });
    match placed {
        Some((heading, tuning)) => arg.help_heading(heading).hide_short_help(tuning),
        None if serve => arg.help_heading("Other options"),
        None => arg,
    }
}

/// `-h` gets each flag's first sentence and `--help` the whole text, both without SPEC
/// references (the SPEC is for those who build copyrator; help is for those who run it).
fn spell_help(arg: Arg) -> Arg {
    let Some(help) = arg.get_help().map(ToString::to_string) else {
        return arg;
    };
    let long = arg
        .get_long_help()
        .map(ToString::to_string)
        .unwrap_or_else(|| help.clone());
    let short = first_sentence(&without_spec(&help));
    arg.help(short).long_help(without_spec(&long))
}

/// The text up to its first sentence's end (without the period, as clap prints a single
/// sentence), shortened at a clause when that is long and the clause says enough.
fn first_sentence(text: &str) -> String {
    let text = text.trim();
    // A sentence ends at ". " before a capital; "e.g. " does not end one.
    let end = text.match_indices(". ").map(|(at, _)| at).find(|&at| {
        text[at + 2..].starts_with(|c: char| c.is_ascii_uppercase()) && !text[..at].ends_with("e.g")
    });
    let sentence = match end {
        Some(at) => &text[..at],
        None => text.trim_end_matches('.'),
    };
    const LONG: usize = 100;
    const ENOUGH: usize = 30;
    if sentence.chars().count() <= LONG {
        return sentence.to_string();
    }
    // At a clause outside parentheses.
    let balanced = |head: &str| head.matches('(').count() == head.matches(')').count();
    ["; ", ": "]
        .iter()
        .flat_map(|sep| sentence.match_indices(sep).map(|(at, _)| at))
        .filter(|&at| at >= ENOUGH && balanced(&sentence[..at]))
        .min()
        .map_or_else(|| sentence.to_string(), |at| sentence[..at].to_string())
}

/// A short value name for a flag whose derived one is its long name in capitals, by what the
/// flag holds (`--resync-interval <DURATION>`), so that `-h` keeps a flag on one line.
fn value_name(long: &str) -> Option<&'static str> {
    const BY_SUFFIX: [(&str, &str); 12] = [
        ("-interval", "DURATION"),
        ("-timeout", "DURATION"),
        ("-validity", "DURATION"),
        ("-duration", "DURATION"),
        ("-delay", "DURATION"),
        ("-propagation", "DURATION"),
        ("-bytes", "SIZE"),
        ("namespaces", "NS,..."),
        ("namespace", "NAMESPACE"),
        ("-file", "FILE"),
        ("-addr", "ADDR"),
        ("kinds", "KIND,..."),
    ];
    BY_SUFFIX
        .iter()
        .find(|(suffix, _)| long.ends_with(suffix))
        .map(|(_, name)| *name)
}

/// `text` without its references to SPEC sections.
pub fn without_spec(text: &str) -> String {
    static PATTERNS: OnceLock<[(regex::Regex, &str); 4]> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        let section = r"SPEC §[0-9]+(?:\.[0-9]+)*(?:,? (?:item|items) [0-9]+)?";
        let re = |p: String| regex::Regex::new(&p).expect("a valid pattern");
        [
            // "(SPEC §9.10)", "(SPEC §6.4, and more)"
            (re(format!(r"\s*\({section}(?:, [^;)]*)?\)")), ""),
            // "(SPEC §9.10; `rbac.bindClusterRoles`)" keeps what follows.
            (re(format!(r"\({section}[;,] ")), "("),
            // "... (`x`, SPEC §3.2)" and any other.
            (re(format!(r",? ?(?:see )?{section}[;:,]? ?")), " "),
            (re(r"\(\s*\)|\s+([.,;:)])".to_string()), "$1"),
        ]
    });
    let mut out = text.to_string();
    for (re, with) in patterns {
        out = re.replace_all(&out, *with).into_owned();
    }
    out.replace("  ", " ").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand, leaves first, with its path (`manifests webhooks`).
    fn commands() -> Vec<(String, Command)> {
        fn walk(prefix: &str, cmd: &Command, out: &mut Vec<(String, Command)>) {
            // clap's own `help` subcommands take no flags.
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let path = format!("{prefix} {}", sub.get_name()).trim().to_string();
                walk(&path, sub, out);
                out.push((path, sub.clone()));
            }
        }
        let mut root = command();
        root.build();
        let mut out = Vec::new();
        walk("", &root, &mut out);
        out
    }

    fn flags(cmd: &Command) -> impl Iterator<Item = &Arg> {
        cmd.get_arguments()
            .filter(|a| !a.is_positional() && !is_builtin(a))
    }

    fn render(path: &str, flag: &str) -> String {
        let argv = std::iter::once("copyrator")
            .chain(path.split(' '))
            .chain([flag]);
        match command().try_get_matches_from(argv) {
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.to_string(),
            other => panic!("{path} {flag}: {other:?}"),
        }
    }

    #[test]
    fn every_flag_is_copyrator_and_its_name_in_the_environment() {
        for (path, cmd) in commands() {
            for arg in flags(&cmd) {
                let long = arg.get_long().expect("every flag has a long name");
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                assert_eq!(
                    env.as_deref(),
                    Some(env_name(long).as_str()),
                    "{path} --{long}"
                );
            }
        }
        assert_eq!(
            env_name("trusted-namespaces"),
            "COPYRATOR_TRUSTED_NAMESPACES"
        );
    }

    /// One setting, one variable: a flag name means the same wherever it appears (its value
    /// parser and, so, its variable), and a renamed variable's new name is some flag's.
    #[test]
    fn a_flag_name_is_one_setting_across_commands() {
        let mut seen: std::collections::BTreeMap<String, (String, Option<char>)> =
            Default::default();
        for (path, cmd) in commands() {
            for arg in flags(&cmd) {
                let long = arg.get_long().unwrap_or_default().to_string();
                let short = arg.get_short();
                if let Some((first, first_short)) = seen.get(&long) {
                    assert!(
                        first_short.is_none() || short.is_none() || *first_short == short,
                        "--{long}: -{first_short:?} in {first}, -{short:?} in {path}"
                    );
                } else {
                    seen.insert(long, (path.clone(), short));
                }
            }
        }
        for (_, new) in RENAMED_ENV {
            let flag = new
                .trim_start_matches(ENV_PREFIX)
                .to_ascii_lowercase()
                .replace('_', "-");
            assert!(seen.contains_key(&flag), "{new} is no flag's");
        }
    }

    /// `-n` is one namespace everywhere, as kubectl's: never a list.
    #[test]
    fn dash_n_is_one_namespace_everywhere() {
        for (path, cmd) in commands() {
            for arg in flags(&cmd).filter(|a| a.get_short() == Some('n')) {
                assert_eq!(arg.get_long(), Some("namespace"), "{path}");
                assert!(
                    arg.get_value_delimiter().is_none(),
                    "{path}: -n takes no list"
                );
            }
        }
    }

    #[test]
    fn short_help_is_short_and_grouped() {
        let short = render("serve", "-h");
        let lines = short.lines().count();
        assert!(lines <= 60, "serve -h is {lines} lines:\n{short}");
        for heading in [
            "What is copied, and where:",
            "Cluster:",
            "Webhook server and TLS:",
            "Workers and API limits:",
            "Leader election:",
            "Logging:",
        ] {
            assert!(short.contains(heading), "serve -h lacks {heading}\n{short}");
        }
        let long = render("serve", "--help");
        assert!(long.contains("Webhook limits:") && long.contains("--webhook-max-streams"));
        assert!(
            !short.contains("--webhook-max-streams"),
            "tuning flags are for --help"
        );
        assert!(long.contains("[default: 6Mi]"), "sizes read as written");
    }

    #[test]
    fn help_never_cites_the_spec() {
        for (path, _) in commands() {
            for flag in ["-h", "--help"] {
                let help = render(&path, flag);
                assert!(!help.contains("SPEC"), "{path} {flag}:\n{help}");
                assert!(!help.contains("§"), "{path} {flag}:\n{help}");
            }
        }
    }

    #[test]
    fn spec_references_leave_readable_text() {
        for (text, expect) in [
            ("Roles it may bind (SPEC §9.10).", "Roles it may bind."),
            (
                "Names (SPEC §9.10; `rbac.escalateRoles`); empty: none",
                "Names (`rbac.escalateRoles`); empty: none",
            ),
            (
                "Namespace-scoped install (SPEC §13): serve only these",
                "Namespace-scoped install: serve only these",
            ),
            (
                "read-only copies (SPEC §4 item 11). Default",
                "read-only copies. Default",
            ),
            (
                "the bundles' (`x`, SPEC §3.2) CAs",
                "the bundles' (`x`) CAs",
            ),
        ] {
            assert_eq!(without_spec(text), expect);
        }
    }

    #[test]
    fn the_first_sentence_is_the_short_help() {
        assert_eq!(first_sentence("Log level. RUST_LOG wins."), "Log level");
        assert_eq!(
            first_sentence("A name, e.g. `x`. More."),
            "A name, e.g. `x`"
        );
        assert_eq!(first_sentence("One sentence."), "One sentence");
    }
}
