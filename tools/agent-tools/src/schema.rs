//! JSON Schemas of the tools' argument and result types, generated from the types themselves.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Value};

/// Self-contained draft 2020-12 schema of `T` (subschemas inlined, except recursive ones).
/// Optional fields are simply not required (never `null`: optional arguments are omitted, and
/// results leave absent fields out), which is the shape model tool APIs accept most widely.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let gen = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut v = gen.into_root_schema_for::<T>().to_value();
    strip_null(&mut v);
    v
}

/// Removes what `Option` adds: `null` from `type` lists, `{"type": "null"}` branches of a
/// two-way `anyOf`, and `"default": null`.
fn strip_null(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("default") == Some(&Value::Null) {
                m.remove("default");
            }
            if let Some(Value::Array(types)) = m.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let t = types.remove(0);
                    m.insert("type".into(), t);
                }
            }
            let null = json!({"type": "null"});
            if let Some(Value::Array(branches)) = m.get("anyOf") {
                if branches.len() == 2 && branches.contains(&null) {
                    let keep = branches.iter().find(|b| **b != null).cloned();
                    m.remove("anyOf");
                    if let Some(Value::Object(inner)) = keep {
                        for (k, val) in inner {
                            m.entry(k).or_insert(val);
                        }
                    }
                }
            }
            m.values_mut().for_each(strip_null);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_null),
        _ => {}
    }
}
