//! Schema-constrained answers: every answer parses and validates, for schemas
//! shaped like the orchestrator's menu (a root anyOf of objects with an
//! experiment enum, bounded params and a maxLength rationale).

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::serve_support::{Server, chat_body, tiny_model, validate};

/// A parameter: integer or number with bounds, or a string enum.
fn param() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-50i64..50, 0i64..2000)
            .prop_map(|(lo, span)| json!({"type": "integer", "minimum": lo, "maximum": lo + span})),
        (-10.0f64..10.0, 0.0f64..5.0)
            .prop_map(|(lo, span)| json!({"type": "number", "minimum": lo, "maximum": lo + span})),
        proptest::collection::vec("[a-z_]{1,8}", 1..4)
            .prop_map(|v| json!({"type": "string", "enum": v})),
    ]
}

fn entry(id: String) -> impl Strategy<Value = Value> {
    (proptest::collection::vec(param(), 0..3), 0u64..80).prop_map(move |(params, max_len)| {
        let props: serde_json::Map<String, Value> = params.into_iter().enumerate().map(|(i, p)| (format!("p{i}"), p)).collect();
        let required: Vec<&String> = props.keys().collect();
        json!({
            "type": "object",
            "properties": {
                "experiment": {"type": "string", "enum": [id]},
                "params": {"type": "object", "properties": props, "required": required, "additionalProperties": false},
                "rationale": {"type": "string", "maxLength": max_len}
            },
            "required": ["experiment", "params", "rationale"],
            "additionalProperties": false
        })
    })
}

fn menu_schema() -> impl Strategy<Value = Value> {
    proptest::sample::subsequence(
        vec![
            "rerank_pins",
            "remeasure",
            "rebalance_trunk_cache",
            "deepen_warm_set",
            "stage_speculative",
        ],
        1..=5,
    )
    .prop_flat_map(|ids| {
        ids.into_iter()
            .map(|id| entry(id.to_string()))
            .collect::<Vec<_>>()
    })
    .prop_map(|alts| json!({"anyOf": alts}))
}

fn ask(s: &Server, schema: &Value, max_tokens: u64, temperature: f64, seed: u64) -> Value {
    let mut body = chat_body("Choose one experiment from the menu.", max_tokens);
    body["temperature"] = json!(temperature);
    body["seed"] = json!(seed);
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "menu_choice", "schema": schema, "strict": true}});
    let r = s.chat(&body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn menu_shaped_schemas_always_validate() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(
                menu_schema(),
                100u64..260,
                prop_oneof![Just(0.0), Just(0.8)],
                any::<u64>(),
            ),
            |(schema, max_tokens, temperature, seed)| {
                let v = ask(&s, &schema, max_tokens, temperature, seed);
                let content = v["choices"][0]["message"]["content"].as_str().unwrap();
                let answer: Value = serde_json::from_str(content)
                    .map_err(|e| TestCaseError::fail(format!("{content}: {e}")))?;
                validate(&schema, &answer, "")
                    .map_err(|e| TestCaseError::fail(format!("{content}: {e}")))?;
                prop_assert_eq!(&v["choices"][0]["finish_reason"], "stop");
                prop_assert!(v["usage"]["completion_tokens"].as_u64().unwrap() <= max_tokens);
                // Keys in schema order.
                let keys: Vec<&String> = answer.as_object().unwrap().keys().collect();
                prop_assert_eq!(keys, vec!["experiment", "params", "rationale"]);
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn tight_budgets_still_close_and_json_object_is_an_object() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    let schema = json!({"type": "object", "properties": {"why": {"type": "string", "maxLength": 400}, "n": {"type": "number", "minimum": 0.5, "maximum": 0.75}}, "required": ["why", "n"], "additionalProperties": false});
    // The shortest answer is {"why":"","n":0.5} = 18 bytes.
    for max_tokens in [18, 19, 25, 40] {
        let v = ask(&s, &schema, max_tokens, 0.0, 0);
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        let answer: Value =
            serde_json::from_str(content).unwrap_or_else(|e| panic!("{content}: {e}"));
        validate(&schema, &answer, "").unwrap();
        assert!(content.len() as u64 <= max_tokens, "{content}");
    }
    let mut body = chat_body("json please", 40);
    body["response_format"] = json!({"type": "json_object"});
    let v = s.chat(&body).json();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        serde_json::from_str::<Value>(content)
            .unwrap_or_else(|e| panic!("{content}: {e}"))
            .is_object()
    );
}
