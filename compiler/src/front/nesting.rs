//! Limits on how deep and how long kernel text may nest, checked on the
//! tokens before `syn` builds a tree from them.
//!
//! `syn` parses recursively: every parenthesis, block, call, unary operator,
//! closure, `=` (right-associative), `->` and generic `<` it meets opens Rust
//! stack frames that close only when the construct ends. 3,000 nested
//! parentheses or 10,000 unary minuses overflow the main thread's stack
//! inside `syn` itself, before any of our code sees the tree, and a stack
//! overflow aborts the process (it cannot be caught). So the check runs
//! here, on the [`TokenStream`]: proc-macro2's lexer and its token trees are
//! non-recursive (it lexes with an explicit stack and drops without
//! recursion), and this scan walks them with an explicit stack too. Running
//! `syn` on a thread with a larger stack would only move the cliff: the
//! depth a file can reach grows with its size, a stack does not.
//!
//! The scan computes, at every token, an upper bound on the recursion `syn`
//! can have pending there: one level per enclosing group, plus, in each
//! enclosing group, the openers seen since the last `,` or `;` (or since a
//! new item or statement begins after a closed group) — prefix operators
//! and keywords in operand position, assignment operators, `->`, `@`, and
//! generic `<` not yet closed by `>`. It over-counts (a comparison `<`
//! counts as a generic until the statement ends), never under-counts a
//! construct `syn` recurses on, so a file that passes cannot overflow the
//! stack in `syn`, and the same bound covers every recursive walk of ours
//! over the tree. Past [`MAX_NESTING`] the file is refused at the token
//! where the bound is crossed.
//!
//! A flat chain `a + a + a + ...` does not nest for the user and `syn`
//! parses it in a loop, but it builds a left-deep tree: dropping or
//! printing that tree recurses once per term. So a chain's links (binary
//! operators, `.`, `as`, `?`, calls and indexing after an operand) are
//! counted per expression and precedence level, and a tree deeper than
//! [`MAX_CHAIN`] is refused; chains up to that length compile, walked
//! iteratively by the lowering.

use proc_macro2::{Delimiter, Spacing, Span, TokenStream, TokenTree};

use super::{FrontError, FrontResult};

/// The deepest an expression (or type, or pattern) may nest: parentheses,
/// blocks, calls, `if` inside `if`, unary operators, each counts one level.
/// The scan cannot tell a comparison `a < b` from a generic `Vector<f32>`
/// and counts each `<` until the statement ends, so one expression holds at
/// most about 256 comparisons (bind parts with `let`, as for any limit).
/// Kernels nest a handful of levels; 256 leaves room for generated code and
/// keeps `syn`'s recursion (a few KiB of stack per level in a debug build)
/// well inside a thread's default 2 MiB.
pub const MAX_NESTING: usize = 256;

/// How deep chaining without nesting may make the tree `syn` builds: a
/// `+` chain of N terms is N levels deep, and so are N method calls
/// `.f()`, casts or field reads in a row; chains of different precedence
/// add up (`a * 2.0 + b * 3.0 + ...` is one level deeper than its `+`
/// chain). Generated kernels of 10,000 terms compile. Dropping the tree
/// takes about 50 bytes of stack a level and printing it back to tokens
/// (for an error's span) about 450, so about 7 MiB at the limit:
/// [`super::parse_kernel_file`] runs on a thread with room for that
/// ([`super::FRONT_STACK_BYTES`]).
pub const MAX_CHAIN: usize = 16_384;

/// Refuse token trees that nest deeper than [`MAX_NESTING`] or chain longer
/// than [`MAX_CHAIN`], at the span of the token where the limit is crossed.
pub fn check_nesting(tokens: &TokenStream) -> FrontResult<()> {
    let mut stack: Vec<Frame> = vec![Frame::new(tokens.clone(), 0)];
    while let Some(frame) = stack.last_mut() {
        let Some(tt) = frame.tokens.next() else {
            stack.pop();
            if let Some(parent) = stack.last_mut() {
                parent.prev = Prev::Group;
            }
            continue;
        };
        match tt {
            TokenTree::Group(g) => {
                if frame.prev.is_operand() && g.delimiter() != Delimiter::Brace {
                    // A call or an index after an operand nests it.
                    frame.trailer(g.span_open())?;
                }
                let inner = frame.depth() + 1;
                if inner > MAX_NESTING {
                    return Err(too_deep(g.span_open()));
                }
                stack.push(Frame::new(g.stream(), inner));
            }
            TokenTree::Ident(id) => {
                let name = id.to_string();
                let kw = keyword(&name);
                if frame.prev == Prev::Group && !matches!(name.as_str(), "as" | "else" | "in" | "where" | "if" | "for") {
                    // An operand followed by a name: a new statement or item
                    // begins, every construct pending in this group has ended.
                    frame.restart();
                }
                match kw {
                    Keyword::Leaf => frame.prev = Prev::Operand,
                    Keyword::Cast => {
                        frame.trailer(id.span())?;
                        frame.prev = Prev::Operator;
                    }
                    Keyword::Prefix => {
                        if !frame.prev.is_operand() {
                            frame.open(id.span())?;
                        }
                        frame.prev = Prev::Operator;
                    }
                }
            }
            TokenTree::Literal(_) => frame.prev = Prev::Operand,
            TokenTree::Punct(p) => {
                // Gather a run of joined punctuation (`>>=`, `..=`, `=-`)
                // and split it into Rust's operators, longest first.
                let mut run = vec![(p.as_char(), p.span())];
                let mut joint = p.spacing() == Spacing::Joint;
                while joint {
                    match frame.tokens.peek() {
                        Some(TokenTree::Punct(q)) => {
                            run.push((q.as_char(), q.span()));
                            joint = q.spacing() == Spacing::Joint;
                            frame.tokens.next();
                        }
                        _ => joint = false,
                    }
                }
                let mut i = 0;
                while i < run.len() {
                    let op = operator(&run[i..]);
                    frame.operator(op, run[i].1)?;
                    i += op.len();
                }
            }
        }
    }
    Ok(())
}

/// The error for nesting past [`MAX_NESTING`], here and in the lowering.
pub(super) fn too_deep(span: Span) -> FrontError {
    FrontError::new(span, format!("expression nested deeper than {MAX_NESTING} levels: split it with `let` bindings"))
}

fn too_long(span: Span) -> FrontError {
    FrontError::new(span, format!("expression chains more than {MAX_CHAIN} terms: split it with `let` bindings"))
}

/// What the previous token of a group was, which tells a prefix operator
/// (`-x`, `&x`, `|x| ..`) from an infix one (`a - x`, `a & x`, `a | x`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start of the group, after `,` or `;`, or after an operator: an
    /// operand is expected next.
    Operator,
    /// A name, a literal or a closing `?`.
    Operand,
    /// A closed group, which is an operand too.
    Group,
}

impl Prev {
    fn is_operand(self) -> bool {
        self != Prev::Operator
    }
}

struct Frame {
    tokens: std::iter::Peekable<proc_macro2::token_stream::IntoIter>,
    /// The bound at the group's first token: everything pending outside it.
    base: usize,
    /// Openers since the last `,` or `;` (prefix operators, keywords, `=`, `->`).
    openers: usize,
    /// Generic `<` not closed by `>` since the last `;`.
    angles: usize,
    /// Binary operators of the current operand of each precedence level
    /// (see [`precedence`]): a chain of them is a left spine in the tree.
    links: [usize; LEVELS],
    /// The longest chain seen at each level in the current expression. A
    /// path down the tree follows one chain per level at most, so their
    /// sum bounds its depth.
    longest: [usize; LEVELS],
    /// Trailers (`.f()`, `.x`, `as T`, `?`, calls, indexing) since the last
    /// binary operator: they nest the current operand, one level each.
    trailers: usize,
    prev: Prev,
}

impl Frame {
    fn new(tokens: TokenStream, base: usize) -> Frame {
        Frame {
            tokens: tokens.into_iter().peekable(),
            base,
            openers: 0,
            angles: 0,
            links: [0; LEVELS],
            longest: [0; LEVELS],
            trailers: 0,
            prev: Prev::Operator,
        }
    }

    fn depth(&self) -> usize {
        self.base + self.openers + self.angles
    }

    fn open(&mut self, span: Span) -> FrontResult<()> {
        self.openers += 1;
        if self.depth() > MAX_NESTING {
            return Err(too_deep(span));
        }
        Ok(())
    }

    fn angle(&mut self, span: Span) -> FrontResult<()> {
        self.angles += 1;
        if self.depth() > MAX_NESTING {
            return Err(too_deep(span));
        }
        Ok(())
    }

    /// A binary operator of precedence `level`: it extends the chain at its
    /// level and starts a new operand for every level above.
    fn link(&mut self, level: usize, span: Span) -> FrontResult<()> {
        self.links[level] += 1;
        self.longest[level] = self.longest[level].max(self.links[level]);
        self.links[level + 1..].fill(0);
        self.trailers = 0;
        self.check_chain(span)
    }

    fn trailer(&mut self, span: Span) -> FrontResult<()> {
        self.trailers += 1;
        self.check_chain(span)
    }

    /// A path down the tree follows at most one chain per precedence level,
    /// then the trailers of one operand.
    fn check_chain(&self, span: Span) -> FrontResult<()> {
        if self.longest.iter().sum::<usize>() + self.trailers > MAX_CHAIN {
            return Err(too_long(span));
        }
        Ok(())
    }

    /// A new statement or item: nothing is pending any more.
    fn restart(&mut self) {
        self.openers = 0;
        self.angles = 0;
        self.links = [0; LEVELS];
        self.longest = [0; LEVELS];
        self.trailers = 0;
    }

    fn operator(&mut self, op: &str, span: Span) -> FrontResult<()> {
        let operand_before = self.prev.is_operand();
        self.prev = Prev::Operator;
        match op {
            ";" => self.restart(),
            "," => {
                // Generic arguments continue past a comma; nothing else does.
                self.openers = 0;
                self.links = [0; LEVELS];
                self.longest = [0; LEVELS];
                self.trailers = 0;
            }
            "?" => {
                self.trailer(span)?;
                self.prev = Prev::Operand;
            }
            "." => self.trailer(span)?,
            "=" | "+=" | "-=" | "*=" | "/=" | "%=" | "^=" | "&=" | "|=" | "<<=" | ">>=" | "->" | "@" => self.open(span)?,
            "<" => self.angle(span)?,
            "<<" => {
                self.angle(span)?;
                self.angle(span)?;
            }
            ">" => self.angles = self.angles.saturating_sub(1),
            ">>" => self.angles = self.angles.saturating_sub(2),
            "::" | "=>" | ":" | "#" | "'" | "$" => {}
            _ if operand_before => self.link(precedence(op), span)?,
            // A prefix operator: `-x`, `!x`, `*x`, `&x`, `&&x`, `|x| ..`, `..x`.
            _ => self.open(span)?,
        }
        Ok(())
    }
}

/// Precedence levels of binary operators, lowest first.
const LEVELS: usize = 9;

/// A binary operator's precedence level, as `syn` climbs them: `||`, `&&`,
/// comparisons, `|`, `^`, `&`, shifts, `+ -`, `* / %` (`..` and anything
/// unknown share the lowest).
fn precedence(op: &str) -> usize {
    match op {
        "&&" => 1,
        "==" | "!=" | "<" | ">" | "<=" | ">=" => 2,
        "|" => 3,
        "^" => 4,
        "&" => 5,
        "<<" | ">>" => 6,
        "+" | "-" => 7,
        "*" | "/" | "%" => 8,
        _ => 0,
    }
}

/// The longest Rust operator at the start of a run of joined punctuation.
fn operator(run: &[(char, Span)]) -> &'static str {
    const OPS: [&str; 38] = [
        "<<=", ">>=", "...", "..=", "::", "->", "=>", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "^=",
        "&=", "|=", "<<", ">>", "..", "=", "<", ">", "!", "~", "+", "-", "*", "/", "%", "^", "&", "|", "@",
    ];
    const SINGLE: [&str; 9] = [".", ",", ";", ":", "#", "$", "?", "'", "~"];
    let text: String = run.iter().take(3).map(|(c, _)| *c).collect();
    OPS.iter()
        .chain(SINGLE.iter())
        .find(|op| text.starts_with(**op))
        .copied()
        // Any other character is a single token of its own; `syn` rejects it.
        .unwrap_or("~")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Keyword {
    /// An ordinary name, or a keyword that is an operand (`self`, `true`).
    Leaf,
    /// `as`: a trailer of the operand before it.
    Cast,
    /// Every other keyword: it opens a construct (`return x`, `if c {..}`,
    /// `let p = x`, `move |x| ..`, `&mut x`, `dyn Trait`).
    Prefix,
}

fn keyword(name: &str) -> Keyword {
    const PREFIX: [&str; 41] = [
        "async", "await", "become", "box", "break", "const", "continue", "do", "dyn", "else", "enum", "extern", "final", "fn",
        "for", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
        "return", "static", "struct", "trait", "try", "type", "typeof", "unsafe", "unsized", "use", "virtual", "where",
    ];
    const MORE: [&str; 3] = ["while", "yield", "abstract"];
    match name {
        "as" => Keyword::Cast,
        n if PREFIX.contains(&n) || MORE.contains(&n) => Keyword::Prefix,
        _ => Keyword::Leaf,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(src: &str) -> FrontResult<()> {
        let tokens: TokenStream = src.parse().expect("lexes");
        check_nesting(&tokens)
    }

    #[test]
    fn ordinary_kernels_pass() {
        for src in [
            include_str!("../../../examples/kernels/gnn.rs"),
            include_str!("../../../examples/kernels/dense.rs"),
            include_str!("../../../examples/kernels/reducers.rs"),
        ] {
            check(src).expect("an example kernel file is within the limits");
        }
    }

    #[test]
    fn nesting_at_the_limit_passes_and_one_more_is_refused() {
        // The group of `fn f() { .. }` and the statement's `let` and `=`
        // count 3 levels before the parentheses.
        let at = |n: usize| format!("fn f() {{ let x = {}a{}; }}", "(".repeat(n), ")".repeat(n));
        check(&at(MAX_NESTING - 4)).expect("within the limit");
        let e = check(&at(MAX_NESTING)).expect_err("past the limit");
        assert!(e.message.contains("nested deeper than 256"), "{}", e.message);
        assert_eq!(e.line, 1);
    }

    #[test]
    fn every_recursive_shape_is_refused() {
        let n = 3000;
        let shapes = [
            format!("{}x{}", "(".repeat(n), ")".repeat(n)),
            format!("{}x{}", "relu(".repeat(n), ")".repeat(n)),
            format!("{}x{}", "if c { ".repeat(n), " } else { y }".repeat(n)),
            format!("{}x{}", "{".repeat(n), "}".repeat(n)),
            format!("{}x", "-".repeat(n)),
            format!("{}x", "- ".repeat(n)),
            format!("{}x", "!".repeat(n)),
            format!("{}x", "&".repeat(n)),
            format!("{}x", "&mut ".repeat(n)),
            format!("{}x", "|a| ".repeat(n)),
            format!("{}x", "|| ".repeat(n)),
            format!("{}x", "return ".repeat(n)),
            format!("{}x", "x = ".repeat(n)),
            format!("{}x", "x = {a} = ".repeat(n)),
            format!("x as {}f32{}", "Vector<".repeat(n), ">".repeat(n)),
            format!("x as {}f32", "&".repeat(n)),
            format!("x as {}f32", "fn() -> ".repeat(n)),
            format!("x as {}f32{}", "A<x, ".repeat(n), ">".repeat(n)),
            format!("{}x", "x @ ".repeat(n)),
            format!("{}x", "..".repeat(n)),
            format!("if a {{}} {}", "else if a {} ".repeat(n)),
        ];
        for body in shapes {
            let src = format!("fn f() -> f32 {{ {body} }}");
            let e = check(&src).expect_err(&body[..40.min(body.len())]);
            assert!(e.message.contains("nested deeper than 256"), "{}: {}", &body[..40], e.message);
        }
    }

    #[test]
    fn flat_chains_pass_up_to_the_limit() {
        let terms: Vec<String> = (0..MAX_CHAIN - 1).map(|i| format!("a * {i}.0")).collect();
        check(&format!("fn f() {{ {} }}", terms.join(" + "))).expect("a chain of products");
        let chain = |n: usize, op: &str| vec!["a"; n].join(op);
        for op in [" + ", " - ", " * ", " && ", " | "] {
            check(&format!("fn f() {{ {} }}", chain(MAX_CHAIN, op))).expect(op);
        }
        check(&format!("fn f() {{ x{} }}", ".relu()".repeat(MAX_CHAIN / 2))).expect("a method chain");
        let e = check(&format!("fn f() {{ {} }}", chain(MAX_CHAIN + 2, " + "))).expect_err("too long");
        assert!(e.message.contains(&format!("more than {MAX_CHAIN} terms")), "{}", e.message);
    }

    #[test]
    fn statements_and_items_do_not_add_up() {
        let stmts: String = (0..5000).map(|i| format!("let t{i}: f32 = -a < -b; ")).collect();
        check(&format!("fn f() {{ {stmts} }}")).expect("statements end what they open");
        let items: String = (0..5000).map(|i| format!("#[doc = \"x\"] pub fn f{i}() -> Vector<f32> {{ a }} ")).collect();
        check(&format!("pub mod m {{ {items} }}")).expect("items end what they open");
        let args: String = (0..5000).map(|_| "-a, ").collect();
        check(&format!("fn f() {{ g({args}) }}")).expect("arguments end what they open");
    }
}
