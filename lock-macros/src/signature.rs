//! Reads the annotated function: its signature is parsed, its body is kept as tokens.
//!
//! Input: `#[doc] pub async fn buy(&self, Path(id): Path<u64>) -> Result<T, E> { .. }`.
//! Output: [`LockedFn`] with the argument bindings a key template may name (`self`, `id`).
//!
//! The body is never parsed: a syntax error in it then reaches the user as rustc's own
//! error about their code, not as a failure of this attribute.

use proc_macro2::{Ident, TokenStream};
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{Attribute, FnArg, Pat, ReturnType, Signature, Type, Visibility, braced};

use crate::attr::Errors;

/// An annotated function, with its body as raw tokens.
pub(crate) struct LockedFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// The body's tokens, without the braces.
    pub(crate) body: TokenStream,
    pub(crate) brace_span: proc_macro2::Span,
}

impl Parse for LockedFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig: Signature = input.parse()?;
        let content;
        let brace = braced!(content in input);
        let body = content.parse()?;
        Ok(LockedFn {
            attrs,
            vis,
            sig,
            body,
            brace_span: brace.span.join(),
        })
    }
}

impl LockedFn {
    /// Checks what the attribute needs of the signature: `async`, a `Result` return type.
    pub(crate) fn check(&self) -> syn::Result<()> {
        let mut errors = Errors::default();
        if self.sig.asyncness.is_none() {
            errors.push(syn::Error::new(
                self.sig.fn_token.span,
                "#[distributed_lock] needs an `async fn`: the lock is held across the body's \
                 await points; write `async fn`",
            ));
        }
        match &self.sig.output {
            ReturnType::Default => errors.push(syn::Error::new(
                self.sig.paren_token.span.close(),
                "#[distributed_lock] needs a function that returns `Result<T, E>` with \
                 `E: From<LockError>`, so that a lock failure can be returned; \
                 add e.g. `-> Result<(), LockError>`",
            )),
            ReturnType::Type(_, ty) if !is_result(ty) => errors.push(syn::Error::new(
                ty.span(),
                "#[distributed_lock] needs a function that returns `Result<T, E>` with \
                 `E: From<LockError>`, so that a lock failure can be returned; \
                 wrap the return type, e.g. `Result<T, LockError>`",
            )),
            ReturnType::Type(..) => {}
        }
        errors.finish()
    }

    /// The declared type of each argument bound by a plain name (`id: u64`, `mut id: u64`),
    /// by its name as a template writes it, for the placeholder checks that read it.
    pub(crate) fn argument_types(&self) -> Vec<(String, &Type)> {
        self.sig
            .inputs
            .iter()
            .filter_map(|input| match input {
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(ident) if ident.subpat.is_none() => {
                        Some((ident.ident.unraw().to_string(), &*typed.ty))
                    }
                    _ => None,
                },
                FnArg::Receiver(_) => None,
            })
            .collect()
    }

    /// The names a key template may refer to, each with the identifier as the user wrote
    /// it (so generated code that names it resolves to the user's binding).
    pub(crate) fn bindings(&self) -> Vec<Ident> {
        let mut names = Vec::new();
        for input in &self.sig.inputs {
            match input {
                FnArg::Receiver(receiver) => {
                    names.push(Ident::new("self", receiver.self_token.span));
                }
                FnArg::Typed(typed) => collect_bindings(&typed.pat, &mut names),
            }
        }
        names
    }
}

/// A `Result` or an alias of one (`io::Result<T>`, `anyhow::Result<T>`, `ShopResult<T>`):
/// the last path segment ends in `Result`. Anything else that slips through is caught by
/// the type checker at the generated call, which requires a `Result`.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident.to_string().ends_with("Result")),
        Type::Paren(inner) => is_result(&inner.elem),
        Type::Group(inner) => is_result(&inner.elem),
        _ => false,
    }
}

/// Every identifier a pattern binds: `id`, `Path(id)`, `User { id, name: n }`, `(a, b)`.
fn collect_bindings(pat: &Pat, names: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.clone());
            if let Some((_, sub)) = &ident.subpat {
                collect_bindings(sub, names);
            }
        }
        Pat::Reference(reference) => collect_bindings(&reference.pat, names),
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Struct(strukt) => strukt
            .fields
            .iter()
            .for_each(|field| collect_bindings(&field.pat, names)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Type(typed) => collect_bindings(&typed.pat, names),
        Pat::Paren(paren) => collect_bindings(&paren.pat, names),
        _ => {}
    }
}
