//! The one way a table of finding codes is declared (the macro `code_table!`): an enum with one variant per finding,
//! and for each its stable code, severity and one-line summary, optionally whether `NCCLENV_STRICT=1` turns it
//! into a refusal. `crate::findings` (the decision's findings) and `crate::explain::codes` (the findings of
//! `ncclenv explain`) declare theirs with it; it imports nothing, so neither imports the other.

/// Declares an enum of finding codes and its table, one entry per variant: `Variant = "code", severity,
/// "summary";` or, after `strict;`, `Variant = "code", severity, strict, "summary";` (which adds
/// `strict_refuses`). The header names the enum and gives the docs of the enum and of each method:
///
/// ```ignore
/// code_table! {
///     enum Code = "One finding.";
///     all = "Every code, in the order of the docs' table.";
///     code = "The stable code.";
///     severity = "Info or warn.";
///     summary = "What the finding means, in one line.";
///     Variant = "variant-code", Warn, "what it means";
/// }
/// ```
///
/// `Severity` is the caller's (`crate::findings::Severity`, also `crate::plan::Severity`), in scope where the
/// table is declared.
macro_rules! code_table {
    (
        enum $name:ident = $enum_doc:literal;
        all = $all_doc:literal;
        code = $code_doc:literal;
        severity = $sev_doc:literal;
        summary = $summary_doc:literal;
        strict = $strict_doc:literal;
        strict;
        $( $(#[$doc:meta])* $v:ident = $code:literal, $sev:ident, $strict:literal, $summary:literal; )*
    ) => {
        $crate::code_table::code_table! {
            enum $name = $enum_doc;
            all = $all_doc;
            code = $code_doc;
            severity = $sev_doc;
            summary = $summary_doc;
            $( $(#[$doc])* $v = $code, $sev, $summary; )*
        }

        impl $name {
            #[doc = $strict_doc]
            pub const fn strict_refuses(self) -> bool {
                match self { $( $name::$v => $strict, )* }
            }
        }
    };
    (
        enum $name:ident = $enum_doc:literal;
        all = $all_doc:literal;
        code = $code_doc:literal;
        severity = $sev_doc:literal;
        summary = $summary_doc:literal;
        $( $(#[$doc:meta])* $v:ident = $code:literal, $sev:ident, $summary:literal; )*
    ) => {
        #[doc = $enum_doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$doc])* $v, )*
        }

        impl $name {
            #[doc = $all_doc]
            pub const ALL: &'static [$name] = &[ $( $name::$v, )* ];

            #[doc = $code_doc]
            pub const fn code(self) -> &'static str {
                match self { $( $name::$v => $code, )* }
            }

            #[doc = $sev_doc]
            pub const fn severity(self) -> Severity {
                match self { $( $name::$v => Severity::$sev, )* }
            }

            #[doc = $summary_doc]
            pub const fn summary(self) -> &'static str {
                match self { $( $name::$v => $summary, )* }
            }
        }
    };
}

pub(crate) use code_table;
