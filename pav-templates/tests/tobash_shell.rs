//! `tobash` is injection-proof: for arbitrary Unicode strings (NUL
//! excepted: no shell argument can hold one) taken from a StorageClass
//! parameter, the token the template `{{ params.s | tobash }}` yields makes
//! a real shell's `printf %s TOKEN` print exactly the string, byte for byte.
//!
//! Strings are checked in batches, one shell per batch: the script holds
//! `printf %s TOKEN` and `printf '\000'` for each string, and its output is
//! split at the NULs. A token that broke out of its quoting would shift or
//! change what follows, so every string of the batch is compared.
//!
//! `PROPTEST_CASES` sets the number of batches (default [`CASES`]).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use pav_templates::phase::Creation;
use pav_templates::{CompiledProvisioner, CreationContext, samples};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Batches per shell when `PROPTEST_CASES` is not set.
const CASES: u32 = 256;

/// Most strings in one batch (one shell run).
const BATCH: usize = 128;

/// Pieces that mean something to a shell, to `printf` or to an encoding.
const HOSTILE: &[&str] = &[
    "'",
    "\"",
    "$(",
    ")",
    "$(id)",
    "`",
    "`id`",
    "\n",
    "\r",
    "\r\n",
    "\t",
    "\\",
    "\\x41",
    "\\n",
    "\\0",
    "\\'",
    "\\\n",
    "%s",
    "%b",
    "%%",
    "%n",
    "$'",
    "$'\\n'",
    "$\"",
    "${x}",
    "${x:-$(id)}",
    "$((1+1))",
    "$HOME",
    "$",
    "'\"'\"'",
    "''",
    "!",
    "!!",
    "*",
    "?",
    "[a]",
    "{a,b}",
    "~",
    "~root",
    "#",
    ";",
    "&",
    "&&",
    "|",
    "<",
    ">",
    "<(id)",
    " ",
    "-",
    "--",
    "-n",
    "-e",
    "=",
    "a=b",
    "@",
    ":",
    "\u{7f}",
    "\u{1}",
    "\u{1b}[31m",
    "\u{85}",
    "\u{a0}",
    "\u{200b}",
    "\u{2028}",
    "\u{feff}",
    "é",
    "e\u{301}",
    "\u{ff07}",
    "\u{1f600}",
    "\u{10ffff}",
    "\u{e000}",
];

/// Characters `tobash` leaves unquoted.
const SAFE: &str = "abcXYZ019_@%+=:,./-";

/// Any character but NUL.
fn any_char() -> impl Strategy<Value = char> {
    any::<char>().prop_map(|c| if c == '\0' { '\u{1}' } else { c })
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(HOSTILE).prop_map(str::to_owned),
        2 => proptest::char::range('\u{1}', '\u{1f}').prop_map(String::from),
        1 => proptest::char::range('\u{80}', '\u{9f}').prop_map(String::from),
        2 => proptest::sample::select(SAFE.chars().collect::<Vec<_>>()).prop_map(String::from),
        2 => any_char().prop_map(String::from),
    ]
}

/// Strings built from hostile pieces, from safe characters only (left
/// bare by `tobash`), and from arbitrary characters.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => vec(fragment(), 0..16).prop_map(|pieces| pieces.concat()),
        1 => vec(proptest::sample::select(SAFE.chars().collect::<Vec<_>>()), 1..12)
            .prop_map(|chars| chars.into_iter().collect()),
        2 => vec(any_char(), 0..40).prop_map(|chars| chars.into_iter().collect()),
    ]
}

/// The token `{{ params.s | tobash }}` yields for `input` as a
/// StorageClass parameter: the path hostile input takes in production.
fn token(input: &str) -> String {
    static PROVISIONER: OnceLock<CompiledProvisioner> = OnceLock::new();
    let provisioner = PROVISIONER.get_or_init(|| {
        CompiledProvisioner::from_json(serde_json::json!({
            "apiVersion": "pav.albertofaria.github.io/v1alpha1",
            "kind": "PavProvisioner",
            "metadata": {"name": "tobash"},
            "spec": {
                "provisioningModes": ["Dynamic"],
                "volumeCreation": {"handle": "{{ params.s | tobash }}", "capacity": "1Gi"},
                "volumeStaging": {"podTemplate": {}},
            },
        }))
        .expect("the provisioner compiles")
    });
    static PVC: OnceLock<PersistentVolumeClaim> = OnceLock::new();
    static SC: OnceLock<StorageClass> = OnceLock::new();
    let mut sc = SC.get_or_init(samples::storage_class).clone();
    sc.parameters = Some(BTreeMap::from([("s".to_owned(), input.to_owned())]));
    let context = CreationContext::new(PVC.get_or_init(samples::pvc), &sc).expect("sample context");
    let handle = provisioner
        .render::<Creation>(&context)
        .expect("tobash renders any string")
        .handle
        .expect("the handle is set");
    assert_eq!(handle, pav_templates::engine::tobash(input));
    handle
}

/// Whether `shell` runs at all.
fn has_shell(shell: &str) -> bool {
    Command::new(shell)
        .args(["-c", "true"])
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs `printf %s TOKEN; printf '\000'` for every token in one `shell -c`
/// script; returns what each `printf %s` printed.
fn print_each(shell: &str, tokens: &[String]) -> Result<Vec<Vec<u8>>, TestCaseError> {
    let mut script = String::new();
    for token in tokens {
        script.push_str("printf %s ");
        script.push_str(token);
        script.push_str("\nprintf '\\000'\n");
    }
    let output = Command::new(shell)
        .arg("-c")
        .arg(&script)
        .output()
        .map_err(|err| TestCaseError::fail(format!("{shell} does not run: {err}")))?;
    prop_assert!(
        output.status.success() && output.stderr.is_empty(),
        "{shell} failed ({}): {}\nscript:\n{script}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut printed: Vec<Vec<u8>> = output
        .stdout
        .split(|&b| b == 0)
        .map(<[u8]>::to_vec)
        .collect();
    // The output ends with a NUL, so the last piece is empty.
    prop_assert_eq!(printed.pop(), Some(Vec::new()));
    prop_assert_eq!(printed.len(), tokens.len(), "script:\n{}", script);
    Ok(printed)
}

/// Checks batches of generated strings under `shell`, each printed output
/// against `expected(input)`; returns how many strings were checked.
fn check_shell(shell: &str, expected: fn(&str) -> String) -> usize {
    // `Config::default()` reads PROPTEST_CASES.
    let cases = match std::env::var_os("PROPTEST_CASES") {
        Some(_) => Config::default().cases,
        None => CASES,
    };
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let checked = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&vec(hostile_string(), 1..=BATCH), |inputs| {
        let tokens: Vec<String> = inputs.iter().map(|input| token(input)).collect();
        for token in &tokens {
            prop_assert!(!token.contains('\n'), "{token:?} holds a newline");
        }
        let printed = print_each(shell, &tokens)?;
        for ((input, token), printed) in inputs.iter().zip(&tokens).zip(&printed) {
            let expected = expected(input);
            prop_assert!(
                printed.as_slice() == expected.as_bytes(),
                "{shell} printed {:?} instead of {expected:?} for the input {input:?} (token {token:?})",
                String::from_utf8_lossy(printed),
            );
        }
        checked.fetch_add(inputs.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    if let Err(err) = result {
        panic!("{shell}: {err}");
    }
    let checked = checked.into_inner();
    eprintln!(
        "tobash under {shell}: {} shell runs, {checked} generated strings printed back as expected",
        runner.config().cases
    );
    checked
}

/// Whether `shell` reads `$'\n'` as a newline (Bash, and POSIX.1-2024
/// shells; dash 0.5.12 does not).
fn has_dollar_quotes(shell: &str) -> bool {
    Command::new(shell)
        .args(["-c", r"printf %s $'\n'"])
        .output()
        .is_ok_and(|output| output.stdout == b"\n")
}

#[test]
#[ignore = "needs bash: .ci/run runs it"]
fn tobash_round_trips_any_string_through_real_bash() {
    assert!(has_shell("bash"), "bash is not installed");
    let checked = check_shell("bash", str::to_owned);
    assert!(checked > 0);
}

/// Under `sh` every string without a newline prints back exactly (the
/// portable case docs/templates.md promises). Where `sh` has no `$'...'`
/// (Debian's dash), a newline comes back as the three characters `$\n`,
/// which is what the documentation says.
#[test]
#[ignore = "needs sh: .ci/run runs it"]
fn tobash_is_portable_to_posix_sh_except_newlines() {
    assert!(has_shell("sh"), "sh is not installed");
    let checked = if has_dollar_quotes("sh") {
        eprintln!("sh understands $'...': every string must print back exactly");
        check_shell("sh", str::to_owned)
    } else {
        check_shell("sh", |input| input.replace('\n', "$\\n"))
    };
    assert!(checked > 0);
}

/// Inputs that once broke, or that a reader would worry about, run every
/// time whatever the generator draws.
#[test]
#[ignore = "needs bash: .ci/run runs it"]
fn tobash_regressions_and_classics_through_bash() {
    assert!(has_shell("bash"), "bash is not installed");
    let inputs: Vec<String> = [
        "",
        "'",
        "''",
        "\n",
        "\n\n",
        "a\n",
        "\na",
        "'\n'",
        "$'\\n'",
        "\u{1}",
        "\u{7f}",
        "\u{1}\u{7f}\u{1}",
        "x\u{1}\ny\u{7f}",
        "\r",
        "\\",
        "\\\n",
        "%s%b%n",
        "$(touch /tmp/pav-tobash-pwned)",
        "`touch /tmp/pav-tobash-pwned`",
        "'; touch /tmp/pav-tobash-pwned; '",
        "\u{10ffff}\u{1f600}",
    ]
    .map(str::to_owned)
    .into();
    let tokens: Vec<String> = inputs.iter().map(|input| token(input)).collect();
    let printed = print_each("bash", &tokens).unwrap_or_else(|err| panic!("{err}"));
    for ((input, token), printed) in inputs.iter().zip(&tokens).zip(&printed) {
        assert_eq!(printed, input.as_bytes(), "token {token:?}");
    }
    assert!(!std::path::Path::new("/tmp/pav-tobash-pwned").exists());
}
