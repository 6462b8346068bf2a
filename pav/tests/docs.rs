//! The documentation's statements that drift easily, each checked against
//! what it describes: the flags of the `pav` commands and their defaults,
//! the chart's values, lists of phases, counts, pinned versions and the
//! files the pages name. A failure names the page, the line and what the
//! code says; fix the page (or, if the page is right, the code).
//!
//! Statements are found by a phrase they contain. When a page is
//! reworded, the test says which phrase it no longer finds: update the
//! phrase here with the page.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use pav_templates::Phase;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Fails with every problem found, one per line, so one run lists them all.
fn assert_no_problems(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} statement(s) disagree with the code:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Reading Markdown: just enough of it (code spans, tables, paragraphs) to
// find a statement and say on which line it is.

/// A Markdown page of the workspace.
struct Doc {
    path: &'static str,
    lines: Vec<String>,
}

/// A run of lines between blank lines (a paragraph, a list item's
/// paragraph, a table), or a fenced code block, with its whitespace
/// collapsed so that a phrase may span a line break.
struct Paragraph {
    /// The number of its first line.
    line: usize,
    text: String,
    /// Where in `text` each of its lines starts.
    line_starts: Vec<usize>,
    /// Whether it is a code block (whose backticks are no code spans).
    code: bool,
}

impl Paragraph {
    /// Its code spans; none in a code block.
    fn code_spans(&self) -> Vec<&str> {
        if self.code {
            Vec::new()
        } else {
            code_spans(&self.text)
        }
    }

    /// Its lines, each with its number.
    fn lines(&self) -> impl Iterator<Item = (usize, &str)> {
        let ends = self.line_starts.iter().skip(1).copied();
        let ends = ends.chain(std::iter::once(self.text.len()));
        self.line_starts
            .iter()
            .zip(ends)
            .enumerate()
            .map(|(i, (start, end))| (self.line + i, self.text[*start..end].trim()))
    }

    /// The number of the line holding `text[offset]`.
    fn line_at(&self, offset: usize) -> usize {
        self.line + self.line_starts.iter().filter(|s| **s <= offset).count() - 1
    }

    /// The number of the line where `needle` first is (the first line if
    /// it is not there).
    fn line_of(&self, needle: &str) -> usize {
        self.line_at(self.text.find(needle).unwrap_or(0))
    }
}

/// A body row of a table, its cells trimmed.
struct Row {
    line: usize,
    cells: Vec<String>,
}

impl Doc {
    fn read(path: &'static str) -> Doc {
        Doc {
            path,
            lines: read(path).lines().map(str::to_owned).collect(),
        }
    }

    /// `path:line`, for messages.
    fn at(&self, line: usize) -> String {
        format!("{}:{line}", self.path)
    }

    /// Its paragraphs and code blocks (the fences left out).
    fn paragraphs(&self) -> Vec<Paragraph> {
        let mut paragraphs: Vec<Paragraph> = Vec::new();
        let mut open = false;
        let mut in_code = false;
        for (index, line) in self.lines.iter().enumerate() {
            let is_fence = line.trim_start().starts_with("```");
            if line.trim().is_empty() || is_fence {
                open = false;
                in_code ^= is_fence;
                continue;
            }
            if !open {
                paragraphs.push(Paragraph {
                    // A code block's first line may come after a blank one.
                    line: index + 1,
                    text: String::new(),
                    line_starts: Vec::new(),
                    code: in_code,
                });
                open = true;
            }
            let paragraph = paragraphs.last_mut().expect("just pushed");
            if !paragraph.text.is_empty() {
                paragraph.text.push(' ');
            }
            paragraph.line_starts.push(paragraph.text.len());
            paragraph.text.push_str(&collapsed(line));
        }
        paragraphs
    }

    /// The paragraph holding `phrase` (whitespace-insensitive).
    fn paragraph_with(&self, phrase: &str) -> Paragraph {
        let phrase = collapsed(phrase);
        self.paragraphs()
            .into_iter()
            .find(|p| p.text.contains(&phrase))
            .unwrap_or_else(|| panic!("{} no longer says {phrase:?}: {REWORDED}", self.path))
    }

    /// The body rows of the first table at or after the paragraph holding
    /// `phrase` (a heading, a sentence, or a table's own header).
    fn table_after(&self, phrase: &str) -> Vec<Row> {
        let start = self.paragraph_with(phrase).line - 1;
        let lines = &self.lines[start..];
        let Some(first) = lines.iter().position(|l| l.starts_with('|')) else {
            panic!("{}: no table after {phrase:?}", self.path);
        };
        lines[first..]
            .iter()
            .enumerate()
            .take_while(|(_, l)| l.starts_with('|'))
            .skip(2) // the header and its `|---|` line
            .map(|(offset, l)| Row {
                line: start + first + offset + 1,
                cells: table_cells(l),
            })
            .collect()
    }
}

/// A text with each run of whitespace (line breaks included) as one space.
fn collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

const REWORDED: &str = "reworded? then update the phrase in pav/tests/docs.rs";

/// The cells of a table line, split at `|` not escaped as `\|` (as GitHub
/// splits them, code spans included).
fn table_cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().expect("never empty").push('|');
            }
            '|' => cells.push(String::new()),
            _ => cells.last_mut().expect("never empty").push(c),
        }
    }
    if cells.last().is_some_and(|c| c.trim().is_empty()) {
        cells.pop();
    }
    cells.iter().map(|c| c.trim().to_owned()).collect()
}

/// The contents of the code spans (`` `x` ``) of a text.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The number a word or figure of the pages says: `eleven`,
/// `twenty-four`, `172`, `1,632`.
fn number(word: &str) -> Option<usize> {
    const UNITS: &str = "zero one two three four five six seven eight nine ten eleven twelve \
                         thirteen fourteen fifteen sixteen seventeen eighteen nineteen";
    const TENS: &str = "twenty thirty forty fifty sixty seventy eighty ninety";
    let position = |words: &str, word: &str| words.split_whitespace().position(|w| w == word);
    let word = word.to_ascii_lowercase();
    if let Ok(n) = word.replace(',', "").parse() {
        return Some(n);
    }
    if let Some(n) = position(UNITS, &word) {
        return Some(n);
    }
    let (tens, unit) = word.split_once('-').unwrap_or((&word, "zero"));
    let unit = position(UNITS, unit).filter(|u| *u < 10)?;
    Some(20 + 10 * position(TENS, tens)? + unit)
}

/// The number a page writes where `phrase` has `{n}`, and the line of its
/// paragraph; or, when the page no longer says `phrase`, why not.
fn stated_count(doc: &Doc, phrase: &str) -> Result<(usize, usize), String> {
    let (before, after) = phrase.split_once("{n}").expect("a phrase holds {n}");
    for paragraph in doc.paragraphs() {
        let text = &paragraph.text;
        // Where a number may start: after `before`, or at any word.
        let starts: Vec<usize> = if before.is_empty() {
            std::iter::once(0)
                .chain(text.match_indices(' ').map(|(i, _)| i + 1))
                .collect()
        } else {
            text.match_indices(before)
                .map(|(i, _)| i + before.len())
                .collect()
        };
        for start in starts {
            let rest = &text[start..];
            let length = rest
                .char_indices()
                .find(|&(i, c)| {
                    let digit_follows =
                        rest[i + c.len_utf8()..].starts_with(|d: char| d.is_ascii_digit());
                    !(c.is_ascii_alphanumeric() || c == '-' || (c == ',' && digit_follows))
                })
                .map_or(rest.len(), |(i, _)| i);
            let (word, tail) = rest.split_at(length);
            if word.is_empty() || !tail.starts_with(after) {
                continue;
            }
            let line = paragraph.line_at(start);
            return number(word).map(|n| (line, n)).ok_or_else(|| {
                format!(
                    "{}: says \"{before}{word}{after}\", which is no number",
                    doc.at(line)
                )
            });
        }
    }
    Err(format!(
        "{}: no longer says \"{phrase}\": {REWORDED}",
        doc.path
    ))
}

/// Checks a statement of a count, `phrase` with `{n}` where the page
/// writes the number: `{n}` must be `count`.
fn check_count(doc: &Doc, phrase: &str, count: usize, what: &str) -> Option<String> {
    match stated_count(doc, phrase) {
        Ok((_, n)) if n == count => None,
        Ok((line, n)) => Some(format!(
            "{}: says {n} in \"{phrase}\", but there are {count} ({what})",
            doc.at(line)
        )),
        Err(why) => Some(format!("{why} (there are {count}: {what})")),
    }
}

// ---------------------------------------------------------------------------
// The flags of the `pav` commands, as clap declares them.

/// One flag of a `pav` subcommand.
struct Flag {
    env: Option<String>,
    /// The default as `--help` shows it (several values joined by `,`).
    default: Option<String>,
    required: bool,
}

/// The flags of `pav SUBCOMMAND`, by `--name`.
fn flags_of(subcommand: &str) -> BTreeMap<String, Flag> {
    let cli = pav::cli::Cli::command();
    let command = cli
        .find_subcommand(subcommand)
        .unwrap_or_else(|| panic!("no subcommand {subcommand}"));
    command
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            Some((
                format!("--{long}"),
                Flag {
                    env: arg.get_env().map(|e| e.to_string_lossy().into_owned()),
                    default: (!defaults.is_empty()).then(|| defaults.join(",")),
                    required: arg.is_required_set(),
                },
            ))
        })
        .collect()
}

/// The flags a table cell names (`--name`, `` `--name VALUE` ``), each with
/// the environment variable named right after it, if any.
fn flags_in(cell: &str) -> Vec<(String, Option<String>)> {
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for span in code_spans(cell) {
        let word = span.split([' ', '=']).next().unwrap_or_default();
        if word.starts_with("--") {
            flags.push((word.to_owned(), None));
        } else if is_env_name(span)
            && let Some((_, env)) = flags.last_mut()
            && env.is_none()
        {
            *env = Some(span.to_owned());
        }
    }
    flags
}

/// A name, or "none", for messages.
fn or_none(name: Option<&str>) -> &str {
    name.unwrap_or("none")
}

fn is_env_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Whether a default is "nothing": the empty JSON object or list of a
/// scheduling flag, which the pages call "none".
fn is_empty_default(default: &str) -> bool {
    matches!(default, "{}" | "[]")
}

/// Checks the default a page gives for `flag` in `cell`: `required`, no
/// code span for a flag without a default ("none", "all"), else the first
/// code span, read as YAML (the chart's form of the same value), equal to
/// the flag's default read the same way.
fn check_default(at: &str, name: &str, flag: &Flag, cell: &str) -> Option<String> {
    let said = code_spans(cell).first().copied();
    if cell.starts_with("required") {
        return (!flag.required).then(|| format!("{at}: `{name}` is not required"));
    }
    if flag.required {
        return Some(format!(
            "{at}: `{name}` is required; the page says {cell:?}"
        ));
    }
    let yaml = |text: &str| -> serde_json::Value {
        serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{at}: {text:?} is not YAML: {e}"))
    };
    match (
        flag.default.as_deref().filter(|d| !is_empty_default(d)),
        said,
    ) {
        (None, None) => None,
        (None, Some(said)) => Some(format!(
            "{at}: `{name}` has no default; the page says `{said}`"
        )),
        (Some(default), None) => Some(format!(
            "{at}: the default of `{name}` is `{default}`; the page says {cell:?}"
        )),
        (Some(default), Some(said)) => (yaml(default) != yaml(said)).then(|| {
            format!("{at}: the default of `{name}` is `{default}`; the page says `{said}`")
        }),
    }
}

/// docs/install.md's Settings table names every flag of `pav manifests`
/// with its environment variable and default, and nothing else.
#[test]
fn install_md_settings_are_the_flags_of_pav_manifests() {
    let doc = Doc::read("docs/install.md");
    let flags = flags_of("manifests");
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    for row in doc.table_after("## Settings") {
        let at = doc.at(row.line);
        for (name, env) in flags_in(&row.cells[1]) {
            let Some(flag) = flags.get(&name) else {
                problems.push(format!("{at}: `{name}` is not a flag of `pav manifests`"));
                continue;
            };
            if !listed.insert(name.clone()) {
                problems.push(format!("{at}: `{name}` is listed twice"));
            }
            // The sentence under the table: flags listed without a
            // variable have `PAV_` and their name in capitals.
            let derived = format!("PAV_{}", name[2..].to_uppercase().replace('-', "_"));
            match (env, &flag.env) {
                (Some(said), Some(real)) if &said == real => {}
                (None, Some(real)) if *real == derived => {}
                (said, real) => problems.push(format!(
                    "{at}: the variable of `{name}` is {}; the page says {} \
                     (naming none, it says {derived})",
                    or_none(real.as_deref()),
                    or_none(said.as_deref()),
                )),
            }
            problems.extend(check_default(&at, &name, flag, &row.cells[2]));
        }
    }
    for name in flags.keys().filter(|n| !listed.contains(*n)) {
        problems.push(format!(
            "docs/install.md, Settings: `pav manifests {name}` is missing from the table"
        ));
    }
    assert_no_problems(&problems);
}

/// The chart value paths a table cell names: `image.tag`,
/// `sidecars.{provisioner,resizer}.resources` (each of the braces),
/// `.tolerations` (beside the previous path), `metrics.serviceMonitor.*`.
fn value_paths_in(cell: &str) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for span in code_spans(cell) {
        let is_path = span.starts_with(|c: char| c.is_ascii_alphabetic() || c == '.')
            && span
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".{},*".contains(c));
        if !is_path {
            continue;
        }
        let span = match (span.strip_prefix('.'), paths.last()) {
            (Some(sibling), Some(previous)) => {
                let parent = previous.rsplit_once('.').map_or("", |(p, _)| p);
                format!("{parent}.{sibling}")
            }
            _ => span.to_owned(),
        };
        match span.split_once('{') {
            Some((head, rest)) => {
                let (choices, tail) = rest.split_once('}').expect("a closing brace");
                paths.extend(choices.split(',').map(|c| format!("{head}{c}{tail}")));
            }
            None => paths.push(span),
        }
    }
    paths
}

/// The paths of charts/pav/values.yaml: a mapping is entered unless it is
/// empty, anything else is one value.
fn chart_values() -> Vec<String> {
    fn walk(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (key, value) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, value, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }
    let values: serde_json::Value =
        serde_yaml::from_str(&read("charts/pav/values.yaml")).expect("values.yaml is YAML");
    let mut out = Vec::new();
    walk("", &values, &mut out);
    out
}

/// Whether the documented `path` names the chart value `value` or a
/// mapping holding it.
fn covers(path: &str, value: &str) -> bool {
    let prefix = path.strip_suffix('*').unwrap_or(path);
    value == path || value.starts_with(&format!("{}.", prefix.trim_end_matches('.')))
}

/// docs/install.md's Settings table is every value of the chart: "the
/// table pairs each chart value with its flag".
#[test]
fn install_md_settings_are_the_values_of_the_chart() {
    let doc = Doc::read("docs/install.md");
    let values = chart_values();
    let mut problems = Vec::new();
    let mut documented = Vec::new();
    for row in doc.table_after("## Settings") {
        for path in value_paths_in(&row.cells[0]) {
            if !values.iter().any(|v| covers(&path, v)) {
                problems.push(format!(
                    "{}: `{path}` is not a value of charts/pav/values.yaml",
                    doc.at(row.line)
                ));
            }
            documented.push(path);
        }
    }
    for value in values
        .iter()
        .filter(|v| !documented.iter().any(|p| covers(p, v)))
    {
        problems.push(format!(
            "docs/install.md, Settings: the chart value `{value}` is missing from the table"
        ));
    }
    assert_no_problems(&problems);
}

/// docs/install.md says how the flags of `pav controller` differ from
/// those of `pav manifests`; the paragraph names exactly those.
#[test]
fn install_md_says_how_pav_controller_flags_differ() {
    let doc = Doc::read("docs/install.md");
    let paragraph = doc.paragraph_with("`pav controller` takes the flags of `pav manifests`");
    let controller: BTreeSet<String> = flags_of("controller").into_keys().collect();
    let manifests: BTreeSet<String> = flags_of("manifests").into_keys().collect();
    let differ: BTreeSet<String> = controller
        .symmetric_difference(&manifests)
        .cloned()
        .collect();
    let named: BTreeSet<String> = flags_in(&paragraph.text)
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert!(
        named == differ,
        "{}: names {named:?} as the flags `pav controller` and `pav manifests` do not share; \
         they are {differ:?}",
        doc.at(paragraph.line)
    );
}

/// docs/csi.md's table of the flags of `pav csi-controller` and `pav
/// csi-node`: each flag with its variable, its default and which of the two
/// takes it.
#[test]
fn csi_md_flags_are_the_flags_of_the_driver_commands() {
    let doc = Doc::read("docs/csi.md");
    let controller = flags_of("csi-controller");
    let node = flags_of("csi-node");
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    for row in doc.table_after("## `pav csi-controller` and `pav csi-node`") {
        let at = doc.at(row.line);
        let [flag_cell, env_cell, default_cell, scope] = &row.cells[..] else {
            panic!("{at}: a row of four cells");
        };
        for (name, _) in flags_in(flag_cell) {
            let in_controller = controller.contains_key(&name);
            let Some(flag) = node.get(&name).or(controller.get(&name)) else {
                problems.push(format!(
                    "{at}: `{name}` is a flag of neither `pav csi-controller` nor `pav csi-node`"
                ));
                continue;
            };
            listed.insert(name.clone());
            let takes = if in_controller && node.contains_key(&name) {
                "both"
            } else if in_controller {
                "controller"
            } else {
                "node"
            };
            if scope != takes {
                problems.push(format!("{at}: `{name}` is taken by {takes}, not {scope}"));
            }
            let said = code_spans(env_cell).first().map(|s| s.to_string());
            if said != flag.env {
                problems.push(format!(
                    "{at}: the variable of `{name}` is {}; the page says {}",
                    or_none(flag.env.as_deref()),
                    or_none(said.as_deref()),
                ));
            }
            problems.extend(check_default(&at, &name, flag, default_cell));
        }
    }
    let taken: BTreeSet<&String> = controller.keys().chain(node.keys()).collect();
    for name in taken {
        if !listed.contains(name) {
            problems.push(format!(
                "docs/csi.md, `pav csi-controller` and `pav csi-node`: `{name}` is missing \
                 from the table"
            ));
        }
    }
    assert_no_problems(&problems);
}

/// The names of the `pav` subcommands.
fn subcommands() -> Vec<String> {
    pav::cli::Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect()
}

/// The command lines of a page: its code spans, and the lines of its code
/// blocks (a line ending in `\` continued by the next), each with its line.
fn command_lines(doc: &Doc) -> Vec<(usize, String)> {
    let mut commands = Vec::new();
    for paragraph in doc.paragraphs() {
        let mut continued: Option<(usize, String)> = None;
        for (line, text) in paragraph.lines().filter(|_| paragraph.code) {
            let (start, mut command) = continued.take().unwrap_or((line, String::new()));
            command.push_str(text.trim_end_matches('\\'));
            command.push(' ');
            if text.ends_with('\\') {
                continued = Some((start, command));
            } else {
                commands.push((start, command));
            }
        }
        for span in paragraph.code_spans() {
            commands.push((paragraph.line_of(&format!("`{span}`")), span.to_owned()));
        }
    }
    commands
}

/// The `pav` invocations of a command line (`pav render F --phase x`,
/// `cargo run -p pav -- render ...`): each of the `subcommands` run with
/// the flags given to it, up to the end of the command (`|`, `#`, `;`,
/// `&&`).
fn pav_invocations(command: &str, subcommands: &[String]) -> Vec<(String, Vec<String>)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut invocations = Vec::new();
    for (i, word) in words.iter().enumerate() {
        if *word != "pav" && !word.ends_with("/pav") {
            continue;
        }
        let rest = &words[i + 1..];
        let rest = rest.strip_prefix(&["--"][..]).unwrap_or(rest);
        let Some(subcommand) = rest.first().filter(|w| subcommands.iter().any(|s| s == *w)) else {
            continue;
        };
        let flags = rest[1..]
            .iter()
            .take_while(|w| !["|", "#", ";", "&&", "||", ">", ")"].contains(w))
            .filter(|w| w.starts_with("--"))
            .map(|w| w.split('=').next().unwrap_or_default().to_owned())
            .collect();
        invocations.push((subcommand.to_string(), flags));
    }
    invocations
}

/// Every flag a page gives a `pav` subcommand is one it takes (the issue
/// found docs/install.md giving `pav manifests` flags it refuses).
#[test]
fn commands_in_the_pages_take_the_flags_given() {
    let subcommands = subcommands();
    let flags: BTreeMap<&String, BTreeMap<String, Flag>> =
        subcommands.iter().map(|s| (s, flags_of(s))).collect();
    let mut problems = Vec::new();
    let mut seen = 0;
    for path in current_pages() {
        let doc = Doc::read(path);
        for (line, command) in command_lines(&doc) {
            for (subcommand, given) in pav_invocations(&command, &subcommands) {
                seen += 1;
                for flag in given {
                    if !flags[&subcommand].contains_key(&flag) && flag != "--help" {
                        problems.push(format!(
                            "{}: `pav {subcommand}` takes no {flag}",
                            doc.at(line)
                        ));
                    }
                }
            }
        }
    }
    assert!(seen > 10, "found only {seen} `pav` command lines");
    assert_no_problems(&problems);
}

// ---------------------------------------------------------------------------
// Phases.

/// The phases the original PaV has. Its API is fixed: this list never
/// changes.
const PAV_ORIGINAL_PHASES: [Phase; 5] = [
    Phase::Validation,
    Phase::Creation,
    Phase::Deletion,
    Phase::Staging,
    Phase::Unstaging,
];

/// The phases pav adds to the original PaV's.
fn pav_extension_phases() -> Vec<Phase> {
    Phase::ALL
        .into_iter()
        .filter(|p| !PAV_ORIGINAL_PHASES.contains(p))
        .collect()
}

/// How a page writes a phase.
#[derive(Clone, Copy, Debug)]
enum Spelling {
    /// `node-expansion`: `pav render --phase`, metric labels, pod names.
    Name,
    /// `volumeNodeExpansion`: the spec section.
    Field,
    /// `NodeExpansionFailed`: the reason of the Warning event a failed phase
    /// gets (`Phase::event_reason`).
    EventReason,
}

impl Spelling {
    fn of(self, phase: Phase) -> String {
        match self {
            Spelling::Name => phase.name().to_owned(),
            Spelling::Field => phase.field().to_owned(),
            Spelling::EventReason => phase.event_reason().to_owned(),
        }
    }

    /// The phase a word spells, if any.
    fn phase(self, word: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| self.of(*p) == word)
    }
}

fn names(phases: &[Phase], spelling: Spelling) -> Vec<String> {
    phases.iter().map(|p| spelling.of(*p)).collect()
}

/// Where a list of phases is on a page.
enum Listed {
    /// The code spans of the paragraph holding the phrase (`a|b|c` is three).
    InParagraph(&'static str),
    /// The first word of a column of the table after the phrase; rows that
    /// name no phase there are other things.
    InColumn(&'static str, usize),
}

/// The phases a page lists, and the line the list starts on.
fn phases_listed(doc: &Doc, listed: &Listed, spelling: Spelling) -> (usize, Vec<String>) {
    match listed {
        Listed::InParagraph(phrase) => {
            let paragraph = doc.paragraph_with(phrase);
            let words = paragraph
                .code_spans()
                .into_iter()
                .flat_map(|span| span.split(['|', ',', ' ']))
                .filter(|w| spelling.phase(w).is_some())
                .map(str::to_owned)
                .collect();
            (paragraph.line, words)
        }
        Listed::InColumn(phrase, column) => {
            let rows = doc.table_after(phrase);
            let words = rows
                .iter()
                .map(|row| {
                    let cell = row.cells[*column].replace('`', "");
                    cell.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .filter(|w| spelling.phase(w).is_some())
                .collect();
            (rows.first().map_or(0, |r| r.line), words)
        }
    }
}

/// Every list of phases in the pages names, in `Phase::ALL`'s order, all
/// eleven, the original PaV's five or pav's six.
#[test]
fn phase_lists_are_the_phases() {
    let all = Phase::ALL.to_vec();
    let original = PAV_ORIGINAL_PHASES.to_vec();
    let extensions = pav_extension_phases();
    let lists: [(&'static str, Listed, Spelling, &[Phase]); 8] = [
        (
            "docs/concepts.md",
            Listed::InColumn("| phase (`pav render --phase`) |", 0),
            Spelling::Name,
            &all,
        ),
        (
            "docs/concepts.md",
            Listed::InColumn("| phase (`pav render --phase`) |", 1),
            Spelling::Field,
            &all,
        ),
        (
            "docs/metrics.md",
            Listed::InParagraph("`phase` is one of the PavProvisioner's phases"),
            Spelling::Name,
            &all,
        ),
        (
            "docs/troubleshooting.md",
            Listed::InParagraph("A failed phase is a Warning event named after it"),
            Spelling::EventReason,
            &all,
        ),
        (
            "docs/writing-a-provisioner.md",
            Listed::InColumn("What each pod must do", 0),
            Spelling::Name,
            &original,
        ),
        (
            "docs/writing-a-provisioner.md",
            Listed::InParagraph("pav adds twelve optional ones"),
            Spelling::Field,
            &extensions,
        ),
        (
            "docs/templates.md",
            Listed::InParagraph("pav adds optional sections to the PavProvisioner spec"),
            Spelling::Name,
            &extensions,
        ),
        (
            "docs/templates.md",
            Listed::InColumn("| section | keys | runs when | its pod is placed |", 0),
            Spelling::Field,
            &extensions,
        ),
    ];
    let mut problems = Vec::new();
    for (path, listed, spelling, phases) in lists {
        let doc = Doc::read(path);
        let (line, said) = phases_listed(&doc, &listed, spelling);
        let expected = names(phases, spelling);
        if said != expected {
            problems.push(format!(
                "{}: lists the phases {said:?}; they are {expected:?}",
                doc.at(line)
            ));
        }
    }
    // docs/concepts.md marks pav's own phases "(pav)".
    let doc = Doc::read("docs/concepts.md");
    for row in doc.table_after("| phase (`pav render --phase`) |") {
        let phase = Spelling::Name.phase(&row.cells[0].replace('`', ""));
        let marked = row.cells[1].contains("(pav)");
        if let Some(phase) = phase.filter(|p| extensions.contains(p) != marked) {
            let whose = if marked {
                "the original PaV's: not (pav)"
            } else {
                "one pav adds: (pav)"
            };
            problems.push(format!("{}: `{phase}` is {whose}", doc.at(row.line)));
        }
    }
    assert_no_problems(&problems);
}

/// `pav render --phase` offers every phase (the issue found its help
/// listing five).
#[test]
fn render_help_lists_every_phase() {
    let cli = pav::cli::Cli::command();
    let render = cli.find_subcommand("render").expect("pav render");
    let phase = render
        .get_arguments()
        .find(|a| a.get_long() == Some("phase"))
        .expect("--phase");
    let offered: Vec<String> = phase
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_owned())
        .collect();
    assert_eq!(
        offered,
        names(&Phase::ALL, Spelling::Name),
        "`pav render --phase` offers (left) other phases than Phase::ALL (right)"
    );
}

// ---------------------------------------------------------------------------
// Counts.

/// The traits of pav-sdk a provisioner implements: the `pub trait`s of
/// pav-sdk's sources that its lib.rs exports.
fn pav_sdk_traits() -> BTreeSet<String> {
    let lib = read("pav-sdk/src/lib.rs");
    let exported: BTreeSet<&str> = lib
        .split("pub use")
        .skip(1)
        .flat_map(|export| {
            export
                .split(';')
                .next()
                .unwrap_or_default()
                .split([',', '{', '}', ':', ' ', '\n'])
        })
        .filter(|word| !word.is_empty())
        .collect();
    let sources = std::fs::read_dir(workspace().join("pav-sdk/src")).expect("pav-sdk/src");
    let mut traits = BTreeSet::new();
    for source in sources {
        let path = source.expect("an entry").path();
        if path.is_dir() {
            continue; // a module's submodules: no touch point is declared there
        }
        let text = std::fs::read_to_string(path).expect("UTF-8");
        for declaration in text.split("pub trait ").skip(1) {
            let name: String = declaration
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if exported.contains(name.as_str()) {
                traits.insert(name);
            }
        }
    }
    assert!(traits.len() > 5, "found only the traits {traits:?}");
    traits
}

/// The scenarios of the end-to-end suite: test function and file, of
/// e2e/tests/*.rs.
fn e2e_scenarios() -> BTreeMap<String, String> {
    let mut scenarios = BTreeMap::new();
    for entry in std::fs::read_dir(workspace().join("e2e/tests")).expect("e2e/tests") {
        let path = entry.expect("an entry").path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).expect("UTF-8");
        for test in text.split("#[tokio::test]").skip(1) {
            let name = test
                .split("fn ")
                .nth(1)
                .and_then(|rest| rest.split('(').next())
                .expect("a test function");
            scenarios.insert(name.trim().to_owned(), file.clone());
        }
    }
    scenarios
}

/// The scenarios that need three nodes, which scripts/e2e runs apart.
const SEVERAL_NODES: &str = "several_nodes.rs";

/// The Helm chart's scenario, which scripts/e2e runs in its own step
/// (before pav's own install); docs/e2e.md has a section for it.
const HELM: &str = "helm_install.rs";

/// Permissions (verbs) and lines of e2e/expected/rbac.txt, per account.
fn rbac_permissions() -> BTreeMap<String, (usize, usize)> {
    let mut accounts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for line in read("e2e/expected/rbac.txt").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (account, verbs) = (fields[0], fields[fields.len() - 1]);
        let entry = accounts.entry(account.to_owned()).or_default();
        entry.0 += verbs.split(',').count();
        entry.1 += 1;
    }
    accounts
}

/// The faults docs/reliability.md's table says each scenario injects.
fn faults_injected(doc: &Doc) -> usize {
    doc.table_after("| fault | test | injected | outcome |")
        .iter()
        .map(|row| {
            let count = row.cells[2].split_whitespace().next().unwrap_or_default();
            number(count).unwrap_or_else(|| panic!("{}: a count of faults", doc.at(row.line)))
        })
        .sum()
}

/// The differential suite's cases that differ from Jinja2: on purpose
/// (deliberate.yaml) and not yet fixed (known-differences.txt).
fn differential_differences() -> (usize, usize) {
    let deliberate: BTreeMap<String, serde_json::Value> =
        serde_yaml::from_str(&read("benches/fixtures/differential/deliberate.yaml"))
            .expect("deliberate.yaml is YAML");
    let deliberate = deliberate
        .values()
        .map(|difference| difference["cases"].as_object().map_or(0, |c| c.len()))
        .sum();
    let known = read("benches/fixtures/differential/known-differences.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    (deliberate, known)
}

/// The probes of benches/fixtures/semantics-probes.yaml, and how many of
/// them differ on purpose.
fn semantics_probes() -> (usize, usize) {
    let probes: BTreeMap<String, serde_json::Value> =
        serde_yaml::from_str(&read("benches/fixtures/semantics-probes.yaml"))
            .expect("semantics-probes.yaml is YAML");
    let deliberate = probes
        .values()
        .filter(|p| p.get("deliberate").is_some())
        .count();
    (probes.len(), deliberate)
}

/// A count a page states: `phrase` holds `{n}` where the page writes the
/// number, which must be `count`, the number of `what`.
struct Stated {
    doc: &'static str,
    phrase: String,
    count: usize,
    what: String,
}

fn stated(doc: &'static str, phrase: impl Into<String>, count: usize, what: &str) -> Stated {
    Stated {
        doc,
        phrase: phrase.into(),
        count,
        what: what.to_owned(),
    }
}

/// Every count the pages state is the count of what it counts.
#[test]
fn counts_are_what_they_count() {
    let traits = pav_sdk_traits().len();
    let all = Phase::ALL.len();
    let scenarios = e2e_scenarios();
    let one_node = (scenarios.values())
        .filter(|f| *f != SEVERAL_NODES && *f != HELM)
        .count();
    let faults = scenarios.values().filter(|f| *f == "faults.rs").count();
    let rbac = rbac_permissions();
    let verbs: usize = rbac.values().map(|(v, _)| v).sum();
    let lines: usize = rbac.values().map(|(_, l)| l).sum();
    let (deliberate, known) = differential_differences();
    let (probes, deliberate_probes) = semantics_probes();
    // The differential suite's cases are generated by
    // benches/differential.py, so their total is the page's; its parts
    // must add up to it.
    let templates = Doc::read("docs/templates.md");
    let cases = stated_count(&templates, "Today: {n} cases");
    let total = cases.as_ref().map_or(0, |(_, n)| *n);
    let mut statements = vec![
        stated(
            "docs/README.md",
            "the {n} pav-sdk traits",
            traits,
            "pav-sdk's traits",
        ),
        stated(
            "docs/concepts.md",
            "any subset of {n} (",
            traits,
            "pav-sdk's traits",
        ),
        stated(
            "docs/writing-a-provisioner.md",
            "small async traits ({n})",
            traits,
            "pav-sdk's traits",
        ),
        stated(
            "docs/concepts.md",
            "There are {n}, each defined once",
            all,
            "Phase::ALL",
        ),
        stated(
            "docs/writing-a-provisioner.md",
            "all {n}: [concepts]",
            all,
            "Phase::ALL",
        ),
        stated(
            "docs/writing-a-provisioner.md",
            "These are the original PaV's {n} phases",
            PAV_ORIGINAL_PHASES.len(),
            "the original PaV's phases",
        ),
        stated(
            "docs/writing-a-provisioner.md",
            "pav adds {n} optional ones",
            pav_extension_phases().len(),
            "pav's own phases",
        ),
        stated(
            "docs/e2e.md",
            "all {n} one-node tests",
            one_node,
            "e2e/tests' one-node scenarios",
        ),
        stated(
            "docs/e2e.md",
            "the {n} fault tests",
            faults,
            "e2e/tests/faults.rs' scenarios",
        ),
        stated(
            "docs/reliability.md",
            "{n} faults injected",
            faults_injected(&Doc::read("docs/reliability.md")),
            "the faults of the table's `injected` column",
        ),
        stated(
            "docs/reliability.md",
            "Today: **{n} permissions (verb x resource)",
            verbs,
            "e2e/expected/rbac.txt's verbs",
        ),
        stated(
            "docs/reliability.md",
            "(verb x resource) in {n} lines**",
            lines,
            "e2e/expected/rbac.txt's lines",
        ),
        stated(
            "docs/templates.md",
            "`known-differences.txt` ({n}, all failures",
            known,
            "known-differences.txt's cases",
        ),
        stated(
            "docs/templates.md",
            "differ on purpose, {n} not yet fixed",
            known,
            "known-differences.txt's cases",
        ),
        stated(
            "docs/templates.md",
            " agree, {n} differ on purpose",
            deliberate,
            "deliberate.yaml's cases",
        ),
        stated(
            "docs/templates.md",
            " cases, {n} agree,",
            total.saturating_sub(deliberate + known),
            "the cases neither deliberate nor known to differ",
        ),
        stated(
            "docs/differences.md",
            "that compares {n} templates",
            total,
            "the cases docs/templates.md gives",
        ),
        stated(
            "docs/performance-log.md",
            "of {n} probes",
            probes,
            "benches/fixtures/semantics-probes.yaml's probes",
        ),
        stated(
            "docs/performance-log.md",
            "probes, {n} agree",
            probes - deliberate_probes,
            "the probes not marked deliberate",
        ),
        stated(
            "docs/performance-log.md",
            " agree and {n} differ on purpose",
            deliberate_probes,
            "the probes marked deliberate",
        ),
    ];
    for (account, (count, _)) in &rbac {
        let what = format!("{account}'s verbs in e2e/expected/rbac.txt");
        statements.push(stated(
            "docs/reliability.md",
            format!("`{account}` {{n}}"),
            *count,
            &what,
        ));
    }
    let mut problems: Vec<String> = cases.err().into_iter().collect();
    for Stated {
        doc,
        phrase,
        count,
        what,
    } in statements
    {
        problems.extend(check_count(&Doc::read(doc), &phrase, count, &what));
    }
    assert_no_problems(&problems);
}

/// The lists of pav-sdk's traits name every one.
#[test]
fn trait_lists_are_the_traits_of_pav_sdk() {
    let traits = pav_sdk_traits();
    let mut problems = Vec::new();
    for path in ["README.md", "docs/concepts.md", "pav-sdk/README.md"] {
        let doc = Doc::read(path);
        let paragraph = doc.paragraph_with("any subset of");
        let (_, list) = paragraph.text.split_once("any subset of").expect("found");
        let list = list.split(')').next().unwrap_or_default();
        let named: BTreeSet<String> = code_spans(list).into_iter().map(str::to_owned).collect();
        if named != traits {
            problems.push(format!(
                "{}: lists the traits {named:?}; pav-sdk's are {traits:?}",
                doc.at(paragraph.line)
            ));
        }
    }
    assert_no_problems(&problems);
}

/// The `[dependencies]` of a Cargo.toml-like text: each crate's name and
/// the features its own line names.
fn dependencies(toml: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut in_dependencies = false;
    let mut found = BTreeMap::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if !in_dependencies || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let name = key.trim().trim_end_matches(".workspace").to_owned();
        let features = value
            .split_once("features")
            .map(|(_, list)| {
                list.split('"')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        found.insert(name, features);
    }
    found
}

/// pav-sdk/README.md's dependency block is what its example's `main`
/// (examples/hostdir, pav-csi's front page) builds with: the same crates,
/// and every feature the example names (a missing `logging` made the
/// documented `main` fail with E0433).
#[test]
fn pav_sdk_readme_dependencies_build_its_example() {
    let readme = read("pav-sdk/README.md");
    let (_, block) = readme.split_once("```toml\n").expect("a toml block");
    let (block, _) = block.split_once("```").expect("its end");
    let documented = dependencies(block);
    let example = dependencies(&read("examples/hostdir/Cargo.toml"));
    let names =
        |deps: &BTreeMap<String, BTreeSet<String>>| deps.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&documented),
        names(&example),
        "pav-sdk/README.md's crates"
    );
    for (name, features) in &example {
        let missing: Vec<&String> = features.difference(&documented[name]).collect();
        assert!(
            missing.is_empty(),
            "pav-sdk/README.md: {name} lacks the features {missing:?} examples/hostdir uses"
        );
    }
}

// ---------------------------------------------------------------------------
// Results and scenarios the pages tabulate.

/// One pass of scripts/csi-sanity.sh: passed, failed, pending, skipped.
type SanityCounts = [usize; 4];

/// scripts/csi-sanity.expected, by pass (`hostdir mount`).
fn csi_sanity_expected() -> BTreeMap<String, SanityCounts> {
    read("scripts/csi-sanity.expected")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (pass, counts) = line.split_once(": ").expect("PASS: COUNTS");
            let counts: Vec<usize> = counts
                .split(" | ")
                .map(|c| number(c.split(' ').next().unwrap()).expect("a count"))
                .collect();
            (pass.to_owned(), counts.try_into().expect("four counts"))
        })
        .collect()
}

/// docs/csi.md's csi-sanity results are scripts/csi-sanity.expected (the
/// script fails on any other count), and its table of skipped specs adds
/// up to the skipped counts.
#[test]
fn csi_md_results_are_the_expected_csi_sanity_counts() {
    let doc = Doc::read("docs/csi.md");
    let expected = csi_sanity_expected();
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    for row in doc.table_after("| pass | passed | failed | skipped | pending |") {
        let pass = row.cells[0].replace(',', "");
        let said: Vec<usize> = row.cells[1..].iter().filter_map(|c| number(c)).collect();
        let [passed, failed, skipped, pending] = said[..] else {
            panic!("{}: four counts", doc.at(row.line));
        };
        match expected.get(&pass) {
            Some(counts) if *counts == [passed, failed, pending, skipped] => {}
            Some(counts) => problems.push(format!(
                "{}: {pass} passed, failed, pending, skipped {:?}; \
                 scripts/csi-sanity.expected says {counts:?}",
                doc.at(row.line),
                [passed, failed, pending, skipped]
            )),
            None => problems.push(format!(
                "{}: scripts/csi-sanity.expected has no pass {pass}",
                doc.at(row.line)
            )),
        }
        listed.insert(pass);
    }
    for pass in expected.keys().filter(|p| !listed.contains(*p)) {
        problems.push(format!(
            "docs/csi.md: the pass {pass} is missing from the results"
        ));
    }
    let specs: BTreeSet<usize> = expected.values().map(|c| c.iter().sum()).collect();
    if specs.len() == 1 {
        let per_pass = specs.into_iter().next().expect("one");
        problems.extend(check_count(
            &doc,
            "({n} specs per pass.)",
            per_pass,
            "specs in each pass of scripts/csi-sanity.expected",
        ));
    } else {
        problems.push(format!("passes of different sizes: {expected:?}"));
    }
    let skips = doc.table_after("| Specs | hostdir | tmpfs | sparse-file | Reason |");
    for (column, pass) in [
        (1, "hostdir mount"),
        (2, "tmpfs mount"),
        (3, "sparse-file mount"),
        (3, "sparse-file block"),
    ] {
        let sum: usize = skips
            .iter()
            .map(|row| number(&row.cells[column]).unwrap_or(0))
            .sum();
        if sum != expected[pass][3] {
            problems.push(format!(
                "{}: the skipped specs of {pass} add up to {sum}; \
                 scripts/csi-sanity.expected says {}",
                doc.at(skips[0].line),
                expected[pass][3]
            ));
        }
    }
    assert_no_problems(&problems);
}

/// docs/e2e.md's tables list every scenario with its file, and time only
/// scenarios that exist.
#[test]
fn e2e_md_lists_every_scenario() {
    let doc = Doc::read("docs/e2e.md");
    let scenarios = e2e_scenarios();
    let mut problems = Vec::new();
    let mut check_table = |rows: Vec<Row>, file_column: Option<usize>, several_nodes: bool| {
        let mut listed = BTreeSet::new();
        for row in rows {
            let name = code_spans(&row.cells[0])
                .first()
                .copied()
                .unwrap_or_default();
            let file = file_column.map_or(SEVERAL_NODES, |c| {
                code_spans(&row.cells[c])
                    .first()
                    .copied()
                    .unwrap_or_default()
            });
            match scenarios.get(name) {
                Some(real) if real == file => {}
                real => problems.push(format!(
                    "{}: `{name}` in `{file}`; e2e/tests has it in {}",
                    doc.at(row.line),
                    or_none(real.map(String::as_str)),
                )),
            }
            listed.insert(name.to_owned());
        }
        for (name, file) in &scenarios {
            if file != HELM && (file == SEVERAL_NODES) == several_nodes && !listed.contains(name) {
                problems.push(format!(
                    "docs/e2e.md: `{name}` ({file}) is missing from a table"
                ));
            }
        }
    };
    check_table(doc.table_after("| test | file | what |"), Some(1), false);
    check_table(doc.table_after("### On three nodes"), None, true);
    let text = read("docs/e2e.md");
    for (name, file) in &scenarios {
        if file == HELM && !text.contains(&format!("::{name}`")) {
            problems.push(format!(
                "docs/e2e.md: `{name}` ({file}) is not named in its section"
            ));
        }
    }
    for row in doc.table_after("## Timings") {
        for name in code_spans(&row.cells[0]) {
            let is_test_name = name.contains('_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            let is_pav_test = workspace().join(format!("pav/tests/{name}.rs")).exists();
            if is_test_name && !scenarios.contains_key(name) && !is_pav_test {
                problems.push(format!(
                    "{}: times `{name}`, which is no test",
                    doc.at(row.line)
                ));
            }
        }
    }
    assert_no_problems(&problems);
}

// ---------------------------------------------------------------------------
// Versions and files.

/// The pages, but the dated logs (such as the
/// changelog), which record what was true then.
fn current_pages() -> Vec<&'static str> {
    let mut pages = vec!["README.md"];
    for dir in ["docs", "docs/internals"] {
        for entry in std::fs::read_dir(workspace().join(dir)).expect("docs") {
            let name = entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.ends_with(".md") {
                pages.push(format!("{dir}/{name}").leak());
            }
        }
    }
    pages.sort();
    pages
}

/// `KEY=value` lines of a shell file.
fn shell_assignments(path: &str) -> BTreeMap<String, String> {
    read(path)
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .filter(|(key, _)| {
            is_env_name(key) || key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .map(|(key, value)| (key.to_owned(), value.trim_matches('"').to_owned()))
        .collect()
}

/// Whether `said` (`1.34`, `v5`) names `pinned` (`v1.34.4`) or a release
/// line holding it.
fn names_version(said: &str, pinned: &str) -> bool {
    let parts = |v: &str| -> Vec<String> {
        v.trim_start_matches('v')
            .split('.')
            .map(str::to_owned)
            .collect()
    };
    let (said, pinned) = (parts(said), parts(pinned));
    said.len() <= pinned.len() && said[..] == pinned[..said.len()]
}

/// Versions of pinned tools, wherever a page gives one, are the pins:
/// scripts/versions.env (the test cluster, the sidecars pav deploys),
/// .ci/run (helm) and the workspace's version (the pav image).
#[test]
fn versions_are_the_pinned_ones() {
    let versions = shell_assignments("scripts/versions.env");
    let ci = shell_assignments(".ci/run");
    let pin = |key: &str, from: &BTreeMap<String, String>| -> String {
        let value = from.get(key).unwrap_or_else(|| panic!("no {key}"));
        // `${PAV_X:-v1.2.3}`: an override variable with the pin as default.
        match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
            Some(expansion) => expansion.split(":-").nth(1).unwrap_or(value).to_owned(),
            None => value.clone(),
        }
    };
    // What a page writes before a version, and whether it writes the `v`
    // (so that `csi-provisioner 64 MiB` is no version).
    let pins: Vec<(&[&str], bool, String)> = vec![
        (
            &["Kubernetes ", "kubernetes ", "kubernetes` ", "kubernetes-"],
            false,
            pin("KUBERNETES_VERSION", &versions),
        ),
        (
            &[
                "external-provisioner ",
                "csi-provisioner ",
                "csi-provisioner:",
            ],
            true,
            pin("CSI_PROVISIONER_VERSION", &versions),
        ),
        (
            &["external-resizer ", "csi-resizer ", "csi-resizer:"],
            true,
            pin("CSI_RESIZER_VERSION", &versions),
        ),
        (
            &["external-attacher ", "csi-attacher ", "csi-attacher:"],
            true,
            pin("CSI_ATTACHER_VERSION", &versions),
        ),
        (
            &[
                "csi-snapshotter ",
                "csi-snapshotter:",
                "snapshot-controller:",
            ],
            true,
            pin("CSI_SNAPSHOTTER_VERSION", &versions),
        ),
        (
            &["node-driver-registrar ", "node-driver-registrar:"],
            true,
            pin("CSI_NODE_DRIVER_REGISTRAR_VERSION", &versions),
        ),
        (&["etcd "], true, pin("ETCD_VERSION", &versions)),
        (&["helm "], true, pin("helm_version", &ci)),
        (
            &["pav:", "pav "],
            false,
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
    ];
    let mut problems = Vec::new();
    for path in current_pages() {
        let doc = Doc::read(path);
        for paragraph in doc.paragraphs() {
            for (names, needs_v, pinned) in &pins {
                for name in *names {
                    for (start, _) in paragraph.text.match_indices(name) {
                        // A table's row names the tool, the next cell its version.
                        let rest = &paragraph.text[start + name.len()..];
                        let rest = rest.strip_prefix("| ").unwrap_or(rest);
                        let has_v = rest.starts_with('v');
                        let version: String = rest
                            .trim_start_matches('v')
                            .chars()
                            .take_while(|c| c.is_ascii_digit() || *c == '.')
                            .collect();
                        let version = version.trim_end_matches('.');
                        let is_version = version.starts_with(|c: char| c.is_ascii_digit())
                            && (has_v || (!needs_v && version.contains('.')));
                        if is_version && !names_version(version, pinned) {
                            problems.push(format!(
                                "{}: says {name}{}{version}; the pin is {pinned}",
                                doc.at(paragraph.line_at(start)),
                                if has_v { "v" } else { "" }
                            ));
                        }
                    }
                }
            }
        }
    }
    assert_no_problems(&problems);
}

/// Every file of the workspace, as a path from its root (build output
/// and version control left out).
fn workspace_files() -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("a directory") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().unwrap().to_string_lossy();
            if name == "target" || name == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).expect("under the root");
                out.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    let root = workspace();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files
}

/// Paths the pages name that belong to other projects, though they start
/// like one of ours.
const UPSTREAM_PATHS: [&str; 3] = [
    // external-snapshotter's manifests, which scripts/cluster-up applies.
    "deploy/kubernetes/snapshot-controller/",
    // local-path-provisioner's manifest, the scale benchmark's peer.
    "deploy/local-path-storage.yaml",
    // A placeholder: one corpus directory per fuzz target.
    "fuzz/corpus/TARGET",
];

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces
/// as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut anchors = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            anchors.insert(anchor(line.trim_start_matches('#')));
        }
    }
    anchors
}

/// Why a code span of a page, if it is a path, names nothing: a `.rs`
/// file (`csi/phase_run.rs`) must end a path of the workspace, a path that
/// starts with one of the workspace's directories (`scripts/cluster-up`)
/// must be one.
fn missing_path(span: &str, files: &[String]) -> Option<&'static str> {
    let is_path = !span.is_empty()
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    let path = span.trim_end_matches('/');
    let upstream = UPSTREAM_PATHS
        .iter()
        .any(|u| u.trim_end_matches('/') == path);
    if !is_path || upstream {
        return None;
    }
    if path.ends_with(".rs") {
        let ends_a_path = files
            .iter()
            .any(|f| f == path || f.ends_with(&format!("/{path}")));
        return (!ends_a_path).then_some("is no file of the workspace");
    }
    let top = path.split_once('/').map(|(top, _)| format!("{top}/"))?;
    let is_ours = files.iter().any(|f| f.starts_with(&top));
    let exists = files
        .iter()
        .any(|f| f == path || f.starts_with(&format!("{path}/")));
    (is_ours && !exists).then_some("does not exist")
}

/// Why a relative link of the page `from` leads nowhere: no such file, or
/// no such heading in it.
fn broken_link(from: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, heading) = target.split_once('#').unwrap_or((target, ""));
    let file = match file {
        "" => PathBuf::from(from),
        file => Path::new(from).parent().expect("a directory").join(file),
    };
    let path = workspace().join(&file);
    if !path.exists() {
        return Some(format!("the link {target} leads nowhere"));
    }
    if heading.is_empty() || file.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&path).expect("UTF-8");
    (!anchors(&text).contains(heading))
        .then(|| format!("{} has no heading #{heading}", file.display()))
}

/// The files, directories and modules the pages name exist, and their
/// links lead to a page and a heading.
#[test]
fn files_the_pages_name_exist() {
    let files = workspace_files();
    let mut problems = Vec::new();
    for path in current_pages() {
        let doc = Doc::read(path);
        for paragraph in doc.paragraphs() {
            for span in paragraph.code_spans() {
                if let Some(why) = missing_path(span, &files) {
                    let line = paragraph.line_of(&format!("`{span}`"));
                    problems.push(format!("{}: `{span}` {why}", doc.at(line)));
                }
            }
            for link in paragraph.text.split("](").skip(1) {
                let target = link.split(')').next().unwrap_or_default();
                if let Some(why) = broken_link(path, target) {
                    let line = paragraph.line_of(&format!("]({target})"));
                    problems.push(format!("{}: {why}", doc.at(line)));
                }
            }
        }
    }
    assert_no_problems(&problems);
}

/// The helpers above read what they are meant to.
#[test]
fn the_readers_read_markdown_as_github_shows_it() {
    assert_eq!(
        table_cells("| `a \\| b` | `--x` (`PAV_X`) | c |"),
        ["`a | b`", "`--x` (`PAV_X`)", "c"]
    );
    assert_eq!(code_spans("a `b` c `d e`"), ["b", "d e"]);
    assert_eq!(
        flags_in("`--a` (`PAV_A`; note), `--b VALUE`"),
        [
            ("--a".to_owned(), Some("PAV_A".to_owned())),
            ("--b".to_owned(), None)
        ]
    );
    assert_eq!(
        value_paths_in("`controller.nodeSelector`, `.tolerations` (`[{name: x}]`)"),
        ["controller.nodeSelector", "controller.tolerations"]
    );
    assert_eq!(
        value_paths_in("`sidecars.{provisioner,resizer}.resources`, `metrics.podMonitor.*`"),
        [
            "sidecars.provisioner.resources",
            "sidecars.resizer.resources",
            "metrics.podMonitor.*"
        ]
    );
    assert!(covers("metrics.podMonitor.*", "metrics.podMonitor.enabled"));
    assert!(!covers("metrics.podMonitor.*", "metrics.port"));
    assert!(covers("controller.resources", "controller.resources"));
    assert_eq!(
        [
            number("eleven"),
            number("twenty-four"),
            number("1,632"),
            number("x")
        ],
        [Some(11), Some(24), Some(1632), None]
    );
    assert!(names_version("1.34", "v1.34.4") && names_version("v5", "v5.3.0"));
    assert!(!names_version("3.6.4", "v3.6.16"));
    let subcommands = subcommands();
    let command = "cargo run -p pav -- render f --phase=x | pav crd # --no";
    assert_eq!(
        pav_invocations(command, &subcommands),
        [
            ("render".to_owned(), vec!["--phase".to_owned()]),
            ("crd".to_owned(), vec![])
        ]
    );
    let helm = "helm install pav charts/pav --namespace pav --create-namespace";
    assert!(pav_invocations(helm, &subcommands).is_empty());
    assert_eq!(
        anchor(" Provisioning at scale (N = 200)"),
        "provisioning-at-scale-n--200"
    );
    assert_eq!(
        anchor(" `pav csi-controller` and `pav csi-node`"),
        "pav-csi-controller-and-pav-csi-node"
    );
}
