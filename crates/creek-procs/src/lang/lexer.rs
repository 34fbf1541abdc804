//! Source text to tokens. Comments run from `#` to the end of the line;
//! the comment lines right above a `proc` become its summary.

use super::error::{CompileError, Pos};
use super::{IDENT_BYTES_MAX, LITERAL_BYTES_MAX};

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    Ident(String),
    /// An integer literal; at most 2^63 (the parser accepts 2^63 only
    /// right after a unary minus).
    Int(u64),
    Str(Vec<u8>),
    Keyspace,
    Proc,
    Let,
    If,
    Else,
    While,
    For,
    In,
    Return,
    Abort,
    And,
    Or,
    Not,
    True,
    False,
    Nil,
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Colon,
    Semi,
    Arrow,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Concat,
    Assign,
    EqEq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Eof,
}

impl Tok {
    /// How an error message names this token.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("name `{s}`"),
            Tok::Int(n) => format!("number {n}"),
            Tok::Str(_) => "string".to_owned(),
            Tok::Eof => "end of input".to_owned(),
            other => format!("`{}`", other.text()),
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Tok::Keyspace => "keyspace",
            Tok::Proc => "proc",
            Tok::Let => "let",
            Tok::If => "if",
            Tok::Else => "else",
            Tok::While => "while",
            Tok::For => "for",
            Tok::In => "in",
            Tok::Return => "return",
            Tok::Abort => "abort",
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Not => "not",
            Tok::True => "true",
            Tok::False => "false",
            Tok::Nil => "nil",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Semi => ";",
            Tok::Arrow => "->",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::Concat => "++",
            Tok::Assign => "=",
            Tok::EqEq => "==",
            Tok::Ne => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Ident(_) | Tok::Int(_) | Tok::Str(_) | Tok::Eof => "?",
        }
    }
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        "keyspace" => Tok::Keyspace,
        "proc" => Tok::Proc,
        "let" => Tok::Let,
        "if" => Tok::If,
        "else" => Tok::Else,
        "while" => Tok::While,
        "for" => Tok::For,
        "in" => Tok::In,
        "return" => Tok::Return,
        "abort" => Tok::Abort,
        "and" => Tok::And,
        "or" => Tok::Or,
        "not" => Tok::Not,
        "true" => Tok::True,
        "false" => Tok::False,
        "nil" => Tok::Nil,
        _ => return None,
    })
}

/// The tokens of a source text (ending with `Eof`) and its comment lines.
pub(crate) struct Lexed {
    pub(crate) toks: Vec<(Tok, Pos)>,
    /// `(line, text after '#', trimmed)` for every line that is only a comment.
    pub(crate) comment_lines: Vec<(u32, String)>,
}

struct Lexer<'a> {
    src: &'a [u8],
    i: usize,
    line: u32,
    col: u32,
}

impl Lexer<'_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        if c == b'\n' {
            self.line += 1;
            self.col = 1;
        } else if c & 0xC0 != 0x80 {
            // Columns count characters: UTF-8 continuation bytes add none.
            self.col += 1;
        }
        Some(c)
    }

    fn string(&mut self, start: Pos) -> Result<Vec<u8>, CompileError> {
        let mut out = Vec::new();
        loop {
            let here = self.pos();
            let Some(c) = self.bump() else {
                return Err(CompileError::new(start, "unterminated string"));
            };
            match c {
                b'"' => return Ok(out),
                b'\n' => return Err(CompileError::new(start, "unterminated string")),
                b'\\' => {
                    let e = self.bump();
                    match e {
                        Some(b'n') => out.push(b'\n'),
                        Some(b't') => out.push(b'\t'),
                        Some(b'r') => out.push(b'\r'),
                        Some(b'0') => out.push(0),
                        Some(b'\\') => out.push(b'\\'),
                        Some(b'"') => out.push(b'"'),
                        Some(b'x') => {
                            let hi = self.bump().and_then(hex);
                            let lo = self.bump().and_then(hex);
                            match (hi, lo) {
                                (Some(h), Some(l)) => out.push(h * 16 + l),
                                _ => {
                                    return Err(CompileError::new(
                                        here,
                                        "\\x must be followed by two hex digits",
                                    ))
                                }
                            }
                        }
                        _ => {
                            return Err(CompileError::new(
                                here,
                                "unknown escape (use \\n \\t \\r \\0 \\\\ \\\" or \\xNN)",
                            ))
                        }
                    }
                }
                other => out.push(other),
            }
            if out.len() > LITERAL_BYTES_MAX {
                return Err(CompileError::new(
                    start,
                    format!("string literal longer than {LITERAL_BYTES_MAX} bytes"),
                ));
            }
        }
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Split `src` into tokens; the first lexical error stops it.
pub(crate) fn lex(src: &str) -> Result<Lexed, CompileError> {
    let mut lx = Lexer {
        src: src.as_bytes(),
        i: 0,
        line: 1,
        col: 1,
    };
    let mut toks = Vec::new();
    let mut comment_lines = Vec::new();
    let mut line_has_token = false;
    let mut tok_line = 0;
    while let Some(c) = lx.peek() {
        let start = lx.pos();
        if start.line != tok_line {
            line_has_token = false;
        }
        if c.is_ascii_whitespace() {
            lx.bump();
            continue;
        }
        if c == b'#' {
            let from = lx.i + 1;
            while lx.peek().is_some_and(|c| c != b'\n') {
                lx.bump();
            }
            if !line_has_token {
                let text = String::from_utf8_lossy(lx.src.get(from..lx.i).unwrap_or_default());
                comment_lines.push((start.line, text.trim().to_owned()));
            }
            continue;
        }
        line_has_token = true;
        tok_line = start.line;
        let tok = if c.is_ascii_alphabetic() || c == b'_' {
            let from = lx.i;
            while lx
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
            {
                lx.bump();
            }
            let word = src.get(from..lx.i).unwrap_or_default();
            if word.len() > IDENT_BYTES_MAX {
                return Err(CompileError::new(
                    start,
                    format!("name longer than {IDENT_BYTES_MAX} characters"),
                ));
            }
            keyword(word).unwrap_or_else(|| Tok::Ident(word.to_owned()))
        } else if c.is_ascii_digit() {
            let mut n: u64 = 0;
            let mut too_big = false;
            while let Some(d) = lx.peek().filter(u8::is_ascii_digit) {
                lx.bump();
                match n
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(d - b'0')))
                {
                    Some(v) if v <= 1 << 63 => n = v,
                    _ => too_big = true,
                }
            }
            if too_big {
                return Err(CompileError::new(start, "integer literal out of range"));
            }
            if lx
                .peek()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
            {
                return Err(CompileError::new(start, "a number runs into a name"));
            }
            Tok::Int(n)
        } else if c == b'"' {
            lx.bump();
            Tok::Str(lx.string(start)?)
        } else {
            lx.bump();
            let next = lx.peek();
            let two = |lx: &mut Lexer<'_>, t: Tok| {
                lx.bump();
                t
            };
            match (c, next) {
                (b'-', Some(b'>')) => two(&mut lx, Tok::Arrow),
                (b'+', Some(b'+')) => two(&mut lx, Tok::Concat),
                (b'=', Some(b'=')) => two(&mut lx, Tok::EqEq),
                (b'!', Some(b'=')) => two(&mut lx, Tok::Ne),
                (b'<', Some(b'=')) => two(&mut lx, Tok::Le),
                (b'>', Some(b'=')) => two(&mut lx, Tok::Ge),
                (b'/', Some(b'/')) => {
                    return Err(CompileError::new(start, "comments start with `#`"))
                }
                (b'(', _) => Tok::LParen,
                (b')', _) => Tok::RParen,
                (b'{', _) => Tok::LBrace,
                (b'}', _) => Tok::RBrace,
                (b'[', _) => Tok::LBracket,
                (b']', _) => Tok::RBracket,
                (b',', _) => Tok::Comma,
                (b':', _) => Tok::Colon,
                (b';', _) => Tok::Semi,
                (b'+', _) => Tok::Plus,
                (b'-', _) => Tok::Minus,
                (b'*', _) => Tok::Star,
                (b'/', _) => Tok::Slash,
                (b'%', _) => Tok::Percent,
                (b'=', _) => Tok::Assign,
                (b'<', _) => Tok::Lt,
                (b'>', _) => Tok::Gt,
                _ => {
                    let shown = if c.is_ascii_graphic() {
                        format!("`{}`", char::from(c))
                    } else {
                        format!("byte 0x{c:02x}")
                    };
                    return Err(CompileError::new(
                        start,
                        format!("unexpected character {shown}"),
                    ));
                }
            }
        };
        toks.push((tok, start));
    }
    toks.push((Tok::Eof, lx.pos()));
    Ok(Lexed {
        toks,
        comment_lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        lex(src)
            .map(|l| l.toks.into_iter().map(|(t, _)| t).collect())
            .unwrap_or_default()
    }

    #[test]
    fn tokens_and_positions() {
        let l = lex("let x = a ++ \"b\\x41\\n\" # c\n  x >= -3").ok();
        let l = l.as_ref().map(|l| &l.toks[..]).unwrap_or_default();
        assert_eq!(l.len(), 11);
        assert_eq!(l[4].0, Tok::Concat);
        assert_eq!(l[5].0, Tok::Str(b"bA\n".to_vec()));
        assert_eq!(l[6].1, Pos { line: 2, col: 3 });
        assert_eq!(l[7].0, Tok::Ge);
        assert_eq!(kinds("->"), vec![Tok::Arrow, Tok::Eof]);
    }

    #[test]
    fn errors_name_the_position() {
        let e = lex("let s = \"abc").err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("line 1:9: unterminated string"));
        let e = lex("x\n  @").err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("line 2:3: unexpected character `@`"));
        assert!(lex("99999999999999999999").is_err());
        assert!(lex("\"\\q\"").is_err());
        assert!(lex("9223372036854775808").is_ok());
    }

    #[test]
    fn comment_lines_are_kept() {
        let l = lex("# one\nproc # not a doc line\n  # two\n").ok();
        let c = l.map(|l| l.comment_lines).unwrap_or_default();
        assert_eq!(c, vec![(1, "one".to_owned()), (3, "two".to_owned())]);
    }
}
