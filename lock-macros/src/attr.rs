//! Parses and checks the attribute's options.
//!
//! Input: `key = "stock:<id>", ttl = "10s", watchdog = false`, or several keys as
//! `key = ["account:<from>", "account:<to>"]`.
//! Output: [`Options`], with durations in milliseconds; or every error found, combined.
//!
//! A duration is a string literal, read as `humantime` reads it (`"10s"`, `"1.5s"`,
//! `"1m30s"`) and checked here, or any other expression, which must be of type `Duration`
//! and is checked by the runtime when the call runs ([`duration_value`], for every
//! duration option).
//!
//! Only what the user wrote is kept: an option left out stays `None`, and the expansion
//! leaves it at the runtime's own default (`LockOptions::default()`), so the defaults
//! exist once, in the runtime. The same holds for the longest lease: the expansion asserts
//! a written `ttl` against `lock_runtime::MAX_TTL` in a constant, at compile time.

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprArray, ExprLit, Ident, Lit, LitBool, LitStr, Path, Token};

/// The option names, in the order the documentation lists them.
pub(crate) const OPTION_NAMES: &str = "key, ttl, wait, watchdog, on_lost, fencing, hold_at_least, max_hold, permits, mode, client, crate";

/// The most permits a semaphore may have (`lock_runtime::MAX_PERMITS`).
const MAX_PERMITS: u64 = 1_000_000;

/// What the body does when its lease is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnLost {
    /// Drop the body at its next await point and return `LockError::Lost`.
    Cancel,
    /// Let the body finish; it can read `current_lock().is_lost()`.
    Continue,
}

/// How the key is held: `mode = "read"` or `"write"` makes it a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A reader's share: other readers may hold the key at the same time.
    Read,
    /// A writer: no reader, no other writer.
    Write,
}

/// The value of a duration option (`ttl`, `wait`).
#[derive(Debug)]
pub(crate) enum DurationValue {
    /// A string literal, checked at compile time: its milliseconds, and its span.
    Millis(u64, Span),
    /// Any other expression: of type `Duration` (the compiler checks that), evaluated
    /// on each call, and checked by the runtime then.
    Expr(Expr),
}

/// The `key` option: one template, or an array of them (several keys, all or none).
#[derive(Debug)]
pub(crate) enum Keys {
    /// `key = "stock:<id>"`.
    One(LitStr),
    /// `key = ["account:<from>", "account:<to>"]`: at least one template, no two alike.
    Many(Vec<LitStr>),
}

impl Keys {
    /// Every template, in the order written.
    pub(crate) fn templates(&self) -> &[LitStr] {
        match self {
            Keys::One(lit) => std::slice::from_ref(lit),
            Keys::Many(lits) => lits,
        }
    }
}

/// The checked options of one attribute: `None` for an option the user did not write.
#[derive(Debug)]
pub(crate) struct Options {
    /// The key template(s), as written.
    pub(crate) keys: Keys,
    /// The lease; a literal is over zero (its maximum is asserted by the expansion).
    pub(crate) ttl: Option<DurationValue>,
    pub(crate) wait: Option<DurationValue>,
    pub(crate) watchdog: Option<bool>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) fencing: Option<bool>,
    /// `hold_at_least = "30s"` in milliseconds, with the span of its literal.
    pub(crate) hold_at_least_ms: Option<(u64, Span)>,
    /// `max_hold = "5m"`: the longest a hold may last; a literal is over zero.
    pub(crate) max_hold: Option<DurationValue>,
    /// `permits = 3`: a semaphore of that many holders instead of a lock, with the span of
    /// its literal.
    pub(crate) permits: Option<(u32, Span)>,
    /// `mode = "read" | "write"` (a read-write lock); `None`: the mutex.
    pub(crate) mode: Option<Mode>,
    /// `client = EXPR`: the `LockClient` the call goes through instead of the global one.
    pub(crate) client: Option<Expr>,
    /// `crate = "..."`: the path of the runtime crate, for a renamed dependency.
    pub(crate) krate: Option<Path>,
}

/// One `name = value` pair, before it is checked.
struct RawOption {
    name: Ident,
    value: Expr,
}

impl Parse for RawOption {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            let written = lit.token().to_string();
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "the options are written `name = value`: write the key as `key = {written}`"
                ),
            ));
        }
        // `parse_any` so that a keyword (`type = ..`) reaches the "unknown option" error
        // below instead of a bare "expected identifier".
        let name = Ident::parse_any(input)?;
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(RawOption { name, value })
    }
}

/// All options as written, in order.
pub(crate) struct RawOptions(Vec<RawOption>);

impl Parse for RawOptions {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let list = Punctuated::<RawOption, Token![,]>::parse_terminated(input)?;
        Ok(RawOptions(list.into_iter().collect()))
    }
}

/// Collects option values one setter at a time; [`OptionsBuilder::build`] checks the whole.
#[derive(Default)]
struct OptionsBuilder {
    keys: Option<Keys>,
    ttl: Option<DurationValue>,
    wait: Option<DurationValue>,
    watchdog: Option<bool>,
    on_lost: Option<OnLost>,
    fencing: Option<bool>,
    hold_at_least: Option<(u64, Span)>,
    max_hold: Option<DurationValue>,
    permits: Option<(u32, Span)>,
    mode: Option<(Mode, Span)>,
    fencing_span: Option<Span>,
    client: Option<Expr>,
    krate: Option<Path>,
    seen: Vec<String>,
    errors: Errors,
}

impl RawOptions {
    /// The `key` templates given as non-empty string literals (of an array: each first
    /// occurrence), so that the templates can be checked even when other options, or other
    /// elements of the array, are wrong.
    pub(crate) fn key_templates(&self) -> Vec<LitStr> {
        let Some(option) = self.0.iter().find(|option| option.name == "key") else {
            return Vec::new();
        };
        let values: Vec<&Expr> = match &option.value {
            Expr::Array(array) => array.elems.iter().collect(),
            single => vec![single],
        };
        let mut templates: Vec<LitStr> = Vec::new();
        for value in values {
            if let Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) = value
                && !lit.value().is_empty()
                && !templates.iter().any(|seen| seen.value() == lit.value())
            {
                templates.push(lit.clone());
            }
        }
        templates
    }

    /// Checks every option; `call_site` is where a missing `key` is reported.
    pub(crate) fn check(self, call_site: Span) -> syn::Result<Options> {
        let mut builder = OptionsBuilder::default();
        for option in self.0 {
            builder.set(option);
        }
        builder.build(call_site)
    }
}

impl OptionsBuilder {
    fn set(&mut self, option: RawOption) {
        let name = option.name.unraw().to_string();
        if self.seen.contains(&name) {
            self.errors.push(syn::Error::new(
                option.name.span(),
                format!("`{name}` is given twice; keep one `{name} = ...`"),
            ));
            return;
        }
        self.seen.push(name.clone());
        let result = match name.as_str() {
            "key" => self.set_key(&option.value),
            "ttl" => self.set_ttl(&option.value),
            "wait" => self.set_wait(&option.value),
            "watchdog" => bool_value(&option.value, "watchdog").map(|v| self.watchdog = Some(v)),
            "fencing" => bool_value(&option.value, "fencing").map(|v| {
                self.fencing = Some(v);
                self.fencing_span = Some(option.value.span());
            }),
            "mode" => self.set_mode(&option.value),
            "on_lost" => self.set_on_lost(&option.value),
            "hold_at_least" => self.set_hold_at_least(&option.value),
            "max_hold" => self.set_max_hold(&option.value),
            "permits" => self.set_permits(&option.value),
            "client" => {
                self.client = Some(option.value);
                Ok(())
            }
            "crate" => self.set_crate(&option.value),
            _ => Err(syn::Error::new(
                option.name.span(),
                format!("unknown option `{name}`; the options are: {OPTION_NAMES}"),
            )),
        };
        if let Err(err) = result {
            self.errors.push(err);
        }
    }

    fn set_key(&mut self, value: &Expr) -> syn::Result<()> {
        if let Expr::Array(array) = value {
            return self.set_keys(array);
        }
        let lit = template_value(
            value,
            "`key` takes a string literal template, e.g. key = \"stock:<id>\", or an array \
             of them for several keys, e.g. key = [\"account:<from>\", \"account:<to>\"]",
        )?;
        self.keys = Some(Keys::One(lit.clone()));
        Ok(())
    }

    /// `key = [..]`: every element checked as a single `key` is, and none given twice.
    fn set_keys(&mut self, array: &ExprArray) -> syn::Result<()> {
        if array.elems.is_empty() {
            return Err(syn::Error::new_spanned(
                array,
                "`key = []` names no lock; give at least one template, e.g. \
                 key = [\"account:<from>\", \"account:<to>\"]",
            ));
        }
        let mut errors = Errors::default();
        let mut templates: Vec<LitStr> = Vec::new();
        for element in &array.elems {
            let lit = match template_value(
                element,
                "each element of `key = [..]` is a string literal template, e.g. \
                 key = [\"account:<from>\", \"account:<to>\"]",
            ) {
                Ok(lit) => lit,
                Err(err) => {
                    errors.push(err);
                    continue;
                }
            };
            if templates.iter().any(|seen| seen.value() == lit.value()) {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "the key template \"{}\" is given twice; each key is locked once, \
                         so remove this one",
                        lit.value()
                    ),
                ));
            } else {
                templates.push(lit.clone());
            }
        }
        errors.finish()?;
        self.keys = Some(Keys::Many(templates));
        Ok(())
    }

    fn set_ttl(&mut self, value: &Expr) -> syn::Result<()> {
        let ttl = duration_value(value, "ttl", "10s")?;
        if let DurationValue::Millis(0, span) = ttl {
            return Err(syn::Error::new(
                span,
                "`ttl` must be greater than zero: a lease of zero expires before the body runs; \
                 write e.g. ttl = \"10s\"",
            ));
        }
        // The maximum (`lock_runtime::MAX_TTL`) is checked by the expansion, against the
        // runtime's constant.
        self.ttl = Some(ttl);
        Ok(())
    }

    fn set_wait(&mut self, value: &Expr) -> syn::Result<()> {
        self.wait = Some(duration_value(value, "wait", "5s")?);
        Ok(())
    }

    fn set_hold_at_least(&mut self, value: &Expr) -> syn::Result<()> {
        let message = "`hold_at_least` takes a duration string, e.g. hold_at_least = \"30s\"";
        let lit = str_value(value, message)?;
        let ms = parse_duration(lit)?;
        if ms == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`hold_at_least` of zero keeps nothing; leave it out, or write e.g. \
                 hold_at_least = \"30s\"",
            ));
        }
        self.hold_at_least = Some((ms, lit.span()));
        Ok(())
    }

    /// `max_hold`: a duration over zero. Checked against a written `ttl` without the
    /// watchdog (the lease ends at its ttl, so a bound at or past it bounds nothing) and a
    /// written `hold_at_least` (the key is kept that long anyway).
    fn set_max_hold(&mut self, value: &Expr) -> syn::Result<()> {
        let max_hold = duration_value(value, "max_hold", "5m")?;
        if let DurationValue::Millis(0, span) = max_hold {
            return Err(syn::Error::new(
                span,
                "`max_hold` must be greater than zero: it would end the hold before the body \
                 runs; write e.g. max_hold = \"5m\", or leave it out for no bound",
            ));
        }
        self.max_hold = Some(max_hold);
        Ok(())
    }

    /// What `max_hold` cannot go with: a bound at or past the ttl of a lease that is not
    /// renewed, or under `hold_at_least`.
    fn check_max_hold(&mut self) {
        let Some(DurationValue::Millis(max_ms, span)) = self.max_hold else {
            return;
        };
        if let (Some(false), Some(DurationValue::Millis(ttl_ms, _))) = (self.watchdog, &self.ttl)
            && max_ms >= *ttl_ms
        {
            self.errors.push(syn::Error::new(
                span,
                "`max_hold` is not under `ttl` with `watchdog = false`: the lease ends at its \
                 ttl anyway; give a shorter max_hold, or leave it out",
            ));
        }
        if let Some((hold_ms, _)) = self.hold_at_least
            && max_ms < hold_ms
        {
            self.errors.push(syn::Error::new(
                span,
                "`max_hold` is under `hold_at_least`: the key is kept at least that long; \
                 give a max_hold of at least the hold, or leave one out",
            ));
        }
    }

    fn set_on_lost(&mut self, value: &Expr) -> syn::Result<()> {
        let message = "`on_lost` takes \"cancel\" or \"continue\"";
        let lit = str_value(value, message)?;
        self.on_lost = Some(match lit.value().as_str() {
            "cancel" => OnLost::Cancel,
            "continue" => OnLost::Continue,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown on_lost value \"{other}\"; {message}"),
                ));
            }
        });
        Ok(())
    }

    fn set_permits(&mut self, value: &Expr) -> syn::Result<()> {
        let message = "`permits` takes a whole number of holders from 1 to 1000000, e.g. \
                       permits = 3 (at most 3 bodies run at once per key)";
        let Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) = value
        else {
            return Err(syn::Error::new_spanned(value, message));
        };
        let permits = lit
            .base10_parse::<u64>()
            .map_err(|_| syn::Error::new(lit.span(), message))?;
        if permits == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`permits = 0` lets no body run; give at least 1, e.g. permits = 3",
            ));
        }
        if permits > MAX_PERMITS || !lit.suffix().is_empty() {
            return Err(syn::Error::new(lit.span(), message));
        }
        self.permits = Some((permits as u32, lit.span()));
        Ok(())
    }

    fn set_mode(&mut self, value: &Expr) -> syn::Result<()> {
        let message = "`mode` takes \"read\" or \"write\" (a read-write lock: many readers or \
                       one writer); leave it out for a plain lock";
        let lit = str_value(value, message)?;
        let mode = match lit.value().as_str() {
            "read" => Mode::Read,
            "write" => Mode::Write,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown mode \"{other}\"; {message}"),
                ));
            }
        };
        self.mode = Some((mode, lit.span()));
        Ok(())
    }

    fn set_crate(&mut self, value: &Expr) -> syn::Result<()> {
        let message = "`crate` takes the path of the lock-runtime crate as a string, e.g. \
                       crate = \"locks\" after `locks = { package = \"lock-runtime\", .. }` \
                       in Cargo.toml, or crate = \"my_app::locks\" for a re-export";
        let lit = str_value(value, message)?;
        let path = lit
            .parse::<Path>()
            .map_err(|_| syn::Error::new(lit.span(), format!("invalid `crate` path: {message}")))?;
        self.krate = Some(path);
        Ok(())
    }

    /// Cross-option checks, then the finished options.
    fn build(mut self, call_site: Span) -> syn::Result<Options> {
        if self.keys.is_none() && !self.seen.iter().any(|name| name == "key") {
            self.errors.push(syn::Error::new(
                call_site,
                "missing `key`; name the lock, e.g. #[distributed_lock(key = \"stock:<id>\")]",
            ));
        }
        self.check_hold_at_least();
        self.check_max_hold();
        self.check_permits();
        self.check_mode();
        self.errors.finish()?;
        let Some(keys) = self.keys else {
            // Unreachable: a missing or invalid key pushed an error above.
            return Err(syn::Error::new(call_site, "missing `key`"));
        };
        Ok(Options {
            keys,
            ttl: self.ttl,
            wait: self.wait,
            watchdog: self.watchdog,
            on_lost: self.on_lost,
            fencing: self.fencing,
            hold_at_least_ms: self.hold_at_least,
            max_hold: self.max_hold,
            permits: self.permits,
            mode: self.mode.map(|(mode, _)| mode),
            client: self.client,
            krate: self.krate,
        })
    }

    /// What `hold_at_least` cannot go with: several keys, or a written `ttl` under it.
    fn check_hold_at_least(&mut self) {
        if let Some((hold_ms, span)) = self.hold_at_least {
            if matches!(self.keys, Some(Keys::Many(_))) {
                self.errors.push(syn::Error::new(
                    span,
                    "`hold_at_least` is for one key (a job scheduled on every replica); \
                     with `key = [..]` leave it out",
                ));
            }
            // Without a written `ttl`, the runtime checks it against the ttl in force (the
            // client's default), when the lock is taken.
            if let Some(DurationValue::Millis(ttl_ms, _)) = self.ttl
                && hold_ms > ttl_ms
            {
                self.errors.push(syn::Error::new(
                    span,
                    "`hold_at_least` is over `ttl`: the ttl is the longest the key is kept; \
                     give a ttl at least as long, e.g. ttl = \"60s\", hold_at_least = \"30s\"",
                ));
            }
        }
    }

    /// What a semaphore (`permits`) cannot take: several keys, `fencing = true`,
    /// `hold_at_least`.
    fn check_permits(&mut self) {
        if let Some((_, span)) = self.permits {
            let refuse = |what: &str| {
                syn::Error::new(span, format!("`permits` makes a semaphore, which {what}"))
            };
            if matches!(self.keys, Some(Keys::Many(_))) {
                self.errors
                    .push(refuse("takes one key; write key = \"...\", not key = [..]"));
            }
            if self.fencing == Some(true) {
                self.errors
                    .push(refuse("issues no fencing tokens; leave `fencing` out"));
            }
            if self.hold_at_least.is_some() {
                self.errors
                    .push(refuse("has no minimum hold; leave `hold_at_least` out"));
            }
        }
    }

    /// What a read-write lock cannot take: several keys, `hold_at_least`, and (for a
    /// reader, which gets no fence) `fencing = true`.
    fn check_mode(&mut self) {
        let Some((mode, span)) = self.mode else {
            return;
        };
        if self.permits.is_some() {
            self.errors.push(syn::Error::new(
                span,
                "`mode` makes a read-write lock and `permits` a semaphore; a key is one or the \
                 other: leave one of them out",
            ));
        }
        if matches!(self.keys, Some(Keys::Many(_))) {
            self.errors.push(syn::Error::new(
                span,
                "`mode` is for one key (a read-write lock); with `key = [..]` leave it out",
            ));
        }
        if let Some((_, hold_span)) = self.hold_at_least {
            self.errors.push(syn::Error::new(
                hold_span,
                "`hold_at_least` is for a scheduled job's plain lock; with `mode` leave it out",
            ));
        }
        if mode == Mode::Read
            && self.fencing == Some(true)
            && let Some(fencing_span) = self.fencing_span
        {
            self.errors.push(syn::Error::new(
                fencing_span,
                "a reader gets no fencing token (readers do not change what they read); \
                 fencing is for `mode = \"write\"`, so remove `fencing = true` here",
            ));
        }
    }
}

/// Several errors reported together rather than one per build.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

fn str_value<'a>(value: &'a Expr, message: &str) -> syn::Result<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(other, message)),
    }
}

/// A non-empty string literal template.
fn template_value<'a>(value: &'a Expr, message: &str) -> syn::Result<&'a LitStr> {
    let lit = str_value(value, message)?;
    if lit.value().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "the key template is empty; name the lock, e.g. key = \"stock:<id>\"",
        ));
    }
    Ok(lit)
}

fn bool_value(value: &Expr, name: &str) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(LitBool { value, .. }),
            ..
        }) => Ok(*value),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` takes `true` or `false`"),
        )),
    }
}

/// The value of the duration option `name`: a string literal is parsed here (see
/// [`parse_duration`]); any other literal is an error (`ttl = 10` has no unit); any other
/// expression is kept for the compiler to check as a `Duration`. `example` is a valid
/// literal for the error messages, e.g. `"10s"`.
pub(crate) fn duration_value(
    value: &Expr,
    name: &str,
    example: &str,
) -> syn::Result<DurationValue> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(DurationValue::Millis(parse_duration(lit)?, lit.span())),
        Expr::Lit(other) => Err(syn::Error::new_spanned(
            other,
            format!(
                "`{name}` takes a duration string, e.g. {name} = \"{example}\", or an \
                 expression of type `Duration`, e.g. {name} = Duration::from_secs(10)"
            ),
        )),
        expr => Ok(DurationValue::Expr(expr.clone())),
    }
}

/// The units a duration may use, for the error messages.
const UNITS: &str = "ms, s, m, h, d; also ns, us, min, hours, days, weeks and the other \
                     spellings humantime reads";

/// Parses a duration as `humantime` does (`"250ms"`, `"10s"`, `"1.5s"`, `"1m30s"`,
/// `"2h 30min"`) into whole milliseconds, the unit Redis counts leases in.
pub(crate) fn parse_duration(lit: &LitStr) -> syn::Result<u64> {
    use humantime::DurationError;

    let text = lit.value();
    let error = |message: String| syn::Error::new(lit.span(), message);
    let duration = humantime::parse_duration(&text).map_err(|err| {
        error(match err {
            DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => {
                if text.trim() == value.to_string() {
                    format!(
                        "duration \"{text}\" has no unit; write \"{value}s\" or \"{value}ms\" \
                         (units: {UNITS})"
                    )
                } else {
                    format!(
                        "duration \"{text}\" has a number without a unit ({value}); give each \
                         number a unit, e.g. \"1m30s\" (units: {UNITS})"
                    )
                }
            }
            DurationError::UnknownUnit { unit, .. } => format!(
                "unknown unit \"{unit}\" in duration \"{text}\"; write e.g. \"10s\", \
                 \"1.5s\" or \"1m30s\" (units: {UNITS})"
            ),
            DurationError::NumberOverflow => format!(
                "duration \"{text}\" is too long to count in milliseconds; write a shorter \
                 one, e.g. \"10s\""
            ),
            _ => format!(
                "invalid duration \"{text}\"; write a number and a unit, e.g. \"10s\", \
                 \"1.5s\", \"250ms\" or \"1m30s\" (units: {UNITS})"
            ),
        })
    })?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(error(format!(
            "duration \"{text}\" is not a whole number of milliseconds, which is what Redis \
             counts leases in; round it, e.g. \"{}ms\"",
            duration.as_millis() + 1
        )));
    }
    u64::try_from(duration.as_millis()).map_err(|_| {
        error(format!(
            "duration \"{text}\" is too long to count in milliseconds; write a shorter \
             one, e.g. \"10s\""
        ))
    })
}
