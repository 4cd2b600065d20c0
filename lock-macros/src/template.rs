//! Parses a key template and resolves its placeholders against the function's arguments.
//!
//! Input: `"order:<shop.id>:<item>"` and the bindings `shop`, `item`.
//! Output: `[Literal("order:"), Placeholder(shop.id), Literal(":"), Placeholder(item)]`.
//!
//! `<` and `>` only delimit placeholders. A placeholder is an argument name, optionally
//! followed by fields (`<user.id>`, `<pair.0>`, `<self.tenant>`).

use proc_macro2::Ident;
use syn::ext::IdentExt as _;
use syn::{LitStr, PathArguments, Type};

/// One piece of a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Text copied into the key as written.
    Literal(String),
    /// An argument (and fields of it) rendered with `Display` and escaped.
    Placeholder(Placeholder),
}

/// `<root.field.sub>`: `root` names an argument, `fields` are followed from it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// The placeholder as written, without the brackets (`user.id`).
    pub(crate) text: String,
    pub(crate) root: String,
    pub(crate) fields: Vec<String>,
}

/// A parsed template whose placeholders all name arguments.
pub(crate) struct Template {
    pub(crate) segments: Vec<Segment>,
}

/// Bytes a rendered value keeps unescaped (the runtime escapes all others as `%XX`), so a
/// separator between two placeholders must be some other byte.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '%')
}

impl Template {
    /// Parses `lit` and checks every placeholder against `bindings`.
    pub(crate) fn parse(lit: &LitStr, bindings: &[Ident]) -> syn::Result<Template> {
        let text = lit.value();
        let error = |message: String| syn::Error::new(lit.span(), message);
        if text.is_empty() {
            return Err(error(
                "the key template is empty; name the lock, e.g. key = \"stock:<id>\"".into(),
            ));
        }
        let segments = split(&text).map_err(error)?;
        let names: Vec<String> = bindings.iter().map(|b| b.unraw().to_string()).collect();
        let mut errors = crate::attr::Errors::default();
        let mut previous: Option<&Placeholder> = None;
        let mut separated = true;
        for segment in &segments {
            match segment {
                Segment::Literal(literal) => {
                    separated |= literal.chars().any(|c| !is_plain(c));
                    for braced in braced_arguments(literal, &names) {
                        errors.push(error(format!(
                            "key template `{text}` uses `{{{braced}}}`: placeholders are \
                             written `<{braced}>` (braces stay literal: they are Redis \
                             Cluster hash tags)"
                        )));
                    }
                }
                Segment::Placeholder(placeholder) => {
                    if let Err(message) = resolve(placeholder, &names) {
                        errors.push(error(message));
                    }
                    if let Some(before) = previous.filter(|_| !separated) {
                        errors.push(error(format!(
                            "placeholders <{}> and <{}> need a separator between them, such as \
                             `:`, or two different values could render the same key; write \
                             \"<{}>:<{}>\"",
                            before.text, placeholder.text, before.text, placeholder.text
                        )));
                    }
                    previous = Some(placeholder);
                    separated = false;
                }
            }
        }
        errors.finish()?;
        Ok(Template { segments })
    }
}

impl Template {
    /// Checks the placeholders that read a field of an argument whose declared type has
    /// none (`<name.len>` with `name: &str`): a method named as a field, which rustc would
    /// report as "method, not a field" with a suggestion to add `()` to the template. Other
    /// types are the compiler's to check: the macro cannot see their fields.
    pub(crate) fn check_fields(
        &self,
        lit: &LitStr,
        arguments: &[(String, &Type)],
    ) -> syn::Result<()> {
        let mut errors = crate::attr::Errors::default();
        for segment in &self.segments {
            let Segment::Placeholder(placeholder) = segment else {
                continue;
            };
            let Some(field) = placeholder.fields.first() else {
                continue;
            };
            let declared = arguments
                .iter()
                .find(|(name, _)| *name == placeholder.root)
                .and_then(|(_, ty)| fieldless(ty));
            if let Some(ty) = declared {
                let root = &placeholder.root;
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "placeholder `<{}>` reads `.{field}` of `{root}`, a `{ty}`, which has no \
                         fields: a placeholder reads fields and calls no methods; write `<{root}>`, \
                         or compute the value before the call and pass it as an argument to name \
                         in the key",
                        placeholder.text
                    ),
                ));
            }
        }
        errors.finish()
    }
}

/// Types without fields, named by one identifier: a placeholder can only render them whole.
const FIELDLESS: [&str; 18] = [
    "bool", "char", "str", "String", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize", "f32", "f64",
];

/// `ty` as the error names it (`&str`) if it is one of [`FIELDLESS`] (or `std::string::String`),
/// behind any references.
fn fieldless(ty: &Type) -> Option<String> {
    match ty {
        Type::Reference(reference) => {
            let inner = fieldless(&reference.elem)?;
            let mutability = if reference.mutability.is_some() {
                "mut "
            } else {
                ""
            };
            Some(format!("&{mutability}{inner}"))
        }
        Type::Paren(paren) => fieldless(&paren.elem),
        Type::Group(group) => fieldless(&group.elem),
        Type::Path(path) if path.qself.is_none() => {
            let segments: Vec<String> = path
                .path
                .segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect();
            let last = path.path.segments.last()?;
            if !matches!(last.arguments, PathArguments::None) {
                return None;
            }
            let plain = path.path.leading_colon.is_none()
                && segments.len() == 1
                && FIELDLESS.contains(&segments[0].as_str());
            let string = matches!(
                segments
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .as_slice(),
                ["std" | "alloc", "string", "String"]
            );
            (plain || string).then(|| last.ident.to_string())
        }
        _ => None,
    }
}

/// Splits a template into literal text and placeholders; the error says what is wrong.
fn split(text: &str) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(['<', '>']) {
        literal.push_str(&rest[..at]);
        if rest[at..].starts_with('>') {
            return Err(format!(
                "unbalanced `>` in key template \"{text}\": it closes no `<`; \
                 `<` and `>` only delimit placeholders such as `<id>`"
            ));
        }
        let after = &rest[at + 1..];
        let close = match after.find(['<', '>']) {
            Some(close) if after[close..].starts_with('>') => close,
            _ => {
                return Err(format!(
                    "unbalanced `<` in key template \"{text}\": close the placeholder with `>`, \
                     e.g. `<id>`"
                ));
            }
        };
        if !literal.is_empty() {
            segments.push(Segment::Literal(std::mem::take(&mut literal)));
        }
        segments.push(Segment::Placeholder(placeholder(&after[..close])?));
        rest = &after[close + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(segments)
}

/// Parses the inside of `<...>`.
fn placeholder(inner: &str) -> Result<Placeholder, String> {
    if inner.is_empty() {
        return Err(
            "empty placeholder `<>` in key template; name an argument inside, e.g. `<id>`".into(),
        );
    }
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default().to_owned();
    let fields: Vec<String> = parts.map(str::to_owned).collect();
    // The root only has to be word characters here: it must then equal an argument's name,
    // which Rust has already checked (so `<größe>` works when an argument is `größe`).
    let root_ok = !root.is_empty()
        && !root.starts_with(|c: char| c.is_numeric())
        && root.chars().all(|c| c.is_alphanumeric() || c == '_');
    let fields_ok = fields.iter().all(|f| is_identifier(f) || is_tuple_index(f));
    if let Some(index) = fields
        .iter()
        .find(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) && !is_tuple_index(f))
    {
        return Err(format!(
            "placeholder `<{inner}>` has `{index}` as a tuple field; write the index without \
             leading zeros and below 2^32, as in `<pair.0>`"
        ));
    }
    if !root_ok || !fields_ok {
        return Err(format!(
            "placeholder `<{inner}>` is not an argument or a field path; write `<name>`, \
             `<name.field>` or `<self.field>` (ASCII names; tuple fields as `<pair.0>`)"
        ));
    }
    if let Some(keyword) = fields
        .iter()
        .find(|f| CANNOT_BE_FIELDS.contains(&f.as_str()))
    {
        return Err(format!(
            "placeholder `<{inner}>` uses `{keyword}` as a field name, which no field can \
             have; name a field of the argument, as in `<user.id>`"
        ));
    }
    Ok(Placeholder {
        text: inner.to_owned(),
        root,
        fields,
    })
}

/// Keywords that are not identifiers even as raw identifiers (`r#self` is not allowed).
const CANNOT_BE_FIELDS: [&str; 4] = ["self", "Self", "super", "crate"];

/// An ASCII identifier: the generated code names it as written (or as `r#name` for a
/// keyword), so it must be one that `proc_macro2::Ident` accepts.
fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && text != "_"
}

/// A tuple field as Rust writes it: `0`, or digits without a leading zero, within `u32`.
fn is_tuple_index(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
        && text.parse::<u32>().is_ok()
}

/// The insides of `{name}` or `{name.field}` in literal text whose `name` is an argument
/// or `self`: another language's placeholder syntax, which would render as written, one
/// key for every call. Other braces stay literal (a cluster hash tag, `{app}:job:<id>`).
fn braced_arguments<'a>(literal: &'a str, names: &[String]) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = literal;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(['{', '}']) else {
            break;
        };
        let inner = &after[..close];
        if after[close..].starts_with('}')
            && let Ok(path) = placeholder(inner)
            && (path.root == "self" || names.contains(&path.root))
        {
            found.push(inner);
        }
        rest = &after[close..];
    }
    found
}

/// Checks that the placeholder's root is one of the function's bindings.
fn resolve(placeholder: &Placeholder, names: &[String]) -> Result<(), String> {
    if names.contains(&placeholder.root) {
        return Ok(());
    }
    if placeholder.root == "self" {
        return Err(format!(
            "placeholder <{}> names `self`, but this function has no `self` argument; \
             use `<self.field>` only in methods taking `&self`, `&mut self` or `self`",
            placeholder.text
        ));
    }
    let arguments = if names.is_empty() {
        "the function has no arguments; use literal text or add an argument".to_owned()
    } else {
        format!("the arguments are: {}", names.join(", "))
    };
    let has_self = names.iter().any(|name| name == "self");
    let suggestion = match nearest(&placeholder.root, names) {
        Some(name) => format!("did you mean `<{name}>`? "),
        None if has_self => format!("did you mean `<self.{}>`? ", placeholder.text),
        None => String::new(),
    };
    let fields_of_self = if has_self {
        "; fields of `self` are written `<self.field>`"
    } else {
        ""
    };
    Err(format!(
        "unknown placeholder <{}>: no argument is named `{}`; {suggestion}{arguments}\
         {fields_of_self}",
        placeholder.text, placeholder.root
    ))
}

/// The name closest to `wanted` by edit distance, if it is close enough to be a typo.
fn nearest<'a>(wanted: &str, names: &'a [String]) -> Option<&'a str> {
    names
        .iter()
        .map(|name| (edit_distance(wanted, name), name))
        .filter(|(distance, name)| *distance <= (name.len().max(wanted.len()) / 2).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.as_str())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str, args: &[&str]) -> Result<Vec<Segment>, String> {
        let lit = LitStr::new(text, proc_macro2::Span::call_site());
        let bindings: Vec<Ident> = args
            .iter()
            .map(|a| Ident::new(a, proc_macro2::Span::call_site()))
            .collect();
        Template::parse(&lit, &bindings)
            .map(|t| t.segments)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn literal_and_placeholders() {
        let segments = parse("order:<shop.id>:<item>", &["shop", "item"]).unwrap();
        assert_eq!(segments.len(), 4);
        assert_eq!(segments[0], Segment::Literal("order:".into()));
        match &segments[1] {
            Segment::Placeholder(p) => {
                assert_eq!(p.root, "shop");
                assert_eq!(p.fields, vec!["id".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("global-job", &[]).is_ok());
        assert!(parse("<pair.0>", &["pair"]).is_ok());
    }

    #[test]
    fn errors_say_what_to_fix() {
        let err = parse("stock:<idd>", &["id", "qty"]).unwrap_err();
        assert!(err.contains("did you mean `<id>`"), "{err}");
        assert!(
            parse("stock:<id", &["id"])
                .unwrap_err()
                .contains("unbalanced `<`")
        );
        assert!(
            parse("stock:id>", &["id"])
                .unwrap_err()
                .contains("unbalanced `>`")
        );
        assert!(
            parse("a<b<c>>", &["b", "c"])
                .unwrap_err()
                .contains("unbalanced")
        );
        assert!(parse("<>", &[]).unwrap_err().contains("empty placeholder"));
        assert!(parse("", &[]).unwrap_err().contains("empty"));
        assert!(
            parse("<a><b>", &["a", "b"])
                .unwrap_err()
                .contains("separator")
        );
        assert!(
            parse("<a>-<b>", &["a", "b"])
                .unwrap_err()
                .contains("separator")
        );
        assert!(parse("<a>/<b>", &["a", "b"]).is_ok());
        assert!(
            parse("<self.x>", &["id"])
                .unwrap_err()
                .contains("no `self`")
        );
        assert!(
            parse("<user id>", &["user"])
                .unwrap_err()
                .contains("not an argument")
        );
        for bad in ["<pair.é>", "<pair.>", "<1pair>"] {
            assert!(
                parse(bad, &["pair"])
                    .unwrap_err()
                    .contains("not an argument"),
                "{bad}"
            );
        }
        for bad in ["<pair.01>", "<pair.4294967296>"] {
            assert!(
                parse(bad, &["pair"]).unwrap_err().contains("leading zeros"),
                "{bad}"
            );
        }
        assert!(parse("<größe>", &["größe"]).is_ok());
        for keyword in ["self", "Self", "super", "crate"] {
            let err = parse(&format!("<user.{keyword}>"), &["user"]).unwrap_err();
            assert!(err.contains("as a field name"), "{err}");
        }
        assert!(parse("<pair.0>:<pair.10>:<user.type>", &["pair", "user"]).is_ok());
    }

    #[test]
    fn braces_around_an_argument_are_an_error() {
        for (template, braced) in [
            ("d:{id}", "{id}"),
            ("d:{user.id}:<id>", "{user.id}"),
            ("d:{self.tenant}", "{self.tenant}"),
        ] {
            let err = parse(template, &["id", "user", "self"]).unwrap_err();
            assert!(err.contains(&format!("uses `{braced}`")), "{err}");
            assert!(err.contains("placeholders are written `<"), "{err}");
        }
        // Braces that name no argument are a hash tag, kept as written.
        let segments = parse("{app}:job:<id>", &["id"]).unwrap();
        assert_eq!(segments[0], Segment::Literal("{app}:job:".into()));
        assert!(parse("{id:x}:{ id }:{}:{ids}:<id>", &["id"]).is_ok());
    }

    #[test]
    fn a_field_of_self_is_suggested() {
        let err = parse("d:<tenant>", &["self", "id"]).unwrap_err();
        assert!(err.contains("did you mean `<self.tenant>`?"), "{err}");
        assert!(err.contains("written `<self.field>`"), "{err}");
        let err = parse("d:<tenant>", &["id"]).unwrap_err();
        assert!(!err.contains("self"), "{err}");
    }

    #[test]
    fn a_field_of_a_type_without_fields_is_an_error() {
        let lit = LitStr::new(
            "job:<name.len>:<n.0>:<user.id>",
            proc_macro2::Span::call_site(),
        );
        let bindings: Vec<Ident> = ["name", "n", "user"]
            .iter()
            .map(|a| Ident::new(a, proc_macro2::Span::call_site()))
            .collect();
        let template = Template::parse(&lit, &bindings).unwrap();
        let types: Vec<Type> = ["&str", "&mut u64", "&User"]
            .iter()
            .map(|ty| syn::parse_str(ty).unwrap())
            .collect();
        let arguments: Vec<(String, &Type)> = ["name", "n", "user"]
            .iter()
            .map(|name| name.to_string())
            .zip(&types)
            .collect();
        let err = template.check_fields(&lit, &arguments).unwrap_err();
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].contains("`<name.len>` reads `.len` of `name`, a `&str`"));
        assert!(messages[0].contains("write `<name>`"));
        assert!(messages[1].contains("a `&mut u64`"));
        for ty in ["String", "std::string::String", "&'a str", "(bool)"] {
            assert!(fieldless(&syn::parse_str(ty).unwrap()).is_some(), "{ty}");
        }
        for ty in ["User", "Vec<u8>", "my::str", "Box<str>", "(u8, u8)"] {
            assert!(fieldless(&syn::parse_str(ty).unwrap()).is_none(), "{ty}");
        }
    }

    #[test]
    fn nearest_name() {
        let names = vec!["user".to_string(), "id".to_string()];
        assert_eq!(nearest("usr", &names), Some("user"));
        assert_eq!(nearest("quantity", &names), None);
    }
}
