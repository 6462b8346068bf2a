//! Comparisons cost what they walk (issue 12): a template may build a list
//! thousands of levels deep within its fuel, and minijinja's own `==`, `<`
//! and `in` walked it by recursion at no cost, so comparing it in a loop
//! took seconds to minutes (5,000 levels compared 8,000 times: 11 s in a
//! release build; 21,900 levels 20,000 times: 181 s). Comparisons now go
//! through pav's own (`engine/comparisons.rs`): they refuse values nested
//! deeper than `MAX_VALUE_DEPTH` as Jinja2 does past Python's recursion
//! limit, and charge fuel for every pair of items they visit. These tests
//! count work through the fuel and the depth limit, not the clock.

mod common;

use pav_templates::engine::{FUEL_PER_FIELD, MAX_VALUE_DEPTH};

/// Renders `template` as a field of a provisioner named "compare".
fn render(template: &str) -> Result<String, String> {
    common::render_field("compare", template)
}

/// `{% set l = … %}` and `m`: two equal lists (distinct objects) `depth`
/// levels deep, built in a loop.
fn deep_list(depth: usize) -> String {
    format!(
        "{{% set ns = namespace(l=0, m=0) %}}{{% for i in range({depth}) %}}{{% set ns.l = [ns.l] %}}{{% set ns.m = [ns.m] %}}{{% endfor %}}{{% set l = ns.l %}}{{% set m = ns.m %}}"
    )
}

const TOO_DEEP: &str = "nested more than 128 levels deep";
const OUT_OF_FUEL: &str = "evaluation budget exhausted";

#[test]
fn the_hostile_template_of_issue_12_fails_at_its_first_comparison() {
    // 5,000 levels compared 8,000 times: 11 s before, within the fuel.
    let template =
        deep_list(5000) + "{% for i in range(8000) %}{% if l == [l] %}{% endif %}{% endfor %}done";
    let error = render(&template).unwrap_err();
    assert!(error.contains(TOO_DEEP), "{error}");
    assert!(error.contains("line 1"), "{error}");
}

#[test]
fn every_comparison_refuses_values_deeper_than_the_limit() {
    assert_eq!(MAX_VALUE_DEPTH, 128);
    for comparison in [
        "l == m",
        "l != m",
        "l < m",
        "l <= m",
        "m > l",
        "m >= l",
        "l in [m]",
        "l not in [m]",
        "l <= m <= l",
        "l is eq m",
        "l is lt m",
        "[l, m]|sort",
        "[l, m]|max",
        "[[l], [m]]|select('le', [m])|list",
    ] {
        // Walked to depth 127 at most (the sort's key lists add one level).
        let within = render(&format!(
            "{}{{{{ ({comparison})|string|length }}}}",
            deep_list(126)
        ));
        assert!(within.is_ok(), "{comparison}: {within:?}");
        let beyond = render(&format!(
            "{}{{{{ ({comparison})|string|length }}}}",
            deep_list(200)
        ));
        assert!(
            beyond.as_ref().is_err_and(|e| e.contains(TOO_DEEP)),
            "{comparison}: {beyond:?}"
        );
    }
}

#[test]
fn comparisons_charge_fuel_for_the_items_they_visit() {
    // Two equal flat lists of 2,000 items: each `==` visits 2,001 pairs,
    // about 1,000 fuel; 400 of them cost twice the field's budget, which
    // the loop's own instructions (a few thousand) do not come near.
    let items = 2000;
    let compares = (2 * FUEL_PER_FIELD as usize) / (items / 2);
    let template = format!(
        "{{% set a = range({items})|list %}}{{% set b = range({items})|list %}}{{% for i in range({compares}) %}}{{% if a == b %}}{{% endif %}}{{% endfor %}}done"
    );
    let error = render(&template).unwrap_err();
    assert!(error.contains(OUT_OF_FUEL), "{error}");
    // A tenth of them fits.
    let template = template.replace(
        &format!("range({compares})"),
        &format!("range({})", compares / 10),
    );
    assert_eq!(render(&template), Ok("done".to_owned()));
}

#[test]
fn lists_compared_with_themselves_cost_nothing_to_walk() {
    // Python finds a list equal to itself without a walk; so does pav.
    let template = deep_list(5000)
        + "{% for i in range(1000) %}{% if l != l or l not in [l] %}x{% endif %}{% endfor %}done";
    assert_eq!(render(&template), Ok("done".to_owned()));
}

#[test]
fn mapping_keys_are_checked_as_python_hashes_them() {
    // minijinja hashed a list key by recursion at no cost: `{l: 1}` of a
    // 21,900-deep list 20,000 times ran over 2 minutes. Python refuses a
    // list as a key outright.
    let error = render(&(deep_list(5000) + "{{ {l: 1}|length }}")).unwrap_err();
    assert!(error.contains("unhashable type: 'list'"), "{error}");
    assert_eq!(
        render("{% set k = (1, ('a',)) %}{{ {k: 1, 'b': 2}|length }}"),
        Ok("2".to_owned())
    );
    // Tuples hash when their items do, so a deep tuple is walked: refused
    // past the limit, and paid for.
    let deep_tuple = "{% set ns = namespace(t=0) %}{% for i in range(200) %}{% set ns.t = (ns.t,) %}{% endfor %}{{ {ns.t: 1}|length }}";
    let error = render(deep_tuple).unwrap_err();
    assert!(error.contains(TOO_DEEP), "{error}");
    // (t, t) of (u, u) … 60 times: 2**60 items to hash.
    let shared = "{% set ns = namespace(t=0) %}{% for i in range(60) %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}{{ {ns.t: 1}|length }}";
    let error = render(shared).unwrap_err();
    assert!(error.contains(OUT_OF_FUEL), "{error}");
}

#[test]
fn groupby_and_loop_changed_walk_at_a_cost() {
    // Both compared deep values with minijinja's own recursion at no cost
    // (over 60 s each for a 21,900-deep list in a loop).
    let groupby = deep_list(200) + "{{ [{'k': [l]}, {'k': [[l]]}]|groupby('k')|length }}";
    let error = render(&groupby).unwrap_err();
    assert!(error.contains(TOO_DEEP), "{error}");
    let changed = deep_list(200)
        + "{% for i in range(3) %}{% if loop.changed([l] if i % 2 else [[l]]) %}{% endif %}{% endfor %}";
    let error = render(&changed).unwrap_err();
    assert!(error.contains(TOO_DEEP), "{error}");
    // Within the limit they work as before.
    let groupby =
        "{{ [{'k': 2}, {'k': 1}, {'k': 2}]|groupby('k')|map(attribute='grouper')|join(',') }}";
    assert_eq!(render(groupby), Ok("1,2".to_owned()));
    let changed = "{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}";
    assert_eq!(render(changed), Ok("12".to_owned()));
    // Python's sorted refuses keys of different types.
    let mixed = "{{ [{'k': 1}, {'k': 'a'}]|groupby('k')|length }}";
    assert!(render(mixed).is_err_and(|e| e.contains("not supported between")));
}
