//! Reading Rust source for tests/module_cycles.rs: comments and literals blanked, tokens,
//! `#[cfg(test)]` items skipped, `mod` declarations and `use` trees.

use super::Module;

/// Copy of `src` with comments and the contents of string and character literals replaced
/// by spaces, byte for byte, so that offsets and line numbers stay those of `src`.
pub fn blank(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in out[from..to.min(b.len())]
            .iter_mut()
            .filter(|c| **c != b'\n')
        {
            *c = b' ';
        }
    };
    let find = |from: usize, what: &[u8]| {
        let tail = b.get(from..).unwrap_or_default();
        tail.windows(what.len())
            .position(|w| w == what)
            .map_or(b.len(), |p| from + p)
    };
    let mut i = 0;
    while i < b.len() {
        let after_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let raw = (!after_ident).then(|| raw_string_start(&b[i..])).flatten();
        if b[i..].starts_with(b"//") {
            let end = find(i, b"\n");
            wipe(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                } else {
                    j += 1;
                    continue;
                }
                j += 2;
                if depth == 0 {
                    break;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if let Some((quote, hashes)) = raw {
            let close = [b"\"".as_slice(), &vec![b'#'; hashes]].concat();
            let end = find(i + quote + 1, &close);
            wipe(&mut out, i + quote + 1, end);
            i = end + close.len();
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            wipe(&mut out, i + 1, j);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\'', '\u{1F600}'), else a lifetime ('a, 'static).
            let end = if b.get(i + 1) == Some(&b'\\') {
                Some(find(i + 3, b"'"))
            } else {
                let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 1 + len)
            };
            if let Some(j) = end {
                wipe(&mut out, i + 1, j);
                i = j;
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

/// For a raw string at the start of `b` (`r"`, `r#"`, `br##"`): the offset of its opening
/// quote and the number of `#`.
fn raw_string_start(b: &[u8]) -> Option<(usize, usize)> {
    let skip = if b.starts_with(b"br") {
        2
    } else {
        usize::from(b.starts_with(b"r"))
    };
    let hashes = b.get(skip..)?.iter().take_while(|&&c| c == b'#').count();
    (skip > 0 && b.get(skip + hashes) == Some(&b'"')).then_some((skip + hashes, hashes))
}

/// A token of blanked source: an identifier, `::` or one other character.
pub struct Token {
    pub text: String,
    pub at: usize,
    pub line: usize,
}

fn tokens(code: &[u8]) -> Vec<Token> {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < code.len() {
        let start = i;
        if code[i] == b'\n' {
            line += 1;
        }
        if code[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        i += if word(code[i]) {
            code[i..].iter().take_while(|&&c| word(c)).count()
        } else if code[i..].starts_with(b"::") {
            2
        } else {
            1
        };
        let text = String::from_utf8_lossy(&code[start..i]).into_owned();
        out.push(Token {
            text,
            at: start,
            line,
        });
    }
    out
}

/// Index of the token after the attribute (`until` `"]"`) or item (`"}"`, or a `;` outside
/// brackets) that starts at `i`.
fn skip(t: &[Token], mut i: usize, until: &str) -> usize {
    let mut depth = 0;
    while i < t.len() {
        match t[i].text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ";" if depth == 0 && until == "}" => return i + 1,
            close @ (")" | "]" | "}") => {
                depth -= 1;
                if depth == 0 && close == until {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// A file's non-test tokens, each with the inline module it sits in (relative path).
#[derive(Default)]
pub struct Parsed {
    pub tokens: Vec<(Token, Module)>,
    /// `mod x;` declarations: the inline module they sit in, the name, the `#[path]`.
    pub declared: Vec<(Module, String, Option<String>)>,
    pub inline: Vec<Module>,
}

pub fn parse(src: &str) -> Parsed {
    let t = tokens(&blank(src));
    let mut p = Parsed::default();
    // Open inline modules, each with the brace depth inside it.
    let (mut open, mut depth): (Vec<(String, i32)>, i32) = (Vec::new(), 0);
    let mut path_attr = None;
    let mut i = 0;
    while i < t.len() {
        let inline: Module = open.iter().map(|(n, _)| n.clone()).collect();
        let text = t[i].text.as_str();
        let next = |n: usize| t.get(i + n).map_or("", |k| k.text.as_str());
        if text == "#" && (next(1) == "[" || next(1) == "!") {
            let end = skip(&t, i, "]");
            let words: String = t[i..end].iter().map(|k| k.text.as_str()).collect();
            if words == "#[cfg(test)]" {
                let mut j = end;
                while t.get(j).is_some_and(|k| k.text == "#") {
                    j = skip(&t, j, "]");
                }
                i = skip(&t, j, "}");
                continue;
            }
            if words.starts_with("#[path=\"") {
                path_attr = src[t[i + 4].at + 1..].split('"').next().map(str::to_owned);
            }
            i = end;
            continue;
        }
        let mut m = i;
        if text == "pub" {
            m += if next(1) == "(" {
                skip(&t, i + 1, ")") - i
            } else {
                1
            };
        }
        let name = t.get(m + 1).map(|k| k.text.clone()).unwrap_or_default();
        match (
            t.get(m).map(|k| k.text.as_str()),
            t.get(m + 2).map(|k| k.text.as_str()),
        ) {
            (Some("mod"), Some(";")) => {
                p.declared.push((inline, name, path_attr.take()));
                i = m + 3;
                continue;
            }
            (Some("mod"), Some("{")) => {
                depth += 1;
                open.push((name.clone(), depth));
                p.inline.push([inline, vec![name]].concat());
                i = m + 3;
                continue;
            }
            _ => {}
        }
        if text == "{" {
            depth += 1;
        } else if text == "}" {
            if open.last().is_some_and(|(_, d)| *d == depth) {
                open.pop();
            }
            depth -= 1;
        }
        path_attr = None;
        let token = Token {
            text: text.to_owned(),
            at: t[i].at,
            line: t[i].line,
        };
        p.tokens.push((token, inline));
        i += 1;
    }
    p
}

/// Reads one use tree from `t[*i]`, adding each leaf path with the name it brings in.
pub fn use_tree(
    t: &[&Token],
    i: &mut usize,
    mut segments: Vec<String>,
    out: &mut Vec<(Module, String)>,
) {
    while let Some(token) = t.get(*i) {
        *i += 1;
        match token.text.as_str() {
            "::" => {}
            "*" => return out.push((segments, String::new())),
            "{" => {
                while t.get(*i).is_some_and(|k| k.text != "}") {
                    use_tree(t, i, segments.clone(), out);
                    *i += usize::from(t.get(*i).is_some_and(|k| k.text == ","));
                }
                *i += 1;
                return;
            }
            ";" | "," | "}" => {
                *i -= 1;
                return;
            }
            word => {
                segments.push(word.to_owned());
                if t.get(*i).is_some_and(|k| k.text == "::") {
                    continue;
                }
                let mut local = word.to_owned();
                if t.get(*i).is_some_and(|k| k.text == "as") {
                    local = t.get(*i + 1).map(|k| k.text.clone()).unwrap_or_default();
                    *i += 2;
                }
                if local == "self" {
                    local = segments.iter().rev().nth(1).cloned().unwrap_or_default();
                }
                return out.push((segments, local));
            }
        }
    }
}

pub fn is_ident(text: &str) -> bool {
    text.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}
