//! Generates the locked function. Nothing here checks user input; that happened in
//! [`crate::attr`], [`crate::signature`] and [`crate::template`].
//!
//! Input:
//! ```text
//! #[distributed_lock(key = "stock:<id>", ttl = "10s")]
//! pub async fn buy(id: u64) -> Result<Order, ShopError> { BODY }
//! ```
//! Output:
//! ```text
//! pub async fn buy(id: u64) -> Result<Order, ShopError> {
//!     if false { let fake: Result<Order, ShopError> = loop {}; return fake; }
//!     let key = { let mut k = KeyBuilder::new("stock:<id>"); k.literal("stock:");
//!                 k.value("id", &id); k.finish() };
//!     let options = options(10000, 10000, true, OnLost::Cancel, false);
//!     run(key, options, body::<Result<Order, ShopError>, _>(async move { BODY })).await
//! }
//! ```
//! `body::<R, _>` only names the body's output type, so a mismatch in the body is
//! reported at the body.
//! The key is rendered from borrows before the body takes the arguments by move. The
//! body stays a block of its own, so its `return` and `?` leave only that block and the
//! release in `run` always follows.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{LitStr, ReturnType};

use crate::attr::{Errors, OnLost, Options, RawOptions};
use crate::signature::LockedFn;
use crate::template::{Segment, Template};

/// The attribute's entry point: the locked function, or the errors followed by the
/// original item (so the item still exists for the rest of the build).
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    match check(args, item.clone()) {
        Ok((options, template, function)) => generate(&options, &template, function),
        Err(error) => {
            let error = error.to_compile_error();
            quote! { #error #item }
        }
    }
}

/// Runs every check and reports all their errors together.
fn check(args: TokenStream, item: TokenStream) -> syn::Result<(Options, Template, LockedFn)> {
    let mut errors = Errors::default();
    let raw = syn::parse2::<RawOptions>(args)
        .map_err(|err| errors.push(err))
        .ok();
    let key = raw.as_ref().and_then(RawOptions::key);
    let options = raw.and_then(|raw| {
        raw.check(Span::call_site())
            .map_err(|err| errors.push(err))
            .ok()
    });
    let function = syn::parse2::<LockedFn>(item)
        .map_err(|err| {
            errors.push(syn::Error::new(
                err.span(),
                format!("#[distributed_lock] goes on an `async fn`: {err}"),
            ))
        })
        .ok();
    let mut template = None;
    if let Some(function) = &function {
        if let Err(err) = function.check() {
            errors.push(err);
        }
        if let Some(key) = &key {
            match Template::parse(key, &function.bindings()) {
                Ok(parsed) => template = Some(parsed),
                Err(err) => errors.push(err),
            }
        }
    }
    errors.finish()?;
    match (options, template, function) {
        (Some(options), Some(template), Some(function)) => Ok((options, template, function)),
        // Every `None` above pushed an error, which `finish` returned.
        _ => Err(syn::Error::new(
            Span::call_site(),
            "invalid #[distributed_lock]",
        )),
    }
}

fn generate(options: &Options, template: &Template, function: LockedFn) -> TokenStream {
    let LockedFn {
        attrs,
        vis,
        sig,
        body,
        brace_span,
    } = function;
    let private = quote!(::lock_runtime::__private);
    let key_var = Ident::new("__lock_key", Span::mixed_site());
    let options_var = Ident::new("__lock_options", Span::mixed_site());

    let render = render_key(&options.key, template, &key_var);
    let Options {
        ttl_ms,
        wait_ms,
        watchdog,
        on_lost,
        fencing,
        ..
    } = options;
    let on_lost = match on_lost {
        OnLost::Cancel => quote!(#private::OnLost::Cancel),
        OnLost::Continue => quote!(#private::OnLost::Continue),
    };

    let mut block = Group::new(Delimiter::Brace, body);
    block.set_span(brace_span);
    let mut body = quote_spanned!(brace_span=> async move #block);
    let mut fake_return = TokenStream::new();
    let mut run_span = Span::call_site();
    if let ReturnType::Type(_, ty) = &sig.output {
        run_span = ty.span();
        if !mentions_impl(quote::ToTokens::to_token_stream(ty)) {
            fake_return = self::fake_return(ty);
            body = quote!(#private::body::<#ty, _>(#body));
        }
    }
    // The whole call is spanned at the return type, so a missing `From<LockError>` for
    // the error type is reported there.
    let run = quote_spanned! {run_span=>
        ::lock_runtime::__private::run(#key_var, #options_var, #body)
    };

    quote! {
        #(#attrs)*
        #vis #sig {
            #fake_return
            let #key_var = #render;
            let #options_var = #private::options(
                #ttl_ms, #wait_ms, #watchdog, #on_lost, #fencing,
            );
            #run.await
        }
    }
}

/// `{ let mut k = KeyBuilder::new(..); k.literal(..); k.value(..); k.finish() }`.
///
/// Placeholder expressions carry the key literal's span: they resolve to the user's
/// arguments, and a missing field or `Display` impl is reported at the template.
fn render_key(lit: &LitStr, template: &Template, key_var: &Ident) -> TokenStream {
    let span = lit.span();
    let steps = template.segments.iter().map(|segment| match segment {
        Segment::Literal(text) => quote! { #key_var.literal(#text); },
        Segment::Placeholder(placeholder) => {
            let root = if placeholder.root == "self" {
                quote_spanned!(span=> self)
            } else {
                member(&placeholder.root, span)
            };
            let fields = placeholder.fields.iter().map(|field| {
                let field = match field.parse::<u32>() {
                    Ok(index) => {
                        let index = syn::Index { index, span };
                        quote!(#index)
                    }
                    Err(_) => member(field, span),
                };
                quote_spanned!(span=> .#field)
            });
            let text = &placeholder.text;
            quote_spanned! {span=>
                #key_var.value(#text, &#root #(#fields)*);
            }
        }
    });
    quote! {
        {
            let mut #key_var = ::lock_runtime::__private::KeyBuilder::new(#lit);
            #(#steps)*
            ::lock_runtime::__private::KeyBuilder::finish(#key_var)
        }
    }
}

/// An identifier with the given span, raw when the name is a keyword (`r#type`).
///
/// Neither constructor can panic on what the template pass admits: a root equal to one of
/// the function's own argument names, and fields that are ASCII identifiers other than
/// `self`, `Self`, `super` and `crate` (which not even a raw identifier may be).
fn member(name: &str, span: Span) -> TokenStream {
    let ident = match syn::parse_str::<Ident>(name) {
        Ok(_) => Ident::new(name, span),
        Err(_) => Ident::new_raw(name, span),
    };
    quote!(#ident)
}

/// Pins the function's return type before the body is checked, so a type mismatch in
/// the body is reported at the user's expression, not at this attribute. Not used when
/// the type mentions `impl Trait`, which a `let` may not name.
fn fake_return(ty: &syn::Type) -> TokenStream {
    let fake = Ident::new("__lock_fake_return", Span::mixed_site());
    quote_spanned! {ty.span()=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::needless_return,
        )]
        if false {
            let #fake: #ty = loop {};
            return #fake;
        }
    }
}

fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|tree| match tree {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}
