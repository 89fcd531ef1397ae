//! JSON Schemas of the tools' argument and result types, generated from the types themselves.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Value};

/// Self-contained draft 2020-12 schema of `T` (subschemas inlined, except recursive ones).
/// Optional fields are simply not required (never `null`: optional arguments are omitted, and
/// results leave absent fields out), which is the shape model tool APIs accept most widely.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    generated::<T>(SchemaSettings::draft2020_12().for_deserialize())
}

/// [`schema_of`] for what a tool answers: a field left out of answers when empty is not
/// required (clients check answers against it).
pub(crate) fn output_schema_of<T: JsonSchema>() -> Value {
    generated::<T>(SchemaSettings::draft2020_12().for_serialize())
}

fn generated<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let gen = settings
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut v = gen.into_root_schema_for::<T>().to_value();
    strip_null(&mut v);
    tidy(&mut v);
    v
}

/// What validators and models stumble on: the Rust number formats (`"format": "uint"`, not a
/// JSON Schema format; `minimum` says it), and descriptions hard-wrapped as the doc comments
/// they come from.
fn tidy(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let rust_int = |f: &Value| {
                f.as_str().is_some_and(|f| {
                    let bits = f.strip_prefix("uint").or_else(|| f.strip_prefix("int"));
                    bits.is_some_and(|b| b.bytes().all(|c| c.is_ascii_digit()))
                        || matches!(f, "double" | "float")
                })
            };
            if m.get("format").is_some_and(rust_int) {
                m.remove("format");
            }
            if let Some(Value::String(d)) = m.get_mut("description") {
                *d = d.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
            }
            m.values_mut().for_each(tidy);
        }
        Value::Array(a) => a.iter_mut().for_each(tidy),
        _ => {}
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Unsigned counts, wrapped docs.
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// A count of things,
        /// told on two lines.
        count: usize,
        /// Bytes.
        size: u64,
        /// A signed one.
        delta: i32,
    }

    #[test]
    fn schemas_carry_no_rust_formats_and_no_wrapped_descriptions() {
        let s = schema_of::<Args>();
        let text = s.to_string();
        assert!(!text.contains("\"format\""), "{text}");
        assert!(!text.contains("\\n"), "{text}");
        assert_eq!(
            s["properties"]["count"]["description"],
            "A count of things, told on two lines."
        );
        assert_eq!(s["properties"]["count"]["minimum"], 0);
    }
}
