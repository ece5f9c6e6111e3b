//! How domain values are stored: the vocabulary as its canonical text,
//! timestamps as fixed-width UTC text (SQLite) or `TIMESTAMPTZ`
//! (PostgreSQL), JSON as canonical text.
//!
//! The text forms are what the migrations' CHECK constraints expect; keep
//! them in step.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef};
use sqlx::{ColumnIndex, Decode, Encode, Postgres, Row, Sqlite, Type};

use super::error::LedgerError;
use crate::menu::MenuId;
use crate::vocab::{
    Arm, CycleStatus, DeferredAt, Digest, Method, ProposerKind, StageState, VerdictKind,
};

/// Stores a closed enum as its canonical spelling and reads it back strictly
/// (`TEXT` on both backends).
macro_rules! text_enum {
    ($t:ty) => {
        text_enum!($t, |_text, e| BoxDynError::from(e));
    };
    ($t:ty, |$text:ident, $e:ident| $why:expr) => {
        impl Type<Postgres> for $t {
            fn type_info() -> PgTypeInfo {
                <str as Type<Postgres>>::type_info()
            }
            fn compatible(ty: &PgTypeInfo) -> bool {
                <str as Type<Postgres>>::compatible(ty)
            }
        }

        impl Encode<'_, Postgres> for $t {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> Decode<'r, Postgres> for $t {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                text.parse::<$t>().map_err(|$e| {
                    let $text = text;
                    $why
                })
            }
        }

        impl Type<Sqlite> for $t {
            fn type_info() -> SqliteTypeInfo {
                <str as Type<Sqlite>>::type_info()
            }
            fn compatible(ty: &SqliteTypeInfo) -> bool {
                <str as Type<Sqlite>>::compatible(ty)
            }
        }

        impl<'q> Encode<'q, Sqlite> for $t {
            fn encode_by_ref(
                &self,
                buf: &mut Vec<SqliteArgumentValue<'q>>,
            ) -> Result<IsNull, BoxDynError> {
                <String as Encode<'q, Sqlite>>::encode(self.as_str().to_owned(), buf)
            }
        }

        impl<'r> Decode<'r, Sqlite> for $t {
            fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Sqlite>>::decode(value)?;
                text.parse::<$t>().map_err(|$e| {
                    let $text = text;
                    $why
                })
            }
        }
    };
}

text_enum!(VerdictKind);
text_enum!(StageState);
text_enum!(CycleStatus);
text_enum!(DeferredAt);
text_enum!(Arm);
text_enum!(ProposerKind);
text_enum!(Method);
text_enum!(crate::vocab::WaitKind);
text_enum!(crate::vocab::EngineUse);
text_enum!(MenuId, |text, _e| format!("`{text}` is not a menu id")
    .into());
text_enum!(Digest);
text_enum!(super::runs::TimingSource);

/// A timestamp as a query parameter: on SQLite UTC text, microseconds,
/// fixed width, so that text order is time order (the CHECKs in the
/// migration rely on the shape); on PostgreSQL a `TIMESTAMPTZ`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ts(DateTime<Utc>);

pub(crate) fn ts(t: &DateTime<Utc>) -> Ts {
    Ts(*t)
}

/// The SQLite text form of a timestamp.
pub(crate) fn ts_text(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

impl Type<Sqlite> for Ts {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }
}

impl<'q> Encode<'q, Sqlite> for Ts {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(ts_text(&self.0), buf)
    }
}

impl Type<Postgres> for Ts {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl Encode<'_, Postgres> for Ts {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<Postgres>>::encode_by_ref(&self.0, buf)
    }
}

/// JSON text with object keys sorted at every level, so that equal values are
/// equal text (the duplicate check compares parameters as text).
pub(crate) fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    // With serde_json's default map (a BTreeMap) `sorted` is a no-op; it makes
    // the key order right even if a dependency turns on `preserve_order`.
    sorted(v).to_string()
}

/// Refuses anything but a JSON object where the schema wants one.
pub(crate) fn require_object(what: &'static str, v: &Value) -> Result<(), LedgerError> {
    let found = match v {
        Value::Object(_) => return Ok(()),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    Err(LedgerError::NotAnObject { what, found })
}

/// Reads a JSON text column (of either backend's row).
pub(crate) fn json_col<R>(row: &R, col: &str) -> Result<Value, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let text: String = row.try_get(col)?;
    parse_json(col, &text)
}

/// Reads a nullable JSON text column.
pub(crate) fn opt_json_col<R>(row: &R, col: &str) -> Result<Option<Value>, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let text: Option<String> = row.try_get(col)?;
    text.map(|t| parse_json(col, &t)).transpose()
}

/// Reads a counter stored as a signed 64-bit integer (PostgreSQL has no
/// unsigned types) into the narrower type the row uses.
pub(crate) fn int_col<R, T>(row: &R, col: &str) -> Result<T, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    T: TryFrom<i64>,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    let n: i64 = row.try_get(col)?;
    T::try_from(n).map_err(|e| sqlx::Error::ColumnDecode {
        index: col.to_string(),
        source: Box::new(e),
    })
}

/// [`int_col`] for a nullable column.
pub(crate) fn opt_int_col<R, T>(row: &R, col: &str) -> Result<Option<T>, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    T: TryFrom<i64>,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    let n: Option<i64> = row.try_get(col)?;
    n.map(|n| {
        T::try_from(n).map_err(|e| sqlx::Error::ColumnDecode {
            index: col.to_string(),
            source: Box::new(e),
        })
    })
    .transpose()
}

fn parse_json(col: &str, text: &str) -> Result<Value, sqlx::Error> {
    serde_json::from_str(text).map_err(|e| sqlx::Error::ColumnDecode {
        index: col.to_string(),
        source: Box::new(e),
    })
}
