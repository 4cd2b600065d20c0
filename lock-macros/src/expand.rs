//! Generates the locked function. Nothing here checks user input; that happened in
//! [`crate::attr`], [`crate::signature`] and [`crate::template`].
//!
//! Input:
//! ```text
//! #[distributed_lock(key = "stock:<id>", ttl = "10s")]
//! pub async fn buy(id: u64) -> Result<Order, ShopError> { BODY }
//! ```
//! Output (every path through `::lock_runtime::__private`, or the `crate = "..."` path):
//! ```text
//! pub async fn buy(id: u64) -> Result<Order, ShopError> {
//!     #![inner attributes of BODY]
//!     const _: () = assert!(10000 <= MAX_TTL_MS, "..");
//!     if false { let fake: Result<Order, ShopError> = loop {}; return fake; }
//!     let failure = <ShopError as FromLockError<_>>::FAILURE;
//!     let key = { let mut k = KeyBuilder::new("stock:<id>"); k.literal("stock:");
//!                 k.value("id", KeyPart::key_part(&id)); k.finish() };
//!     let options = Options::new()
//!         .order(&["stock:<id>"], concat!(module_path!(), "::buy"), file!(), line!())
//!         .ttl_ms(10000);
//!     run(key, failure, options, body::<Result<Order, ShopError>, _>(async move { BODY }))
//!         .await
//! }
//! ```
//! With several keys (`key = ["account:<from>", "account:<to>"]`) each template is rendered
//! the same way, into an array, and the call is
//! `run_multi([key0, key1], failure, options, body::<..>(async move { BODY }))` (a
//! `MultiLock`).
//! With `mode = "read"` or `"write"` the call is `run_read` or `run_write` (an `RwLock`).
//!
//! `Options::new()` is the runtime's `LockOptions::default()`; only the options the user
//! wrote are set on it. `body::<R, _>` only names the body's output type, so a mismatch
//! in the body is reported at the body. Where `R` mentions `impl Trait`, the fake return
//! and `body` name it with each `impl Trait` erased to `_`.
//! The key is rendered from borrows before the body takes the arguments by move. The
//! body stays a block of its own, so its `return` and `?` leave only that block and the
//! release in `run` always follows.
//!
//! `failure` checks the error type once, at the user's `E` (see `failure_check`); `run`
//! takes its error type from it, so a missing `From<LockError>` is one error, not one per
//! use of `run`. `KeyPart::key_part` is the placeholder's `Display` check, at the template.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{LitStr, ReturnType, Type};

use crate::attr::{DurationValue, Errors, Keys, Mode, OnLost, Options, RawOptions};
use crate::signature::LockedFn;
use crate::template::{Segment, Template};

/// The attribute's entry point: the locked function, or the errors followed by the
/// original item (so the item still exists for the rest of the build).
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    match check(args, item.clone()) {
        Ok((options, templates, function)) => generate(&options, &templates, function),
        Err(error) => {
            let error = error.to_compile_error();
            quote! { #error #item }
        }
    }
}

/// Runs every check and reports all their errors together.
fn check(args: TokenStream, item: TokenStream) -> syn::Result<(Options, Vec<Template>, LockedFn)> {
    let mut errors = Errors::default();
    let raw = syn::parse2::<RawOptions>(args)
        .map_err(|err| errors.push(err))
        .ok();
    let keys = raw
        .as_ref()
        .map(RawOptions::key_templates)
        .unwrap_or_default();
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
    let mut templates = Vec::new();
    if let Some(function) = &function {
        if let Err(err) = function.check() {
            errors.push(err);
        }
        let bindings = function.bindings();
        let arguments = function.argument_types();
        for key in &keys {
            match Template::parse(key, &bindings) {
                Ok(parsed) => {
                    if let Err(err) = parsed.check_fields(key, &arguments) {
                        errors.push(err);
                    }
                    templates.push(parsed);
                }
                Err(err) => errors.push(err),
            }
        }
    }
    errors.finish()?;
    match (options, function) {
        // The options' templates are the ones parsed: `key_templates` and the option
        // check admit the same non-empty, distinct string literals.
        (Some(options), Some(function)) if options.keys.templates().len() == templates.len() => {
            Ok((options, templates, function))
        }
        // Every `None` above pushed an error, which `finish` returned.
        _ => Err(syn::Error::new(
            Span::call_site(),
            "invalid #[distributed_lock]",
        )),
    }
}

fn generate(options: &Options, templates: &[Template], function: LockedFn) -> TokenStream {
    let LockedFn {
        attrs,
        vis,
        sig,
        body,
        brace_span,
    } = function;
    let krate = match &options.krate {
        Some(path) => quote!(#path),
        None => quote!(::lock_runtime),
    };
    let private = quote!(#krate::__private);
    let key_var = Ident::new("__lock_key", Span::mixed_site());
    let options_var = Ident::new("__lock_options", Span::mixed_site());
    let failure_var = Ident::new("__lock_failure", Span::mixed_site());

    let (render, run_fn) = render_keys(options, templates, &private, &key_var);
    // A semaphore's run takes its permit count after the key.
    let permits = options
        .permits
        .map(|(permits, span)| quote_spanned!(span=> #permits,));
    let (max_ttl_check, build_options) = options_expr(&private, options, &sig.ident);

    let (inner_attrs, body) = split_inner_attributes(body);
    let Checked {
        body,
        fake_return,
        failure_check,
        run_span,
    } = checked_body(
        options,
        &private,
        (&sig.output, &failure_var),
        (body, brace_span),
    );
    // The call is spanned at the return type: a body future of another output type is
    // reported there.
    let private_at_ty = respan(private.clone(), run_span);
    let run_fn = Ident::new(run_fn, run_span);
    let run = quote_spanned! {run_span=>
        #private_at_ty::#run_fn(#key_var, #failure_var, #permits #options_var, #body).await
    };

    quote! {
        #(#attrs)*
        #vis #sig {
            #inner_attrs
            #max_ttl_check
            #fake_return
            #failure_check
            let #key_var = #render;
            let #options_var = #build_options;
            #run
        }
    }
}

/// The body as the future `run` takes, and what checks it against the function's return
/// type (none for a function without one).
struct Checked {
    /// `async move { .. }`, its output fixed to the return type.
    body: TokenStream,
    /// See [`fake_return`].
    fake_return: TokenStream,
    /// See [`failure_check`].
    failure_check: TokenStream,
    /// Where `run`'s call is spanned: the return type.
    run_span: Span,
}

/// The body (`body`, within braces at `brace_span`) as an `async move` block, its output
/// fixed to the return type `output`, and the checks of that type.
fn checked_body(
    options: &Options,
    private: &TokenStream,
    (output, failure_var): (&ReturnType, &Ident),
    (body, brace_span): (TokenStream, Span),
) -> Checked {
    let mut block = Group::new(Delimiter::Brace, body);
    block.set_span(brace_span);
    let body = quote_spanned!(brace_span=> async move #block);
    let ReturnType::Type(_, ty) = output else {
        return Checked {
            body,
            fake_return: TokenStream::new(),
            failure_check: TokenStream::new(),
            run_span: Span::call_site(),
        };
    };
    let erased = erase_impl_trait(ty);
    // At the body: a bound of `run` that the body's future breaks (an error type other
    // than the function's) is reported where `body` reports it, not at the attribute.
    // (A `crate = "..."` path keeps its spans: if it does not resolve, that is reported
    // at the path the user wrote, once.)
    let private_at_body = match options.krate {
        Some(_) => private.clone(),
        None => respan(private.clone(), brace_span),
    };
    Checked {
        body: quote_spanned!(brace_span=> #private_at_body::body::<#erased, _>(#body)),
        fake_return: fake_return(&erased),
        failure_check: failure_check(private, ty, failure_var),
        run_span: ty.span(),
    }
}

/// `let failure = <E as FromLockError<_>>::FAILURE;`: the check that the error type `E`
/// of the return type holds a lock failure (`E: From<LockError>`), and the zero-sized
/// proof that `run` takes in its place. Spanned at `E` where the return type spells it
/// (`Result<T, E>`), else at the whole type, read through `Outcome` (an alias such as
/// `io::Result<T>`), so rustc reports a missing `From<LockError>` there, once: `run`
/// needs nothing else of `E` (see `FromLockError` in the runtime's `__private`).
///
/// Where the type to check holds an `impl Trait`, which the check cannot name, the proof
/// is `Failure::inferred()`, and `run`'s own bound checks `E` instead.
fn failure_check(private: &TokenStream, ty: &Type, failure_var: &Ident) -> TokenStream {
    // rustc reports the check at the span of the checked type (the `<..>` of the path).
    let (checked, inferred) = match error_type(ty) {
        Some(error) => (
            respan(quote!(#error), error.span()),
            erase_impl_trait(error) != *error,
        ),
        None => (
            respan(quote!(<#ty as #private::Outcome>::Error), ty.span()),
            erase_impl_trait(ty) != *ty,
        ),
    };
    let failure = if inferred {
        quote!(#private::Failure::inferred())
    } else {
        quote!(<#checked as #private::FromLockError<_>>::FAILURE)
    };
    quote! {
        let #failure_var = #failure;
    }
}

/// `E` of a return type written `Result<T, E>` (a path whose last segment is `Result`
/// with two type arguments; any other alias is read through `Outcome`).
fn error_type(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) if path.qself.is_none() => {
            let segment = path.path.segments.last()?;
            let syn::PathArguments::AngleBracketed(args) = &segment.arguments else {
                return None;
            };
            if segment.ident != "Result" {
                return None;
            }
            let types: Vec<&Type> = args
                .args
                .iter()
                .filter_map(|arg| match arg {
                    syn::GenericArgument::Type(ty) => Some(ty),
                    _ => None,
                })
                .collect();
            match types.as_slice() {
                [_, error] => Some(error),
                _ => None,
            }
        }
        Type::Paren(inner) => error_type(&inner.elem),
        Type::Group(inner) => error_type(&inner.elem),
        _ => None,
    }
}

/// The expression that renders the key (an array of them for several keys), and the
/// `__private` entry point that runs the body under it.
fn render_keys(
    options: &Options,
    templates: &[Template],
    private: &TokenStream,
    key_var: &Ident,
) -> (TokenStream, &'static str) {
    let renders = options
        .keys
        .templates()
        .iter()
        .zip(templates)
        .map(|(lit, template)| render_key(private, lit, template, key_var));
    match &options.keys {
        Keys::One(_) if options.permits.is_some() => (quote!(#(#renders)*), "run_semaphore"),
        Keys::One(_) => (
            quote!(#(#renders)*),
            match options.mode {
                None => "run",
                Some(Mode::Read) => "run_read",
                Some(Mode::Write) => "run_write",
            },
        ),
        Keys::Many(_) => (quote!([#(#renders),*]), "run_multi"),
    }
}

/// The options expression, `Options::new().order(..).ttl_ms(10000)`: the templates and
/// `function` for the lock-order check, and a setter for each option the user wrote; and,
/// for a `ttl` literal, a constant that asserts it against the runtime's maximum (spanned at the `ttl` literal, so rustc reports it there). A `ttl`
/// expression is checked by the runtime on each call, as `Lock::ttl` is.
fn options_expr(
    private: &TokenStream,
    options: &Options,
    function: &Ident,
) -> (TokenStream, TokenStream) {
    let mut setters = order_setter(options, function);
    let mut max_ttl_check = TokenStream::new();
    if let Some(ttl) = &options.ttl {
        if let DurationValue::Millis(ttl_ms, span) = *ttl {
            max_ttl_check = quote_spanned! {span=>
                const _: () = ::core::assert!(
                    #ttl_ms <= #private::MAX_TTL_MS,
                    "`ttl` is over the maximum lease, `lock_runtime::MAX_TTL`; give a shorter \
                     one, e.g. ttl = \"30s\": the watchdog renews it while the body runs",
                );
            };
        }
        setters.extend(duration_setter(ttl, "ttl"));
    }
    if let Some(wait) = &options.wait {
        setters.extend(duration_setter(wait, "wait"));
    }
    if let Some(watchdog) = options.watchdog {
        setters.extend(quote!(.watchdog(#watchdog)));
    }
    if let Some(on_lost) = options.on_lost {
        let on_lost = match on_lost {
            OnLost::Cancel => quote!(#private::OnLost::Cancel),
            OnLost::Continue => quote!(#private::OnLost::Continue),
        };
        setters.extend(quote!(.on_lost(#on_lost)));
    }
    if let Some(fencing) = options.fencing {
        setters.extend(quote!(.fencing(#fencing)));
    }
    if let Some((hold_ms, _)) = options.hold_at_least_ms {
        // Without a written `ttl`, checked by the runtime against the ttl in force.
        setters.extend(quote!(.hold_at_least(::core::time::Duration::from_millis(#hold_ms))));
    }
    if let Some(max_hold) = &options.max_hold {
        setters.extend(duration_setter(max_hold, "max_hold"));
    }
    if let Some(client) = &options.client {
        // Borrowed, so that naming a field (`client = state.locks`) moves nothing; the
        // call is spanned at the expression, where a wrong type is reported.
        let value = quote_spanned! {client.span()=> #private::client_of(&(#client)) };
        setters.extend(quote!(.client_named(#value)));
    }
    let build = quote!(#private::Options::new() #setters);
    (max_ttl_check, build)
}

/// `.order(&["stock:<id>"], concat!(module_path!(), "::buy"), file!(), line!())`: the
/// templates as written and the function, which the lock-order check reports.
fn order_setter(options: &Options, function: &Ident) -> TokenStream {
    let templates = options.keys.templates();
    let function = format!("::{}", function.unraw());
    quote! {
        .order(
            &[#(#templates),*],
            ::core::concat!(::core::module_path!(), #function),
            ::core::file!(),
            ::core::line!(),
        )
    }
}

/// `.ttl_ms(10000)` for a literal; `.ttl({ let d: Duration = EXPR; d })` for an
/// expression, whose type annotation is spanned at the expression, so that rustc reports a
/// value of another type there ("expected `Duration`").
fn duration_setter(value: &DurationValue, name: &str) -> TokenStream {
    match value {
        DurationValue::Millis(ms, _) => {
            let setter = Ident::new(&format!("{name}_ms"), Span::call_site());
            quote!(.#setter(#ms))
        }
        DurationValue::Expr(expr) => {
            let setter = Ident::new(name, Span::call_site());
            let var = Ident::new(&format!("__lock_{name}"), Span::mixed_site());
            let value = quote_spanned! {expr.span()=>
                {
                    let #var: ::core::time::Duration = #expr;
                    #var
                }
            };
            quote!(.#setter(#value))
        }
    }
}

/// Splits the body's leading inner attributes (`#![allow(..)]`, `//!` docs) from the rest,
/// so they can be lifted to the generated function's body, where they apply to the whole
/// function as the user meant (an `async` block does not accept them).
///
/// Input: `#![allow(unused)] let x = 1; Ok(x)`.
/// Output: (`#![allow(unused)]`, `let x = 1; Ok(x)`).
fn split_inner_attributes(body: TokenStream) -> (TokenStream, TokenStream) {
    let tokens: Vec<TokenTree> = body.into_iter().collect();
    let mut split = 0;
    while let [
        TokenTree::Punct(pound),
        TokenTree::Punct(bang),
        TokenTree::Group(group),
        ..,
    ] = &tokens[split..]
    {
        if pound.as_char() != '#'
            || bang.as_char() != '!'
            || group.delimiter() != Delimiter::Bracket
        {
            break;
        }
        split += 3;
    }
    let inner = tokens[..split].iter().cloned().collect();
    let rest = tokens[split..].iter().cloned().collect();
    (inner, rest)
}

/// `{ let mut k = KeyBuilder::new(..); k.literal(..); k.value(..); k.finish() }`.
///
/// Placeholder expressions carry the key literal's span: they resolve to the user's
/// arguments, and a missing field or `Display` impl is reported at the template. Each value
/// goes through `KeyPart::key_part` (the coercion to `&dyn Display`, inlined), whose
/// `on_unimplemented` says what a placeholder needs.
fn render_key(
    private: &TokenStream,
    lit: &LitStr,
    template: &Template,
    key_var: &Ident,
) -> TokenStream {
    let span = lit.span();
    // The `KeyPart` check is reported at the path's span: the template, not the attribute.
    let private_at_lit = respan(private.clone(), span);
    let steps = template.segments.iter().map(|segment| match segment {
        Segment::Literal(text) => quote! { #key_var.literal(#text); },
        Segment::Placeholder(placeholder) => {
            let root = if placeholder.root == "self" {
                quote_spanned!(span=> self)
            } else {
                member(&placeholder.root, span)
            };
            // A method named as a field (`<name.len>`) is rustc's "method, not a field"
            // at the template: no rustc hook labels that error (the lib.rs docs say that
            // placeholders read fields).
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
                #key_var.value(#text, #private_at_lit::KeyPart::key_part(&#root #(#fields)*));
            }
        }
    });
    quote! {
        {
            let mut #key_var = #private::KeyBuilder::new(#lit);
            #(#steps)*
            #private::KeyBuilder::finish(#key_var)
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
/// the body is reported at the user's expression, not at this attribute. `ty` has its
/// `impl Trait`s erased (a `let` may not name one).
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

/// `tokens` with every span set to `span` (resolution stays that of `span`).
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// The return type with every `impl Trait` replaced by `_`, which a `let` and a turbofish
/// may name: rustc infers it from the body, and still checks everything around it.
///
/// Input: `Result<impl Display, E>`. Output: `Result<_, E>`.
fn erase_impl_trait(ty: &Type) -> Type {
    struct EraseImplTrait;
    impl VisitMut for EraseImplTrait {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](impl_trait.impl_token.span),
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    EraseImplTrait.visit_type_mut(&mut ty);
    ty
}
