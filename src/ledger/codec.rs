//! How domain values are stored: the vocabulary as its canonical text,
//! timestamps as fixed-width UTC text, JSON as canonical text.
//!
//! The text forms are what the migration's CHECK constraints expect; keep the
//! two in step.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::sqlite::{SqliteArgumentValue, SqliteRow, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Row, Sqlite, Type};

use super::error::LedgerError;
use crate::menu::MenuId;
use crate::vocab::{Arm, CycleStatus, Digest, Method, ProposerKind, StageState, VerdictKind};

/// Stores a closed enum as its canonical spelling and reads it back strictly.
macro_rules! text_enum {
    ($t:ty) => {
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
                <&str as Encode<'q, Sqlite>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> Decode<'r, Sqlite> for $t {
            fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Sqlite>>::decode(value)?;
                Ok(text.parse::<$t>()?)
            }
        }
    };
}

text_enum!(VerdictKind);
text_enum!(StageState);
text_enum!(CycleStatus);
text_enum!(Arm);
text_enum!(ProposerKind);
text_enum!(Method);

impl Type<Sqlite> for MenuId {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <str as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for MenuId {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <&str as Encode<'q, Sqlite>>::encode(self.as_str(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for MenuId {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Sqlite>>::decode(value)?;
        text.parse::<MenuId>()
            .map_err(|()| format!("`{text}` is not a menu id").into())
    }
}

impl Type<Sqlite> for Digest {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <str as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for Digest {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(self.as_str().to_owned(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for Digest {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <String as Decode<Sqlite>>::decode(value)?;
        Ok(Digest::try_from(text)?)
    }
}

/// The stored form of a timestamp: UTC, microseconds, fixed width, so that
/// text order is time order (the CHECKs in the migration rely on the shape).
pub(crate) fn ts(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
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

/// Reads a JSON text column.
pub(crate) fn json_col(row: &SqliteRow, col: &str) -> Result<Value, sqlx::Error> {
    let text: String = row.try_get(col)?;
    parse_json(col, &text)
}

/// Reads a nullable JSON text column.
pub(crate) fn opt_json_col(row: &SqliteRow, col: &str) -> Result<Option<Value>, sqlx::Error> {
    let text: Option<String> = row.try_get(col)?;
    text.map(|t| parse_json(col, &t)).transpose()
}

fn parse_json(col: &str, text: &str) -> Result<Value, sqlx::Error> {
    serde_json::from_str(text).map_err(|e| sqlx::Error::ColumnDecode {
        index: col.to_string(),
        source: Box::new(e),
    })
}
