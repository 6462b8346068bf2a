//! The comparison operators `==`, `!=`, `<`, `<=`, `>`, `>=`, `in` and
//! `not in` with Python's rules, as Jinja2 evaluates them: the functions a
//! template's comparisons are routed to, and Jinja2's tests of the same
//! names (`eq`, `lt`, `in`, …).
//!
//! minijinja's own operators define a result for every pair of values (a
//! total order across types; `3 in 'abc'` is false) where Python raises
//! `TypeError`, and they walk nested values by recursion without fuel or
//! depth bound: comparing a list 20,000 levels deep 20,000 times took
//! minutes within one field's fuel. minijinja has no hook on operators, so
//! before a template is compiled its comparisons are routed, in its
//! source, to functions registered here ([`rewrite`](super::rewrite)):
//! `a < b` becomes `__pav_lt__(a, b)`. Those apply
//! [`ordering`]'s Python rules, charge fuel for every item
//! they visit and refuse values nested deeper than
//! [`MAX_VALUE_DEPTH`](super::MAX_VALUE_DEPTH), as Jinja2 fails with
//! `RecursionError` past Python's recursion limit.

use minijinja::value::{Rest, Value};
use minijinja::{Environment, Error as JinjaError, ErrorKind, State};

use super::ordering::{self, Walk};

/// A comparison operator, and the function it is routed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operator {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

impl Operator {
    const ALL: [Operator; 8] = [
        Operator::Eq,
        Operator::Ne,
        Operator::Lt,
        Operator::Le,
        Operator::Gt,
        Operator::Ge,
        Operator::In,
        Operator::NotIn,
    ];

    /// The function a single comparison with this operator is routed to.
    pub(super) fn function(self) -> &'static str {
        match self {
            Operator::Eq => "__pav_eq__",
            Operator::Ne => "__pav_ne__",
            Operator::Lt => "__pav_lt__",
            Operator::Le => "__pav_le__",
            Operator::Gt => "__pav_gt__",
            Operator::Ge => "__pav_ge__",
            Operator::In => "__pav_in__",
            Operator::NotIn => "__pav_not_in__",
        }
    }

    /// The operator as a template writes it (and a chain passes it).
    pub(super) fn symbol(self) -> &'static str {
        match self {
            Operator::Eq => "==",
            Operator::Ne => "!=",
            Operator::Lt => "<",
            Operator::Le => "<=",
            Operator::Gt => ">",
            Operator::Ge => ">=",
            Operator::In => "in",
            Operator::NotIn => "not in",
        }
    }

    fn from_symbol(symbol: &str) -> Option<Operator> {
        Operator::ALL.into_iter().find(|op| op.symbol() == symbol)
    }

    /// Python's `left OP right`.
    fn apply(self, state: &State<'_, '_>, left: &Value, right: &Value) -> Result<bool, JinjaError> {
        let mut walk = Walk::new(state);
        let result = match self {
            Operator::Eq => walk.equal(left, right, 0),
            Operator::Ne => walk.equal(left, right, 0).map(|equal| !equal),
            Operator::Lt => walk.order("<", left, right, 0).map(|o| o.is_lt()),
            Operator::Le => walk.order("<=", left, right, 0).map(|o| o.is_le()),
            Operator::Gt => walk.order(">", left, right, 0).map(|o| o.is_gt()),
            Operator::Ge => walk.order(">=", left, right, 0).map(|o| o.is_ge()),
            Operator::In => ordering::contains(&mut walk, state, right, left),
            Operator::NotIn => {
                ordering::contains(&mut walk, state, right, left).map(|found| !found)
            }
        };
        walk.finish()?;
        result
    }
}

/// Name of the function a chain of comparisons (`a < b < c`) is routed
/// to: `__pav_chain__(a, '<', b, '<', c)`.
pub(super) const CHAIN_FUNCTION: &str = "__pav_chain__";

/// Name of the function a mapping literal's computed key is routed to:
/// `{k: v}` becomes `{__pav_key__(k): v}`. Python refuses a list or a dict
/// as a key (`unhashable type`), and minijinja hashed them by recursion at
/// no cost: `{l: 1}` of a deep list, in a loop, ran for minutes.
pub(super) const KEY_FUNCTION: &str = "__pav_key__";

/// Name of the function the arguments of `loop.changed(...)` are routed
/// to: minijinja compares them with the previous call's by recursion, at
/// no cost, so they are walked (charged and depth-limited) first.
pub(super) const WALKED_FUNCTION: &str = "__pav_walked__";

/// Registers the functions comparisons are routed to.
pub(crate) fn register(env: &mut Environment<'_>) {
    macro_rules! routed {
        ($($op:ident),*) => {$(
            env.add_function(
                Operator::$op.function(),
                |state: &State<'_, '_>, left: Value, right: Value| {
                    Operator::$op.apply(state, &left, &right)
                },
            );
        )*};
    }
    routed!(Eq, Ne, Lt, Le, Gt, Ge, In, NotIn);
    env.add_function(CHAIN_FUNCTION, chain);
    env.add_function(WALKED_FUNCTION, |state: &State<'_, '_>, value: Value| {
        let mut walk = Walk::new(state);
        let walked = walk.walk_all(&value, 0);
        walk.finish()?;
        walked.map(|()| value)
    });
    env.add_function(KEY_FUNCTION, |state: &State<'_, '_>, key: Value| {
        let mut walk = Walk::new(state);
        let checked = ordering::check_hashable(&mut walk, &key, 0);
        walk.finish()?;
        checked.map(|()| key)
    });
    // Jinja2's tests of the same names compare with the same operators.
    macro_rules! tests {
        ($($op:ident: $($name:literal),*;)*) => {$($(
            env.add_test($name, |state: &State<'_, '_>, left: Value, right: Value| {
                Operator::$op.apply(state, &left, &right)
            });
        )*)*};
    }
    tests! {
        Eq: "eq", "equalto", "==";
        Ne: "ne", "!=";
        Lt: "lt", "lessthan", "<";
        Le: "le", "<=";
        Gt: "gt", "greaterthan", ">";
        Ge: "ge", ">=";
        In: "in";
    }
}

/// Python's `a OP b OP c …`: each neighbouring pair compared, true when
/// all are. Python stops at the first false pair, and so does this; the
/// operands themselves were all evaluated before the call (Jinja2
/// evaluates the ones after a false pair not at all).
fn chain(state: &State<'_, '_>, items: Rest<Value>) -> Result<bool, JinjaError> {
    let malformed = || JinjaError::new(ErrorKind::InvalidOperation, "malformed comparison chain");
    let mut items = items.iter();
    let mut left = items.next().ok_or_else(malformed)?;
    while let Some(symbol) = items.next() {
        let op = symbol
            .as_str()
            .and_then(Operator::from_symbol)
            .ok_or_else(malformed)?;
        let right = items.next().ok_or_else(malformed)?;
        if !op.apply(state, left, right)? {
            return Ok(false);
        }
        left = right;
    }
    Ok(true)
}
