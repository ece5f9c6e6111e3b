//! JSON Schema → grammar: the subset the constrained decoder supports, compiled
//! into nodes; anything outside it is refused with the keyword and its location.

use std::sync::Arc;

use super::json::Json;

use super::number::{Bounds, BoundsError, Limits, NumState};

/// Index of a node in [`Grammar::nodes`].
pub type NodeId = usize;

/// One property of an object node, in schema order.
#[derive(Debug, Clone)]
pub struct Prop {
    /// `"name":`, the key as it is written first in the object.
    pub key: Arc<[u8]>,
    /// `,"name":`, the key after an earlier property.
    pub comma_key: Arc<[u8]>,
    pub value: NodeId,
    pub required: bool,
}

/// What a node of the grammar generates.
#[derive(Debug, Clone)]
pub enum Node {
    /// An object with known properties, emitted in schema order (no others).
    Object(Vec<Prop>),
    /// Any object (`{"type":"json_object"}`, or an object schema without properties).
    FreeObject,
    Array {
        items: NodeId,
        min: usize,
        max: Option<usize>,
    },
    /// Any array.
    FreeArray,
    /// A string of printable ASCII without escapes, `min..=max` characters.
    String {
        min: usize,
        max: Option<usize>,
    },
    /// One of these exact JSON texts (`enum`, `const`, `boolean`, `null`).
    Literals(Vec<Arc<[u8]>>),
    Number(Bounds),
    AnyOf(Vec<NodeId>),
}

/// A compiled schema: nodes, the root, and each node's shortest text in bytes.
#[derive(Debug, Clone)]
pub struct Grammar {
    pub nodes: Vec<Node>,
    pub min_len: Vec<usize>,
    pub root: NodeId,
    /// The node that generates any JSON value (free objects and arrays refer to it).
    pub any: NodeId,
    /// A free string: object keys of free objects.
    pub free_string: NodeId,
}

/// Why a schema cannot be decoded; the message names the keyword and where it is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (at schema path `{path}`)")]
pub struct SchemaError {
    pub message: String,
    pub path: String,
}

/// Keywords that describe and never constrain; accepted and ignored.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// The longest string a free (`maxLength`-less) string may grow to; the token
/// budget usually ends it sooner.
const FREE_STRING_MAX: usize = 4096;

struct Compiler {
    nodes: Vec<Node>,
    min_len: Vec<usize>,
}

fn err(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        message: message.into(),
        path: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
    }
}

fn lit(text: &str) -> Arc<[u8]> {
    Arc::from(text.as_bytes())
}

impl Compiler {
    fn push(&mut self, node: Node, min_len: usize) -> NodeId {
        self.nodes.push(node);
        self.min_len.push(min_len);
        self.nodes.len() - 1
    }

    /// The any-value node and the free string node, which free containers refer to.
    fn any(&mut self) -> (NodeId, NodeId) {
        let string = self.push(
            Node::String {
                min: 0,
                max: Some(FREE_STRING_MAX),
            },
            2,
        );
        let bounds = Bounds::new(false, Limits::default()).expect("unbounded numbers exist");
        let number = self.push(Node::Number(bounds), 1);
        let obj = self.push(Node::FreeObject, 2);
        let arr = self.push(Node::FreeArray, 2);
        let words = self.push(
            Node::Literals(vec![lit("true"), lit("false"), lit("null")]),
            4,
        );
        let any = self.push(Node::AnyOf(vec![obj, arr, string, number, words]), 1);
        (any, string)
    }

    /// Compiles one (sub)schema at `path`: the combinators first (`anyOf`,
    /// `enum`/`const`, a list of types), then the one type it names or implies.
    fn compile(&mut self, schema: &Json, path: &str) -> Result<NodeId, SchemaError> {
        let obj = match schema {
            Json::Object(o) => o.as_slice(),
            Json::Bool(true) => return self.compile(&Json::Object(Vec::new()), path),
            _ => return Err(err(path, "a schema must be an object")),
        };
        check_keywords(obj, path)?;
        if let Some(alts) = get(obj, "anyOf") {
            return self.any_of(obj, alts, path);
        }
        if get(obj, "enum").is_some() || get(obj, "const").is_some() {
            return self.literals(obj, path);
        }
        let ty = match get(obj, "type") {
            None => None,
            Some(Json::String(t)) => Some(t.as_str()),
            Some(Json::Array(ts)) => return self.type_union(obj, ts, path),
            Some(_) => return Err(err(path, "`type` must be a string or an array of strings")),
        };
        let ty = match ty {
            Some(t) => t,
            None if get(obj, "properties").is_some() => "object",
            None if get(obj, "items").is_some() => "array",
            None => {
                // No type and nothing else: any JSON value.
                let (any, _) = self.any();
                return Ok(any);
            }
        };
        self.check_applicable(obj, ty, path)?;
        match ty {
            "object" => self.object(obj, path),
            "array" => self.array(obj, path),
            "string" => self.string(obj, path),
            "integer" | "number" => self.number(obj, ty, path),
            "boolean" => Ok(self.push(Node::Literals(vec![lit("true"), lit("false")]), 4)),
            "null" => Ok(self.push(Node::Literals(vec![lit("null")]), 4)),
            other => Err(err(path, format!("unsupported `type` {other:?}"))),
        }
    }

    /// One node that is any of `ids` (non-empty); its shortest text is theirs.
    fn push_any_of(&mut self, ids: Vec<NodeId>) -> NodeId {
        let min = ids
            .iter()
            .map(|i| self.min_len[*i])
            .min()
            .expect("non-empty");
        self.push(Node::AnyOf(ids), min)
    }

    /// `anyOf` (`alts`), which must stand alone beside annotations.
    fn any_of(
        &mut self,
        obj: &[(String, Json)],
        alts: &Json,
        path: &str,
    ) -> Result<NodeId, SchemaError> {
        let Some(alts) = alts.as_array().filter(|a| !a.is_empty()) else {
            return Err(err(path, "`anyOf` must be a non-empty array of schemas"));
        };
        if let Some((other, _)) = obj
            .iter()
            .find(|(k, _)| !ANNOTATIONS.contains(&k.as_str()) && k != "anyOf")
        {
            return Err(err(
                path,
                format!(
                    "`anyOf` next to `{other}` is not supported; move `{other}` into each alternative"
                ),
            ));
        }
        let mut ids = Vec::new();
        for (i, alt) in alts.iter().enumerate() {
            ids.push(self.compile(alt, &format!("{path}/anyOf/{i}"))?);
        }
        Ok(self.push_any_of(ids))
    }

    /// `enum` or `const`: the exact texts, each of the schema's `type` if it names one.
    fn literals(&mut self, obj: &[(String, Json)], path: &str) -> Result<NodeId, SchemaError> {
        let values: Vec<&Json> = match (get(obj, "enum"), get(obj, "const")) {
            (Some(Json::Array(a)), None) if !a.is_empty() => a.iter().collect(),
            (None, Some(c)) => vec![c],
            (Some(_), Some(_)) => {
                return Err(err(path, "`enum` and `const` together are not supported"));
            }
            _ => return Err(err(path, "`enum` must be a non-empty array")),
        };
        if let Some(ty) = get(obj, "type").and_then(Json::as_str) {
            if let Some(bad) = values.iter().find(|v| !is_type(v, ty)) {
                return Err(err(path, format!("enum value {bad} is not of type {ty:?}")));
            }
        }
        let mut lits = Vec::new();
        for v in values {
            let text = v.to_value().to_string();
            if text.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
                return Err(err(
                    path,
                    format!(
                        "enum value {text} has bytes outside printable ASCII, which the byte-level decoder does not emit"
                    ),
                ));
            }
            lits.push(lit(&text));
        }
        let min = lits.iter().map(|l| l.len()).min().expect("non-empty");
        Ok(self.push(Node::Literals(lits), min))
    }

    /// `"type": ["string", "null"]`: an anyOf over the schema with each type in turn.
    fn type_union(
        &mut self,
        obj: &[(String, Json)],
        types: &[Json],
        path: &str,
    ) -> Result<NodeId, SchemaError> {
        let mut ids = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let Some(t) = t.as_str() else {
                return Err(err(path, "`type` must be a string or an array of strings"));
            };
            let one: Vec<(String, Json)> = obj
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if k == "type" {
                            Json::String(t.into())
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect();
            ids.push(self.compile(&Json::Object(one), &format!("{path}/type/{i}"))?);
        }
        if ids.is_empty() {
            return Err(err(path, "`type` must not be an empty array"));
        }
        Ok(self.push_any_of(ids))
    }

    fn string(&mut self, obj: &[(String, Json)], path: &str) -> Result<NodeId, SchemaError> {
        let min = usize_kw(obj, "minLength", path)?.unwrap_or(0);
        let max = usize_kw(obj, "maxLength", path)?;
        if max.is_some_and(|m| m < min) {
            return Err(err(
                path,
                "`maxLength` is below `minLength`: no string satisfies it",
            ));
        }
        Ok(self.push(
            Node::String {
                min,
                max: Some(max.unwrap_or(FREE_STRING_MAX)),
            },
            min + 2,
        ))
    }

    /// `ty` is `integer` or `number`.
    fn number(
        &mut self,
        obj: &[(String, Json)],
        ty: &str,
        path: &str,
    ) -> Result<NodeId, SchemaError> {
        let f = |k: &str| -> Result<Option<f64>, SchemaError> {
            match get(obj, k) {
                None => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| err(path, format!("`{k}` must be a number"))),
            }
        };
        let limits = Limits {
            minimum: f("minimum")?,
            maximum: f("maximum")?,
            exclusive_minimum: f("exclusiveMinimum")?,
            exclusive_maximum: f("exclusiveMaximum")?,
        };
        match Bounds::new(ty == "integer", limits) {
            Ok(b) => {
                let min = b
                    .min_extra(&NumState::default())
                    .expect("non-empty bounds complete");
                Ok(self.push(Node::Number(b), min))
            }
            Err(BoundsError::Empty) => Err(err(
                path,
                format!("no {ty} satisfies `minimum`/`maximum` here"),
            )),
            Err(BoundsError::TooLarge(v)) => Err(err(
                path,
                format!("bound {v} is beyond the 15 significant digits the decoder writes"),
            )),
        }
    }

    /// Refuses constraint keywords that do not apply to `ty` (they would be silently ignored otherwise).
    fn check_applicable(
        &self,
        obj: &[(String, Json)],
        ty: &str,
        path: &str,
    ) -> Result<(), SchemaError> {
        let allowed: &[&str] = match ty {
            "object" => &["properties", "required", "additionalProperties"],
            "array" => &["items", "minItems", "maxItems"],
            "string" => &["minLength", "maxLength"],
            "integer" | "number" => &["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
            _ => &[],
        };
        for (key, _) in obj {
            if key != "type"
                && !ANNOTATIONS.contains(&key.as_str())
                && !allowed.contains(&key.as_str())
            {
                return Err(err(
                    path,
                    format!("keyword `{key}` does not apply to type {ty:?}"),
                ));
            }
        }
        Ok(())
    }

    fn object(&mut self, obj: &[(String, Json)], path: &str) -> Result<NodeId, SchemaError> {
        match get(obj, "additionalProperties") {
            None | Some(Json::Bool(_)) => {}
            Some(_) => {
                return Err(err(
                    path,
                    "unsupported schema keyword `additionalProperties` as a schema; use true or false",
                ));
            }
        }
        let required: Vec<&str> = match get(obj, "required") {
            None => Vec::new(),
            Some(Json::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| err(path, "`required` must be an array of strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(err(path, "`required` must be an array of strings")),
        };
        let props = match get(obj, "properties") {
            None => {
                if let Some(r) = required.first() {
                    return Err(err(
                        path,
                        format!("`required` names {r:?}, which `properties` does not define"),
                    ));
                }
                // With no properties declared, any object will do (unless none may be added).
                if get(obj, "additionalProperties") == Some(&Json::Bool(false)) {
                    return Ok(self.push(Node::Object(Vec::new()), 2));
                }
                return Ok(self.push(Node::FreeObject, 2));
            }
            Some(Json::Object(p)) => p,
            Some(_) => return Err(err(path, "`properties` must be an object")),
        };
        if let Some(r) = required
            .iter()
            .find(|r| !props.iter().any(|(k, _)| k == **r))
        {
            return Err(err(
                path,
                format!("`required` names {r:?}, which `properties` does not define"),
            ));
        }
        let mut out = Vec::new();
        let mut min = 2;
        let mut first = true;
        for (name, sub) in props {
            let key_json = serde_json::to_string(name).expect("a string serialises");
            if key_json.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
                return Err(err(
                    path,
                    format!("property name {key_json} has bytes outside printable ASCII"),
                ));
            }
            let value = self.compile(sub, &format!("{path}/properties/{name}"))?;
            let is_required = required.contains(&name.as_str());
            let key = lit(&format!("{key_json}:"));
            let comma_key = lit(&format!(",{key_json}:"));
            if is_required {
                min += if first { key.len() } else { comma_key.len() } + self.min_len[value];
                first = false;
            }
            out.push(Prop {
                key,
                comma_key,
                value,
                required: is_required,
            });
        }
        Ok(self.push(Node::Object(out), min))
    }

    fn array(&mut self, obj: &[(String, Json)], path: &str) -> Result<NodeId, SchemaError> {
        let min = usize_kw(obj, "minItems", path)?.unwrap_or(0);
        let max = usize_kw(obj, "maxItems", path)?;
        if max.is_some_and(|m| m < min) {
            return Err(err(
                path,
                "`maxItems` is below `minItems`: no array satisfies it",
            ));
        }
        let Some(items) = get(obj, "items") else {
            if min > 0 {
                return Err(err(path, "`minItems` without `items` is not supported"));
            }
            return Ok(self.push(Node::FreeArray, 2));
        };
        let items = self.compile(items, &format!("{path}/items"))?;
        let len = 2 + min * self.min_len[items] + min.saturating_sub(1);
        Ok(self.push(Node::Array { items, min, max }, len))
    }
}

/// Refuses a keyword the compiler does not know (it would be silently ignored otherwise).
fn check_keywords(obj: &[(String, Json)], path: &str) -> Result<(), SchemaError> {
    for (key, _) in obj {
        let known = matches!(
            key.as_str(),
            "type"
                | "properties"
                | "required"
                | "additionalProperties"
                | "enum"
                | "const"
                | "minimum"
                | "maximum"
                | "exclusiveMinimum"
                | "exclusiveMaximum"
                | "minLength"
                | "maxLength"
                | "anyOf"
                | "items"
                | "minItems"
                | "maxItems"
        );
        if !known && !ANNOTATIONS.contains(&key.as_str()) {
            return Err(err(path, format!("unsupported schema keyword `{key}`")));
        }
    }
    Ok(())
}

/// Does `v` have JSON Schema type `ty`?
fn is_type(v: &Json, ty: &str) -> bool {
    match (ty, v) {
        ("string", Json::String(_))
        | ("number", Json::Number(_))
        | ("boolean", Json::Bool(_))
        | ("null", Json::Null) => true,
        ("integer", Json::Number(n)) => n.is_i64() || n.is_u64(),
        ("object", Json::Object(_)) | ("array", Json::Array(_)) => true,
        _ => false,
    }
}

fn get<'a>(obj: &'a [(String, Json)], key: &str) -> Option<&'a Json> {
    obj.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn usize_kw(obj: &[(String, Json)], key: &str, path: &str) -> Result<Option<usize>, SchemaError> {
    match get(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| err(path, format!("`{key}` must be a non-negative integer"))),
    }
}

impl Grammar {
    /// Compiles a `json_schema` response format's schema.
    pub fn from_schema(schema: &Json) -> Result<Grammar, SchemaError> {
        let mut c = Compiler {
            nodes: Vec::new(),
            min_len: Vec::new(),
        };
        let (any, free_string) = c.any();
        let root = c.compile(schema, "")?;
        Ok(Grammar {
            nodes: c.nodes,
            min_len: c.min_len,
            root,
            any,
            free_string,
        })
    }

    /// The `json_object` response format: any JSON object.
    pub fn json_object() -> Grammar {
        let mut c = Compiler {
            nodes: Vec::new(),
            min_len: Vec::new(),
        };
        let (any, free_string) = c.any();
        let root = c.push(Node::FreeObject, 2);
        Grammar {
            nodes: c.nodes,
            min_len: c.min_len,
            root,
            any,
            free_string,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn j(v: serde_json::Value) -> Json {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn refuses_unsupported_keywords_by_name() {
        let e = Grammar::from_schema(&j(
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}),
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("`pattern`") && e.path == "/properties/a",
            "{e}"
        );
        let e = Grammar::from_schema(&j(json!({"$ref": "#/x"}))).unwrap_err();
        assert!(e.to_string().contains("`$ref`"), "{e}");
        let e = Grammar::from_schema(&j(json!({"type": "integer", "minimum": 3, "maximum": 2})))
            .unwrap_err();
        assert!(e.to_string().contains("no integer"), "{e}");
    }

    #[test]
    fn min_len_of_a_menu_like_schema() {
        let g = Grammar::from_schema(&j(json!({"anyOf": [{
            "type": "object",
            "properties": {"experiment": {"type": "string", "enum": ["remeasure"]},
                           "params": {"type": "object", "properties": {}, "required": [], "additionalProperties": false},
                           "rationale": {"type": "string", "maxLength": 400}},
            "required": ["experiment", "params", "rationale"], "additionalProperties": false}]})))
        .unwrap();
        let shortest = r#"{"experiment":"remeasure","params":{},"rationale":""}"#;
        assert_eq!(g.min_len[g.root], shortest.len());
    }
}
