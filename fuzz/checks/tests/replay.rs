//! Every fuzz target's property over its fixed inputs, in the ordinary
//! workspace build: no sanitizers, no libFuzzer, no nightly.
//!
//! Per target, replays every file of `fuzz/corpus/TARGET` (the hand-written
//! seeds and every crash ever found, as `regress-*`), plus for
//! pav-templates' targets each `examples/*/provisioner.yaml`; then checks a
//! fixed number of mutations of those inputs, made from a fixed seed by a
//! small libFuzzer-like mutator (byte flips, insertions of the target's
//! dictionary tokens, erased and copied ranges, numbers, splices of two
//! inputs). The same commit checks the same inputs every time, so a
//! failure here fails the same way anywhere.
//!
//! This is the regression half of fuzzing. Finding new inputs, guided by
//! coverage and with AddressSanitizer, is `scripts/fuzz --explore`'s job.

use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use pav_fuzz_checks::NodePathTree;

/// libFuzzer's `-max_len` in scripts/fuzz: no mutation grows past it.
const MAX_LEN: usize = 16384;

/// The generator's seed for every target (scripts/fuzz uses `-seed=1`).
const SEED: u64 = 1;

/// At most this many mutations are stacked on one input, as libFuzzer's
/// default `-mutate_depth`.
const MAX_DEPTH: u64 = 5;

#[test]
fn template_render() {
    // Every phase rendered in a debug build: about 2 ms an input, 20 s
    // here (2 cores shared with other builds); the csi_* targets and
    // quantity take microseconds, so they get many more.
    Target::templates("template_render", 10_000).check(pav_fuzz_checks::template_render);
}

#[test]
fn provisioner_parse() {
    Target::templates("provisioner_parse", 10_000).check(pav_fuzz_checks::provisioner_parse);
}

#[test]
fn quantity() {
    Target::new("quantity", 1_000_000).check(pav_fuzz_checks::quantity);
}

#[test]
fn csi_request() {
    Target::new("csi_request", 500_000).check(pav_fuzz_checks::csi_request);
}

#[test]
fn csi_node_path() {
    // A tree of this test's own, removed when the test ends.
    let tree = NodePathTree::create();
    Target::new("csi_node_path", 100_000).check(|data| tree.check(data));
}

/// One fuzz target's fixed inputs and mutation budget.
struct Target {
    name: &'static str,
    /// Whether the examples' provisioners are seeds too (YAML: only for
    /// pav-templates' targets).
    examples: bool,
    mutations: u64,
}

impl Target {
    fn new(name: &'static str, mutations: u64) -> Self {
        Self {
            name,
            examples: false,
            mutations,
        }
    }

    fn templates(name: &'static str, mutations: u64) -> Self {
        Self {
            examples: true,
            ..Self::new(name, mutations)
        }
    }

    /// Replays the seeds, then the mutations; panics with the first input
    /// that fails `check`.
    fn check(&self, check: impl Fn(&[u8])) {
        let seeds = self.seeds();
        let dictionary = self.dictionary();
        for (i, (path, input)) in seeds.iter().enumerate() {
            self.run(&check, input, || format!("seed {i}, {}", path.display()));
        }
        let pool: Vec<&[u8]> = seeds.iter().map(|(_, input)| input.as_slice()).collect();
        let mut mutator = Mutator {
            rng: Rng::new(SEED),
            dictionary: &dictionary,
            pool: &pool,
        };
        for n in 0..self.mutations {
            let input = mutator.next_input();
            self.run(&check, &input, || format!("mutation {n} of seed {SEED}"));
        }
    }

    fn run(&self, check: &impl Fn(&[u8]), input: &[u8], what: impl Fn() -> String) {
        if catch_unwind(AssertUnwindSafe(|| check(input))).is_ok() {
            return;
        }
        // The panic's own message is printed above, by the panic hook.
        panic!("{}", self.report(input, &what()));
    }

    /// What failed and how to reproduce it, with the input saved to a file.
    fn report(&self, input: &[u8], what: &str) -> String {
        let name = self.name;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pav-fuzz-checks");
        let file = dir.join(format!("{name}-failure"));
        let saved = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, input));
        let file = match saved {
            Ok(()) => file.display().to_string(),
            Err(err) => format!("FILE (saving it to {} failed: {err})", file.display()),
        };
        const SHOWN: usize = 4096;
        let escaped = input[..input.len().min(SHOWN)].escape_ascii();
        let mut report = format!(
            "{name} failed on {what}, an input of {} bytes:\n  b\"{escaped}\"",
            input.len()
        );
        if input.len() > SHOWN {
            let _ = write!(report, " (the first {SHOWN} bytes)");
        }
        let _ = write!(
            report,
            "\nsaved to: {file}\
             \nreproduce (deterministic): cargo test -p pav-fuzz-checks --test replay -- --exact {name}\
             \nunder the sanitizers: scripts/fuzz --build-only; cd fuzz && cargo +nightly fuzz run {name} {file}\
             \nonce fixed, keep it as a regression test: cp {file} fuzz/corpus/{name}/regress-WHAT"
        );
        report
    }

    /// `fuzz/corpus/TARGET/*`, then the examples' provisioners when they
    /// apply, each in name order.
    fn seeds(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut paths = files_in(&fuzz_dir().join("corpus").join(self.name));
        assert!(!paths.is_empty(), "{}: an empty corpus", self.name);
        if self.examples {
            let examples = fuzz_dir().join("../examples");
            let provisioners = files_in(&examples).into_iter().filter_map(|dir| {
                let path = dir.join("provisioner.yaml");
                path.is_file().then_some(path)
            });
            paths.extend(provisioners);
        }
        paths
            .into_iter()
            .map(|path| {
                let input =
                    std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
                (path, input)
            })
            .collect()
    }

    /// The target's tokens: `fuzz/TARGET.dict` when it has one, else
    /// `fuzz/jinja.dict`, as scripts/fuzz chooses.
    fn dictionary(&self) -> Vec<Vec<u8>> {
        let own = fuzz_dir().join(format!("{}.dict", self.name));
        let path = if own.is_file() {
            own
        } else {
            fuzz_dir().join("jinja.dict")
        };
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        parse_dictionary(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A directory's entries, sorted: the order must not depend on the file
/// system.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
    let mut paths: Vec<PathBuf> = entries.map(|entry| entry.unwrap().path()).collect();
    paths.sort();
    paths
}

/// A libFuzzer dictionary: one `"token"` (optionally `name="token"`) a
/// line, with `\\`, `\"` and `\xNN` escapes; `#` starts a comment line.
fn parse_dictionary(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut tokens = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let quoted = line
            .find('"')
            .map(|start| &line[start..])
            .filter(|q| q.len() >= 2 && q.ends_with('"'))
            .ok_or_else(|| format!("line {}: no quoted token", number + 1))?;
        let mut token = Vec::new();
        let mut bytes = quoted[1..quoted.len() - 1].bytes();
        while let Some(byte) = bytes.next() {
            if byte != b'\\' {
                token.push(byte);
                continue;
            }
            match bytes.next() {
                Some(b'x') => {
                    let hex = [bytes.next(), bytes.next()];
                    let digits = hex.map(|d| d.and_then(|d| char::from(d).to_digit(16)));
                    let [Some(high), Some(low)] = digits else {
                        return Err(format!("line {}: a bad \\x escape", number + 1));
                    };
                    token.push((high * 16 + low) as u8);
                }
                Some(escaped) => token.push(escaped),
                None => return Err(format!("line {}: a trailing \\", number + 1)),
            }
        }
        tokens.push(token);
    }
    Ok(tokens)
}

/// splitmix64: tiny, fast and good enough to pick mutations; fixed here so
/// that no dependency's update changes which inputs are checked.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Bytes that matter to the targets' formats: Jinja, YAML, paths,
/// quantities. Most mutations insert these rather than any byte, since
/// text that is not UTF-8 is ignored by every target but csi_request.
const SYNTAX: &[u8] = b"{}%#-+|~()[]<>\"'\\/.:,;=*!?&@$^_ \t\n\r0123456789eEiKMGTPkmnux";

/// Numbers at the edges of the limits the targets check.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "63",
    "64",
    "127",
    "128",
    "255",
    "256",
    "4095",
    "4096",
    "65536",
    "2147483647",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e18",
    "1e19",
    "0.5",
];

/// Makes each next input from the pool of seeds, as libFuzzer's mutations
/// do (without its coverage feedback).
struct Mutator<'a> {
    rng: Rng,
    dictionary: &'a [Vec<u8>],
    pool: &'a [&'a [u8]],
}

impl Mutator<'_> {
    fn next_input(&mut self) -> Vec<u8> {
        let mut input = self.rng.pick(self.pool).to_vec();
        input.truncate(MAX_LEN);
        let depth = 1 + self.rng.below(MAX_DEPTH as usize);
        for _ in 0..depth {
            self.mutate(&mut input);
            input.truncate(MAX_LEN);
        }
        input
    }

    fn mutate(&mut self, input: &mut Vec<u8>) {
        let rng = &mut self.rng;
        // Where to insert (0..=len) and where to change (0..len).
        let at = rng.below(input.len() + 1);
        match rng.below(11) {
            // Flip a bit.
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            // Any byte, anywhere.
            1 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            // A syntax byte, in place or inserted.
            2 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = *rng.pick(SYNTAX);
            }
            3 => input.insert(at, *rng.pick(SYNTAX)),
            // A dictionary token, inserted or over what is there.
            4 | 5 if !self.dictionary.is_empty() => {
                let token = rng.pick(self.dictionary);
                if rng.chance(2) {
                    input.splice(at..at, token.iter().copied());
                } else {
                    let end = (at + token.len()).min(input.len());
                    input.splice(at..end, token.iter().copied());
                }
            }
            // Erase a range, mostly short.
            6 if !input.is_empty() => {
                let most = if rng.chance(4) { input.len() } else { 16 };
                let len = 1 + rng.below(most);
                let start = rng.below(input.len());
                let end = (start + len).min(input.len());
                input.drain(start..end);
            }
            // Copy a range of the input elsewhere in it (repeats nest).
            7 if !input.is_empty() => {
                let start = rng.below(input.len());
                let len = 1 + rng.below((input.len() - start).min(256));
                let part = input[start..start + len].to_vec();
                input.splice(at..at, part);
            }
            // A number where one was (or anywhere).
            8 => {
                let number = rng.pick(NUMBERS).as_bytes();
                let digits = input[at..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                input.splice(at..at + digits, number.iter().copied());
            }
            // Splice: this input's head, another's tail.
            9 => {
                let other = rng.pick(self.pool);
                let from = rng.below(other.len() + 1);
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
            // Another input's range, inserted.
            10 => {
                let other = rng.pick(self.pool);
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let len = 1 + rng.below((other.len() - start).min(512));
                    input.splice(at..at, other[start..start + len].iter().copied());
                }
            }
            // What does not apply to an empty input: grow it instead.
            _ => input.push(*rng.pick(SYNTAX)),
        }
    }
}

#[test]
fn dictionaries_parse_as_libfuzzer_reads_them() {
    let tokens = parse_dictionary("# comment\n\"{{\"\nname=\"a\\x00\\\"\\\\\"\n").unwrap();
    assert_eq!(tokens, [b"{{".to_vec(), b"a\0\"\\".to_vec()]);
    assert!(parse_dictionary("{{\n").is_err());
    assert!(parse_dictionary("\"\\x0g\"\n").is_err());
}
