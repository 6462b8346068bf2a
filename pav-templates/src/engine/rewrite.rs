//! Source rewriting: the source minijinja compiles for a template, with
//! every comparison written as a call to the function that applies
//! Python's rules ([`comparisons`](super::comparisons)). minijinja has no
//! hook on operators, so they are replaced before compiling:
//!
//! - `a < b` becomes `__pav_lt__(a, b)` (and so on for `==`, `!=`, `<=`,
//!   `>`, `>=`, `in`, `not in`);
//! - a chain `a < b < c` becomes `__pav_chain__(a, '<', b, '<', c)`;
//! - a mapping literal's computed key `{k: v}` becomes
//!   `{__pav_key__(k): v}`;
//! - the arguments of `loop.changed(...)` are wrapped in `__pav_walked__`.
//!
//! The rewrite uses minijinja's own parser (its `unstable_machinery`): the
//! tree says which expressions are comparisons, and the tokens say where
//! their operands start and end (the tree's spans leave out parentheses
//! and may start at the token before an expression). Line breaks between
//! operands are kept, so every line keeps its number and errors still name
//! the line of the template as written.

use std::ops::Range;

use minijinja::machinery::{Token, ast, parse, tokenize};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::ValueKind;

use super::comparisons::{CHAIN_FUNCTION, KEY_FUNCTION, Operator, WALKED_FUNCTION};

/// A comparison found in a template: its operands' source ranges, with
/// the operators between them.
struct Comparison {
    /// The function it becomes.
    function: &'static str,
    operands: Vec<Range<usize>>,
    operators: Vec<Operator>,
}

impl Comparison {
    fn range(&self) -> Range<usize> {
        self.operands[0].start..self.operands[self.operands.len() - 1].end
    }
}

/// `source` with every comparison routed to the functions of
/// [`comparisons`](super::comparisons), lines kept where they are. The
/// source unchanged when it has none, or when it does not parse
/// (minijinja then reports the error).
pub(crate) fn route_comparisons(source: &str, syntax: &SyntaxConfig) -> String {
    if !might_compare(source) {
        return source.to_owned();
    }
    let Ok(template) = parse(source, "<template>", syntax.clone()) else {
        return source.to_owned();
    };
    let mut finder = Finder {
        source,
        syntax,
        tokens: None,
        found: Vec::new(),
    };
    finder.stmt(&template);
    if finder.found.is_empty() || finder.tokens.as_ref().is_some_and(Option::is_none) {
        return source.to_owned();
    }
    let mut comparisons = finder.found;
    if !comparisons
        .iter()
        .all(|comparison| well_formed(source, comparison))
    {
        return source.to_owned();
    }
    // Outer ones first: a mapping key may start where its comparison does.
    comparisons.sort_by_key(|comparison| {
        let range = comparison.range();
        (range.start, std::cmp::Reverse(range.end))
    });
    let mut out = String::with_capacity(source.len() + 16 * comparisons.len());
    emit(source, 0..source.len(), &comparisons, &mut out);
    // A rewrite that does not parse would be a bug here; the template
    // then keeps minijinja's comparisons rather than failing to compile
    // (the differential suite would show the difference).
    if parse(&out, "<template>", syntax.clone()).is_err() {
        return source.to_owned();
    }
    out
}

/// Whether a comparison's operands lie in order within `source`, on
/// character boundaries (so [`emit`] cannot fail on them).
fn well_formed(source: &str, comparison: &Comparison) -> bool {
    let mut at = 0;
    comparison.operands.iter().all(|operand| {
        let ok = at <= operand.start
            && operand.start < operand.end
            && operand.end <= source.len()
            && source.is_char_boundary(operand.start)
            && source.is_char_boundary(operand.end);
        at = operand.end;
        ok
    })
}

/// Whether `source` may hold a comparison (a fast path for the many fields
/// that hold none).
fn might_compare(source: &str) -> bool {
    (source.contains("{{") || source.contains("{%"))
        && (source.contains(['<', '>', '=', '!', '{']) || source.contains("in"))
}

/// Writes `range` of `source` with the comparisons inside it routed.
fn emit(source: &str, range: Range<usize>, comparisons: &[Comparison], out: &mut String) {
    let mut at = range.start;
    for (index, comparison) in comparisons.iter().enumerate() {
        // Those inside it come after it (sorted outer first).
        let inner = &comparisons[index + 1..];
        let whole = comparison.range();
        if whole.start < at || whole.end > range.end {
            // Inside one emitted already (an operand), or outside `range`.
            continue;
        }
        out.push_str(&source[at..whole.start]);
        out.push_str(comparison.function);
        out.push('(');
        for (position, operand) in comparison.operands.iter().enumerate() {
            if position > 0 {
                let between = &source[comparison.operands[position - 1].end..operand.start];
                out.push_str(", ");
                if comparison.operators.len() > 1 {
                    out.push('\'');
                    out.push_str(comparison.operators[position - 1].symbol());
                    out.push_str("', ");
                }
                // Keeps the lines of what follows where they were.
                out.extend(between.chars().filter(|&c| c == '\n'));
            }
            emit(source, operand.clone(), inner, out);
        }
        out.push(')');
        at = whole.end;
    }
    out.push_str(&source[at..range.end]);
}

/// The tokens of a template, for the true extent of an expression.
struct Tokens<'s> {
    tokens: Vec<(Token<'s>, Range<usize>)>,
}

impl<'s> Tokens<'s> {
    fn new(tokens: Vec<(Token<'s>, Range<usize>)>) -> Self {
        Tokens { tokens }
    }

    /// Index of the token starting at `offset`, or of the first after it.
    fn index_at(&self, offset: usize) -> usize {
        self.tokens.partition_point(|(_, span)| span.start < offset)
    }

    /// Index of the last token ending at or before `offset`, plus one.
    fn index_before(&self, offset: usize) -> usize {
        self.tokens.partition_point(|(_, span)| span.end <= offset)
    }

    /// Whether a `not` lies within `range` (between the operands of
    /// `a not in b`).
    fn holds_not(&self, range: Range<usize>) -> bool {
        let first = self.index_at(range.start);
        let end = self.index_before(range.end);
        self.tokens[first..end.max(first)]
            .iter()
            .any(|(token, _)| matches!(token, Token::Ident("not")))
    }

    /// The smallest range around `range` (the tokens of an expression's
    /// parts) whose brackets balance, with the parentheses that wrap it
    /// exactly (`(a)` for an operand `a`). Inside an operand of a
    /// comparison, `not` appears only within brackets, so the ones between
    /// an opening parenthesis and the operand belong to it.
    /// (Not for a call's argument, whose call parentheses would look the
    /// same: `unwrap` is then false.)
    fn extent(&self, range: Range<usize>, unwrap: bool) -> Range<usize> {
        let mut first = self.index_at(range.start);
        let mut end = self.index_before(range.end).max(first);
        if first >= end {
            // No token inside: not an expression minijinja parsed
            // ([`well_formed`] then refuses the empty range).
            return range.start..range.start;
        }
        // Unmatched closing brackets: the operand starts before them.
        let mut depth = 0i64;
        let mut lowest = 0i64;
        for (token, _) in &self.tokens[first..end] {
            depth += bracket(token);
            lowest = lowest.min(depth);
        }
        let mut missing_open = -lowest;
        while missing_open > 0 && first > 0 {
            first -= 1;
            // Going back, an opening bracket matches one, a closing one
            // adds one to match.
            missing_open -= bracket(&self.tokens[first].0);
        }
        // Unmatched opening brackets: the operand ends after them.
        let mut open = depth - lowest;
        while open > 0 && end < self.tokens.len() {
            open += bracket(&self.tokens[end].0);
            end += 1;
        }
        // Parentheses around the whole operand (and `not` within them).
        loop {
            let mut before = first;
            while before > 0 && matches!(self.tokens[before - 1].0, Token::Ident("not")) {
                before -= 1;
            }
            let wrapped = unwrap
                && before > 0
                && matches!(self.tokens[before - 1].0, Token::ParenOpen)
                && matches!(self.tokens.get(end), Some((Token::ParenClose, _)));
            if !wrapped {
                break;
            }
            first = before - 1;
            end += 1;
        }
        self.tokens[first].1.start..self.tokens[end - 1].1.end
    }
}

/// How a token changes the bracket depth.
fn bracket(token: &Token<'_>) -> i64 {
    match token {
        Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => 1,
        Token::ParenClose | Token::BracketClose | Token::BraceClose => -1,
        _ => 0,
    }
}

/// Walks a template's tree for comparisons.
struct Finder<'s> {
    source: &'s str,
    syntax: &'s SyntaxConfig,
    /// The template's tokens, read when the first comparison is found
    /// (most templates have none); `Some(None)` if they could not be.
    tokens: Option<Option<Tokens<'s>>>,
    found: Vec<Comparison>,
}

impl<'s> Finder<'s> {
    /// The exact extent of each of `exprs`, or `None` without tokens.
    fn extents(&mut self, exprs: &[&ast::Expr<'_>], unwrap: bool) -> Option<Vec<Range<usize>>> {
        let (source, syntax) = (self.source, self.syntax);
        let tokens = self
            .tokens
            .get_or_insert_with(|| {
                tokenize(source, false, syntax.clone())
                    .map(|token| {
                        token.map(|(token, span)| {
                            (token, span.start_offset as usize..span.end_offset as usize)
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .ok()
                    .map(Tokens::new)
            })
            .as_ref()?;
        Some(
            exprs
                .iter()
                .map(|expr| tokens.extent(cover(expr), unwrap))
                .collect(),
        )
    }

    fn stmts(&mut self, stmts: &[ast::Stmt<'_>]) {
        for stmt in stmts {
            self.stmt(stmt);
        }
    }

    // Statements of features pav does not turn on (`multi_template`,
    // `loop_controls`) hold no expression pav compiles; the catch-all
    // keeps this building when another crate turns them on.
    #[allow(unreachable_patterns)]
    fn stmt(&mut self, stmt: &ast::Stmt<'_>) {
        match stmt {
            ast::Stmt::Template(t) => self.stmts(&t.children),
            ast::Stmt::EmitExpr(e) => self.expr(&e.expr),
            ast::Stmt::EmitRaw(_) => {}
            ast::Stmt::ForLoop(f) => {
                self.expr(&f.target);
                self.expr(&f.iter);
                if let Some(filter) = &f.filter_expr {
                    self.expr(filter);
                }
                self.stmts(&f.body);
                self.stmts(&f.else_body);
            }
            ast::Stmt::IfCond(i) => {
                self.expr(&i.expr);
                self.stmts(&i.true_body);
                self.stmts(&i.false_body);
            }
            ast::Stmt::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.expr(target);
                    self.expr(value);
                }
                self.stmts(&w.body);
            }
            ast::Stmt::Set(s) => {
                self.expr(&s.target);
                self.expr(&s.expr);
            }
            ast::Stmt::SetBlock(s) => {
                self.expr(&s.target);
                if let Some(filter) = &s.filter {
                    self.expr(filter);
                }
                self.stmts(&s.body);
            }
            ast::Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.stmts(&a.body);
            }
            ast::Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.stmts(&f.body);
            }
            ast::Stmt::Macro(m) => self.macro_decl(m),
            ast::Stmt::CallBlock(c) => {
                self.call(&c.call);
                self.macro_decl(&c.macro_decl);
            }
            ast::Stmt::Do(d) => self.call(&d.call),
            _ => {}
        }
    }

    fn macro_decl(&mut self, m: &ast::Macro<'_>) {
        for expr in m.args.iter().chain(&m.defaults) {
            self.expr(expr);
        }
        self.stmts(&m.body);
    }

    fn call(&mut self, call: &ast::Call<'_>) {
        self.expr(&call.expr);
        self.args(&call.args);
        let loop_changed = matches!(&call.expr, ast::Expr::GetAttr(g)
            if g.name == "changed" && matches!(&g.expr, ast::Expr::Var(v) if v.id == "loop"));
        if loop_changed {
            for arg in &call.args {
                if let ast::CallArg::Pos(arg) = arg
                    && let Some(operands) = self.extents(&[arg], false)
                {
                    self.found.push(Comparison {
                        function: WALKED_FUNCTION,
                        operands,
                        operators: Vec::new(),
                    });
                }
            }
        }
    }

    fn args(&mut self, args: &[ast::CallArg<'_>]) {
        for arg in args {
            match arg {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => self.expr(e),
            }
        }
    }

    fn expr(&mut self, expr: &ast::Expr<'_>) {
        if let Some((operands, operators)) = comparison(expr) {
            let Some(extents) = self.extents(&operands, true) else {
                return;
            };
            if let (ast::Expr::UnaryOp(u), [left, right]) = (expr, &extents[..])
                && let Some(Some(tokens)) = &self.tokens
                && !tokens.holds_not(left.end..right.start)
            {
                // `not a in b` as written: a `not` over an `in`.
                self.expr(&u.expr);
                return;
            }
            for operand in &operands {
                self.expr(operand);
            }
            let function = match operators[..] {
                [op] => op.function(),
                _ => CHAIN_FUNCTION,
            };
            self.found.push(Comparison {
                function,
                operands: extents,
                operators,
            });
            return;
        }
        match expr {
            ast::Expr::Var(_) | ast::Expr::Const(_) => {}
            ast::Expr::Slice(s) => {
                self.expr(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(part);
                }
            }
            ast::Expr::UnaryOp(u) => self.expr(&u.expr),
            ast::Expr::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
            }
            ast::Expr::Compare(c) => {
                self.expr(&c.expr);
                for op in &c.ops {
                    self.expr(&op.expr);
                }
            }
            ast::Expr::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(false_expr) = &i.false_expr {
                    self.expr(false_expr);
                }
            }
            ast::Expr::Filter(f) => {
                if let Some(e) = &f.expr {
                    self.expr(e);
                }
                self.args(&f.args);
            }
            ast::Expr::Test(t) => {
                self.expr(&t.expr);
                self.args(&t.args);
            }
            ast::Expr::GetAttr(g) => self.expr(&g.expr),
            ast::Expr::GetItem(g) => {
                self.expr(&g.expr);
                self.expr(&g.subscript_expr);
            }
            ast::Expr::Call(c) => self.call(c),
            ast::Expr::List(l) => l.items.iter().for_each(|e| self.expr(e)),
            ast::Expr::Tuple(t) => t.items.iter().for_each(|e| self.expr(e)),
            ast::Expr::Map(m) => {
                m.keys.iter().chain(&m.values).for_each(|e| self.expr(e));
                for key in &m.keys {
                    let constant = matches!(key, ast::Expr::Const(c)
                        if !matches!(c.value.kind(), ValueKind::Seq | ValueKind::Map));
                    if !constant && let Some(operands) = self.extents(&[key], true) {
                        self.found.push(Comparison {
                            function: KEY_FUNCTION,
                            operands,
                            operators: Vec::new(),
                        });
                    }
                }
            }
        }
    }
}

/// The operands and operators of `expr` when it is a comparison. minijinja
/// parses `a OP b` as a binary operation (`a not in b` as `not (a in b)`)
/// and only chains as `Compare`.
fn comparison<'e, 'a>(expr: &'e ast::Expr<'a>) -> Option<(Vec<&'e ast::Expr<'a>>, Vec<Operator>)> {
    match expr {
        ast::Expr::BinOp(b) => {
            let op = match b.op {
                ast::BinOpKind::Eq => Operator::Eq,
                ast::BinOpKind::Ne => Operator::Ne,
                ast::BinOpKind::Lt => Operator::Lt,
                ast::BinOpKind::Lte => Operator::Le,
                ast::BinOpKind::Gt => Operator::Gt,
                ast::BinOpKind::Gte => Operator::Ge,
                ast::BinOpKind::In => Operator::In,
                _ => return None,
            };
            Some((vec![&b.left, &b.right], vec![op]))
        }
        ast::Expr::UnaryOp(u)
            if matches!(u.op, ast::UnaryOpKind::Not) && not_in_span(u.span(), &u.expr) =>
        {
            let ast::Expr::BinOp(b) = &u.expr else {
                return None;
            };
            Some((vec![&b.left, &b.right], vec![Operator::NotIn]))
        }
        ast::Expr::Compare(c) => {
            let mut operands = vec![&c.expr];
            let mut operators = Vec::new();
            for op in &c.ops {
                operands.push(&op.expr);
                operators.push(match op.op {
                    ast::CompareOpKind::Eq => Operator::Eq,
                    ast::CompareOpKind::Ne => Operator::Ne,
                    ast::CompareOpKind::Lt => Operator::Lt,
                    ast::CompareOpKind::Lte => Operator::Le,
                    ast::CompareOpKind::Gt => Operator::Gt,
                    ast::CompareOpKind::Gte => Operator::Ge,
                    ast::CompareOpKind::In => Operator::In,
                    ast::CompareOpKind::NotIn => Operator::NotIn,
                });
            }
            Some((operands, operators))
        }
        _ => None,
    }
}

/// Whether a `not` over `inner` is minijinja's reading of `a not in b`:
/// an `in` whose span is the `not`'s own (both made by the comparison
/// parser; a written `not a in b` has them too, and reads the same).
fn not_in_span(span: minijinja::machinery::Span, inner: &ast::Expr<'_>) -> bool {
    match inner {
        ast::Expr::BinOp(b) if matches!(b.op, ast::BinOpKind::In) => {
            let inner_span = inner.span();
            inner_span.start_offset == span.start_offset && inner_span.end_offset == span.end_offset
        }
        _ => false,
    }
}

/// The source range covering every part of `expr` whose span minijinja
/// records exactly: all but comparisons, conditional expressions and
/// `not`, whose spans may start at the token before them.
fn cover(expr: &ast::Expr<'_>) -> Range<usize> {
    let mut range: Option<Range<usize>> = None;
    cover_into(expr, &mut range);
    range.unwrap_or(0..0)
}

fn cover_into(expr: &ast::Expr<'_>, range: &mut Option<Range<usize>>) {
    let exact = !matches!(
        expr,
        ast::Expr::Compare(_) | ast::Expr::IfExpr(_) | ast::Expr::UnaryOp(_)
    ) && comparison(expr).is_none();
    if exact || matches!(expr, ast::Expr::UnaryOp(u) if matches!(u.op, ast::UnaryOpKind::Neg)) {
        let span = expr.span();
        let span = span.start_offset as usize..span.end_offset as usize;
        *range = Some(match range.take() {
            Some(r) => r.start.min(span.start)..r.end.max(span.end),
            None => span,
        });
    }
    let mut each = |e: &ast::Expr<'_>| cover_into(e, range);
    match expr {
        ast::Expr::Var(_) | ast::Expr::Const(_) => {}
        ast::Expr::Slice(s) => {
            each(&s.expr);
            [&s.start, &s.stop, &s.step]
                .into_iter()
                .flatten()
                .for_each(&mut each);
        }
        ast::Expr::UnaryOp(u) => each(&u.expr),
        ast::Expr::BinOp(b) => {
            each(&b.left);
            each(&b.right);
        }
        ast::Expr::Compare(c) => {
            each(&c.expr);
            c.ops.iter().for_each(|op| each(&op.expr));
        }
        ast::Expr::IfExpr(i) => {
            each(&i.test_expr);
            each(&i.true_expr);
            if let Some(e) = &i.false_expr {
                each(e);
            }
        }
        ast::Expr::Filter(f) => {
            if let Some(e) = &f.expr {
                each(e);
            }
            args_into(&f.args, &mut each);
        }
        ast::Expr::Test(t) => {
            each(&t.expr);
            args_into(&t.args, &mut each);
        }
        ast::Expr::GetAttr(g) => each(&g.expr),
        ast::Expr::GetItem(g) => {
            each(&g.expr);
            each(&g.subscript_expr);
        }
        ast::Expr::Call(c) => {
            each(&c.expr);
            args_into(&c.args, &mut each);
        }
        ast::Expr::List(l) => l.items.iter().for_each(each),
        ast::Expr::Tuple(t) => t.items.iter().for_each(each),
        ast::Expr::Map(m) => m.keys.iter().chain(&m.values).for_each(each),
    }
}

fn args_into(args: &[ast::CallArg<'_>], each: &mut impl FnMut(&ast::Expr<'_>)) {
    for arg in args {
        match arg {
            ast::CallArg::Pos(e)
            | ast::CallArg::Kwarg(_, e)
            | ast::CallArg::PosSplat(e)
            | ast::CallArg::KwargSplat(e) => each(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(source: &str) -> String {
        route_comparisons(source, &crate::engine::syntax())
    }

    #[test]
    fn comparisons_become_calls_with_their_operands_whole() {
        for (source, expected) in [
            ("{{ a < b }}", "{{ __pav_lt__(a, b) }}"),
            ("{{ (a) < (b) }}", "{{ __pav_lt__((a), (b)) }}"),
            (
                "{{ (a + 1) * 2 == b|f(c) }}",
                "{{ __pav_eq__((a + 1) * 2, b|f(c)) }}",
            ),
            (
                "{{ x if a not in b else y }}",
                "{{ x if __pav_not_in__(a, b) else y }}",
            ),
            (
                "{{ (not a in b) == c }}",
                "{{ __pav_eq__((not __pav_in__(a, b)), c) }}",
            ),
            ("{{ not a < b }}", "{{ not __pav_lt__(a, b) }}"),
            ("{{ a < b < c }}", "{{ __pav_chain__(a, '<', b, '<', c) }}"),
            ("{{ f(a == (b)) }}", "{{ f(__pav_eq__(a, (b))) }}"),
            ("{{ -a.b[0] >= -(c) }}", "{{ __pav_ge__(-a.b[0], -(c)) }}"),
            (
                "{{ [a] != {'k': (b, c)} }}",
                "{{ __pav_ne__([a], {'k': (b, c)}) }}",
            ),
            (
                "{% for x in l if x > 1 %}{% endfor %}",
                "{% for x in l if __pav_gt__(x, 1) %}{% endfor %}",
            ),
            (
                "{{ a\n<\nb }}\n{{ c }}",
                "{{ __pav_lt__(a, \n\nb) }}\n{{ c }}",
            ),
            (
                "{{ ((a) if b else c) in d }}",
                "{{ __pav_in__(((a) if b else c), d) }}",
            ),
            (
                "{{ a is defined == b is none }}",
                "{{ __pav_eq__(a is defined, b is none) }}",
            ),
            ("a < b {{ x }}", "a < b {{ x }}"),
            (
                "{{ loop.changed(x, y.z) }}",
                "{{ loop.changed(__pav_walked__(x), __pav_walked__(y.z)) }}",
            ),
            (
                "{{ {'k': 1, k: 2, (a < b): 3} }}",
                "{{ {'k': 1, __pav_key__(k): 2, __pav_key__((__pav_lt__(a, b))): 3} }}",
            ),
        ] {
            assert_eq!(routed(source), expected, "{source}");
        }
    }
}
